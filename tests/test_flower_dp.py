"""The audit composes with Flower's own client-level DP: ``server_app`` with ``dp-clip`` wraps the
auditing strategy in ``DifferentialPrivacyClientSideFixedClipping``, the client app clips its reply with
Flower's ``fixedclipping_mod`` when the server sends a clipping norm, and the audit attacks the clipped
replies (what the server sees) in Flower's simulation engine."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

flwr = pytest.importorskip("flwr", reason="the Flower bridge needs pip install 'leakshield[flower]'")

from flwr.app import ArrayRecord, ConfigRecord, RecordDict  # noqa: E402

from leakshield.defenses.clipping import update_norm  # noqa: E402
from leakshield.experiment.store import ResultStore  # noqa: E402
from leakshield.flower import client_app, server_app  # noqa: E402
from leakshield.flower.apps import asks_for_clipping  # noqa: E402

LR = 0.1
CLIP = 1e-3  # the reply's model change lr·||g|| is ~0.1–1 on an untrained LeNet: the bound bites
CONFIG = {
    "name": "flower-dp-test",
    "dataset": {"name": "digits"},
    "models": [{"name": "lenet"}],
    "fl": {"clients": 2, "local": {"algorithm": "fedsgd", "batch_size": 1, "local_lr": LR}},
    "defenses": [{"name": "none"}],
    "attack": {"threat": {"labels_known": True}},
    "attacks": [{"name": "gradient-inversion", "optimizer": "adam", "lr": 0.1, "iterations": 20,
                 "distance": "cosine", "labels": "known"}],
}  # fmt: skip


def test_the_client_clips_only_when_flowers_dp_wrapper_asks() -> None:
    def message(config: dict) -> SimpleNamespace:  # what the check reads of a Message: its content
        return SimpleNamespace(
            content=RecordDict({"arrays": ArrayRecord({}), "config": ConfigRecord(config)})
        )

    assert asks_for_clipping(message({"server-round": 1, "clipping_norm": 0.5}))
    assert not asks_for_clipping(message({"server-round": 1}))


def test_audit_under_flowers_central_dp_attacks_the_clipped_replies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flwr.simulation import run_simulation

    import leakshield.flower.strategy as strategy

    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    seen: list[float] = []
    original = strategy.update_from_reply

    def recording(sent, reply, facts):  # type: ignore[no-untyped-def]
        update = original(sent, reply, facts)
        seen.append(float(update_norm(update.delta)) * LR)  # FedSGD: the model moved by lr·g
        return update

    monkeypatch.setattr(strategy, "update_from_reply", recording)
    path = tmp_path / "dp.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    out = tmp_path / "flower"
    server = server_app(
        path,
        defaults={"num-rounds": 1, "out": str(out), "audit-clients": 2, "dp-clip": CLIP, "dp-noise": 1.0},
    )
    run_simulation(
        server,
        client_app(path),
        num_supernodes=2,
        backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2}},
    )
    records = ResultStore(out / "results.sqlite").records()
    assert [r.status for r in records] == ["ok"], records[0].error if records else "no audit"
    assert len(seen) == 2 and all(norm <= CLIP * (1 + 1e-4) for norm in seen), seen
    assert all(norm > CLIP * 0.99 for norm in seen)  # clipped down to the bound, not below it
    assert torch.isfinite(torch.tensor(seen)).all()


def test_central_dp_comes_from_the_run_config_or_the_configs_dp_fedavg() -> None:
    """leakshield's server stage does not run under Flower: a central dp-fedavg in the config becomes
    Flower's wrapper with its σ and S; the run config's dp-clip overrides it; a local one stays a mod."""
    from leakshield.flower.apps import SERVER_DEFAULTS, central_dp_settings

    central = [{"name": "dp-fedavg", "params": {"noise_multiplier": 0.7, "clip": 2.0}}]
    local = [{"name": "dp-fedavg", "params": {"mode": "local"}}]
    assert central_dp_settings(central, SERVER_DEFAULTS) == (0.7, 2.0)
    assert central_dp_settings(local, SERVER_DEFAULTS) is None
    assert central_dp_settings([{"name": "none"}], SERVER_DEFAULTS) is None
    overridden = {**SERVER_DEFAULTS, "dp-clip": 0.5, "dp-noise": 3.0}
    assert central_dp_settings(central, overridden) == (3.0, 0.5)
