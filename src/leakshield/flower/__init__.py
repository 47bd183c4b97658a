"""The Flower bridge (``pip install 'leakshield[flower]'``; flwr 1.41, Message API): leakshield's
defenses in real federations and a leakage audit of their updates.

- Client: :class:`LeakshieldTrainer` (the honest client as a train step, all defense stages, replies
  with the protocol facts), :class:`ReleaseDefenseMod` / :func:`release_mods` (update-stage defenses
  as mods), :class:`SelfAuditMod` (a client scores the leakage of its own update), :class:`GuardMod`
  (the client guard stage: refuse a model that is not the agreed architecture or that a guard refuses),
  :class:`LeakageFilterMod` (a client attacks its own update and refuses or defends it when it leaks),
  :class:`PerClientTrainer` (clients with local settings of their own).
- Server: :class:`AuditingStrategy` (wraps any strategy; attacks a sample of replies; results in a
  leakshield run directory).
- :func:`client_app` / :func:`server_app`: ready-made apps for an experiment config
  (``examples/flower/``); :func:`secure_client_app` / :func:`secure_server_app`: the same under Flower's
  SecAgg+ (``SecAggPlusWorkflow``), the audit attacking each round's unmasked aggregate.
- A train step of your own: :class:`leakshield.fl.DefenseSteps` gives it the data, gradient and release
  stages (same randomness as leakshield's client); attach ``ReportedFacts(...).to_record()`` to the reply
  under :data:`FACTS_RECORD` so the auditing strategy knows how the update was computed."""

from __future__ import annotations

try:
    import flwr  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    from leakshield.errors import LeakshieldError

    raise LeakshieldError(
        "the Flower bridge needs Flower: pip install 'leakshield[flower]' (flwr 1.41 with Ray)"
    ) from exc

from leakshield.flower.apps import client_app, server_app
from leakshield.flower.client import LeakshieldTrainer, PerClientTrainer, SelfAuditMod, without_suffix
from leakshield.flower.guard import GuardMod
from leakshield.flower.leakage_filter import FILTER_LOG, LeakageFilterMod, LeakageFilterSettings
from leakshield.flower.mods import ReleaseDefenseMod, announced, is_release_only, release_mods
from leakshield.flower.records import FACTS_RECORD, ReportedFacts, reply_state, update_from_reply
from leakshield.flower.secure_aggregation import SecureAggregationAudit, secure_client_app, secure_server_app
from leakshield.flower.strategy import AuditingStrategy

__all__ = [
    "FACTS_RECORD",
    "FILTER_LOG",
    "AuditingStrategy",
    "GuardMod",
    "LeakageFilterMod",
    "LeakageFilterSettings",
    "LeakshieldTrainer",
    "PerClientTrainer",
    "ReleaseDefenseMod",
    "ReportedFacts",
    "SecureAggregationAudit",
    "SelfAuditMod",
    "announced",
    "client_app",
    "is_release_only",
    "release_mods",
    "reply_state",
    "secure_client_app",
    "secure_server_app",
    "server_app",
    "update_from_reply",
    "without_suffix",
]
