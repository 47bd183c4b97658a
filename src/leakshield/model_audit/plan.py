"""The audit's plan: which attacks of each threat model can work on the user's model and federation
(each precondition checked on the built model, every attack left out with its reason), which defenses
at which strengths, and the experiment grid that measures them — the leaderboard's protocol (stage 1
chooses each row's strongest attack on every seed, stage 2 reruns it on fresh victims per seed) on the
user's model, data, batch size and local training."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from leakshield.attacks import ATTACKS, create_attack
from leakshield.data.types import DatasetSplits, ImageSet
from leakshield.defenses import DEFENSES
from leakshield.errors import ConfigError, LeakshieldError
from leakshield.experiment.config import DefenseSetting, ExperimentConfig, parse_config
from leakshield.experiment.yaml_files import parse_yaml
from leakshield.leaderboard.presets import default_leaderboard_text
from leakshield.leaderboard.strengths import with_rung_targets, with_rungs
from leakshield.model_audit.config import AuditConfig
from leakshield.model_audit.facts import ModelFacts
from leakshield.models.imported import exception_line
from leakshield.threats import Adversary

#: the label of the federation's own defenses (a stack of them)
YOURS = "yours"
#: threat key → the generic attacks tried, strongest-known first
BATTERY: dict[str, tuple[str, ...]] = {
    "honest-server": ("ig", "gradinversion", "ggl", "analytic", "spear", "april", "fedavg-leakage"),
    "malicious-server": ("imprint", "trap-weights"),
    "malicious-client": ("hitaj",),
}
#: attacks that read the structure of one gradient (several local steps blend it)
ONE_GRADIENT = ("analytic", "spear", "april")
#: threat key → the adversaries of its attacks (an adaptive attack joins the key of its adversary)
ADVERSARIES = {
    "honest-server": (Adversary.OBSERVING_SERVER,),
    "malicious-server": (Adversary.PARAMETER_SERVER, Adversary.ARCHITECTURE_SERVER),
    "malicious-client": (Adversary.PARTICIPANT,),
}


@dataclass(frozen=True)
class PlannedAttack:
    """One attack of the battery: its threat key, name, parameters (the effort's budgets), the defense
    rows it meets (None: every row; adaptive attacks: those they target) and, when left out, why."""

    threat: str
    name: str
    params: dict[str, Any]
    against: tuple[str, ...] | None = None
    reason: str | None = None

    @property
    def planned(self) -> bool:
        return self.reason is None

    def entry(self) -> dict[str, Any]:
        """The attack as an experiment config lists it."""
        return {"name": self.name, **self.params, **({"against": list(self.against)} if self.against else {})}


def leaderboard_document() -> dict[str, Any]:
    """The shipped leaderboard file: its strength ladders and its presets' attack budgets."""
    return parse_yaml(default_leaderboard_text(), "configs/leaderboard.yaml")


def defense_rows(
    config: AuditConfig, document: dict[str, Any], model: nn.Module, facts: ModelFacts
) -> tuple[list[Any], list[tuple[str, str]]]:
    """no defense, the federation's own (``yours``), then each candidate that can work on the model with
    its ladder's rungs; and (label, reason) of each candidate left out."""
    rows: list[Any] = ["none"]
    stack = config.own_stack()
    if stack:
        rows.append({"label": YOURS, "stack": stack})
    candidates, left_out = [], []
    for setting in config.candidates:
        reason = defense_reason(setting, model, facts)
        if reason is None:
            candidates.append(_entry(setting))
        else:
            left_out.append((setting.display, reason))
    rows += with_rungs(
        candidates,
        document,
        config.rungs,
        source="the strength ladders (configs/leaderboard.yaml)",
        preset="audit",
    )
    return rows, left_out


def defense_reason(setting: DefenseSetting, model: nn.Module, facts: ModelFacts) -> str | None:
    """Why a candidate defense cannot work on this model and data (None: it can)."""
    from leakshield.defenses.soteria import defended_linear

    for entry in setting.entries:
        try:
            params = DEFENSES.validate(entry["name"], entry["params"])
            params.check_data(facts.image, facts.classes)
            if DEFENSES.get(entry["name"]).name == "soteria":
                defended_linear(model, entry["params"].get("layer"))
        except (ValueError, LeakshieldError) as exc:
            return " ".join(str(exc).split())
    return None


def _entry(setting: DefenseSetting) -> dict[str, Any]:
    data = setting.model_dump(mode="json", exclude_none=True)
    if setting.stack is None:
        data.pop("stack", None)
    return data


def defense_names(rows: list[Any]) -> set[str]:
    """The registered names of every defense in ``rows`` (stacks opened)."""
    found = set()
    for row in rows:
        setting = DefenseSetting.model_validate(row if isinstance(row, dict) else {"name": row})
        found |= {DEFENSES.get(e["name"]).name for e in setting.entries}
    return found


def precondition(
    name: str, model: nn.Module, facts: ModelFacts, config: AuditConfig, attacker_lacks: bool
) -> str | None:
    """Why attack ``name`` cannot work on this model and federation (None: it can)."""
    if name in config.leave_out:
        return "left out by the config (leave_out)"
    attack = create_attack(name, {})
    try:
        ATTACKS.validate(name, {}).check_data(facts.image, facts.classes)
        if hasattr(attack, "check_model"):
            attack.check_model(model, facts.image)
    except Exception as exc:  # the attack's own reason; a user's model may fail it in any way
        return because(exc)
    local = config.federation.local
    if name in ONE_GRADIENT and local.algorithm == "fedavg" and local.local_epochs > 1:
        return (
            f"it reads one gradient, and each update is {local.local_epochs} local steps (FedSGD, or "
            "FedAvg of one local step)"
        )
    if name == "gradinversion" and not facts.batchnorm:
        return "the model has no BatchNorm layer, whose statistics its prior matches"
    if name == "fedavg-leakage" and local.algorithm != "fedavg":
        return "the clients share FedSGD gradients; it inverts several local steps of FedAvg"
    if name == "hitaj" and config.federation.clients < 2:
        return "one client: no other client's class to learn"
    if name == "hitaj" and not attacker_lacks:
        return "the attacking client (the last) holds every class under this partition: nothing to learn"
    return None


def because(exc: Exception) -> str:
    """A check's exception as a reason: its message, named by its type unless it is a refusal
    (``ValueError``, a leakshield error) rather than a crash."""
    text = " ".join(str(exc).split())
    return text if text and isinstance(exc, ValueError | LeakshieldError) else exception_line(exc)


def attacker_lacks_a_class(data: DatasetSplits, clients: list[ImageSet]) -> bool:
    """Whether the last client (the GAN attack's default attacker) holds no image of some class."""
    if not clients:
        return False
    held = set(clients[-1].y.tolist())
    return len(held) < data.info.num_classes


def plan_attacks(
    config: AuditConfig,
    facts: ModelFacts,
    model: nn.Module,
    data: DatasetSplits,
    clients: list[ImageSet],
    rows: list[Any],
    document: dict[str, Any],
) -> list[PlannedAttack]:
    """Every attack of the chosen threats, planned or left out with the reason; adaptive attacks of the
    defenses in ``rows`` join their adversary's threat."""
    budgets = ((document.get("presets") or {}).get(config.effort) or {}).get("params") or {}
    lacks = attacker_lacks_a_class(data, clients)
    names = defense_names(rows)
    out = []
    for threat in config.threats:
        listed = list(BATTERY[threat])
        adaptive = sorted(
            e.name
            for e in ATTACKS
            if e.targets and set(e.targets) & names and e.threat.adversary in ADVERSARIES[threat]
        )
        for name in [*listed, *(a for a in adaptive if a not in listed)]:
            reason = precondition(name, model, facts, config, lacks)
            params = dict(budgets.get(name) or {})
            against = None
            if name == "hitaj":
                params["attacker"] = config.federation.clients - 1
                against = ("none", *((YOURS,) if config.defenses else ()))
            out.append(PlannedAttack(threat, name, params, against, reason))
    return out


def experiment_data(config: AuditConfig, attacks: list[PlannedAttack], rows: list[Any]) -> dict[str, Any]:
    """The grid (an experiment config mapping) the audit runs."""
    planned = [a.entry() for a in attacks if a.planned]
    if not planned:
        raise ConfigError(
            "threats: no attack of the chosen threats can work on this model (see the plan's "
            "reasons); nothing to audit"
        )
    fl = config.federation.model_dump(mode="json")
    return {
        "name": config.name,
        "seeds": list(config.seeds),
        "dataset": config.data.model_dump(mode="json"),
        "models": [config.model.model_dump(mode="json", exclude_none=True, exclude={"against"})],
        "fl": fl,
        # the victim's update as its federation computes it: its batch size, local epochs and optimizer
        "attack": {
            "rounds": sorted(set(config.attack_rounds)),
            "threat": {"labels_known": config.labels_known},
        },
        "victims": {
            "count": config.victims,
            "batch_size": config.federation.local.batch_size,
            "seed": 0,
            "per_seed": True,
        },
        "defenses": rows,
        "attacks": with_rung_targets(planned, rows),
        "utility": {"rounds": config.rounds},
        "report": {
            "rows": ["defense", "attack"],
            "columns": ["metric"],
            "values": ["ssim", "psnr", "asr", "accuracy"],
        },
    }


def experiment_config(config: AuditConfig, attacks: list[PlannedAttack], rows: list[Any]) -> ExperimentConfig:
    """:func:`experiment_data`, validated as every grid is."""
    return parse_config(experiment_data(config, attacks, rows), source=f"the audit grid of {config.name}")


def plan_lines(attacks: list[PlannedAttack]) -> list[str]:
    """The battery as the plan prints it: per threat, the attacks that run and those left out, why."""
    from leakshield.model_audit.config import THREATS

    lines = []
    for threat in THREATS:
        mine = [a for a in attacks if a.threat == threat]
        if not mine:
            continue
        lines.append(f"{threat} ({THREATS[threat]}):")
        runs = [
            a.name + (f" (against {', '.join(a.against)})" if a.against else "") for a in mine if a.planned
        ]
        lines.append(f"  runs: {', '.join(runs) or 'nothing'}")
        lines += [f"  left out: {a.name}: {a.reason}" for a in mine if not a.planned]
    return lines
