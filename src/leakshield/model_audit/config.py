"""The audit config (``leakshield audit CONFIG``): a user's model and data, the federation they run, the
defenses they run now, the defenses they would consider and the accuracy they can give up; validated
with pydantic, errors naming the field and the allowed values."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pydantic

from leakshield.errors import ConfigError, LeakshieldError
from leakshield.experiment.config import Component, DatasetSection, DefenseSetting
from leakshield.experiment.yaml_files import file_name, read_yaml
from leakshield.fl.config import FLConfig
from leakshield.model_audit.membership_risk import MembershipSection
from leakshield.models.imported import model_entry
from leakshield.registry import component_entry, format_validation_error

#: threat key → what it means, the adversaries the audit plans attacks for
THREATS = {
    "honest-server": "an honest-but-curious server reading the updates it receives",
    "malicious-server": "a server that changes the model it sends",
    "malicious-client": "a client of the federation training a GAN on the shared model",
}
#: the defenses considered by default, each at the rungs of its strength ladder
CANDIDATES = ("gaussian-noise", "pruning", "soteria")


class AuditConfig(pydantic.BaseModel):
    """name: the run folder (``runs/<name>``). model: a registered name or ``{import: module:name,
    <param>: …}``. data: the dataset (``imagefolder`` with ``root``, ``npz`` with ``file``…).
    federation: the FL protocol (clients, local training: algorithm, batch_size, local_epochs,
    local_lr…, secure_aggregation). rounds: the FL rounds the federation trains before its accuracy
    is measured. attack_rounds: the rounds after which a victim is attacked (0: the untrained model,
    usually the worst case). defenses: what the federation runs now (empty: nothing). candidates: the
    defenses to weigh, each at ``rungs`` strengths of its ladder. budget: the accuracy you can give up,
    a fraction in [0, 1] (0.02: two points). threats: the adversaries to audit. seeds: the
    repetitions (model initialisation, victims, training); the unit of every interval. victims: batches
    attacked per seed to choose each row's strongest attack; fresh_victims: the fresh batches
    per seed its numbers come from. effort: the attacks' budgets (the leaderboard presets').
    leave_out: attacks not to run (the plan lists them, "left out by the config"). labels_known: the
    server knows the victims' labels (the worst case, as the leaderboard assumes). membership: the
    membership game on the same model, data and local training (``{run: false}`` leaves it out)."""

    model_config = pydantic.ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = "audit"
    model: Component
    data: DatasetSection
    federation: FLConfig = pydantic.Field(default_factory=FLConfig)
    rounds: int = pydantic.Field(default=10, ge=1, le=10_000)
    attack_rounds: list[pydantic.NonNegativeInt] = pydantic.Field(
        default_factory=lambda: [0, 2], min_length=1
    )
    defenses: list[DefenseSetting] = []
    candidates: list[DefenseSetting] = pydantic.Field(
        default_factory=lambda: [DefenseSetting(name=n) for n in CANDIDATES]
    )
    rungs: int = pydantic.Field(default=2, ge=0, le=9)
    budget: float = pydantic.Field(default=0.02, ge=0, le=1)
    threats: list[Literal["honest-server", "malicious-server", "malicious-client"]] = pydantic.Field(
        default_factory=lambda: list(THREATS), min_length=1
    )
    seeds: list[int] = pydantic.Field(default_factory=lambda: [0, 1, 2], min_length=1)
    victims: int = pydantic.Field(default=2, ge=1, le=1000)
    fresh_victims: int = pydantic.Field(default=6, ge=0, le=1000)
    leave_out: list[str] = []
    membership: MembershipSection = pydantic.Field(default_factory=MembershipSection)
    labels_known: bool = True
    effort: Literal["quick", "standard", "full"] = "quick"

    @pydantic.field_validator("name")
    @classmethod
    def _name_is_a_file_name(cls, value: str) -> str:
        return file_name(value, "the default run folder is runs/<name>")

    @pydantic.field_validator("model", mode="before")
    @classmethod
    def _model_entry(cls, value: Any) -> Any:
        return model_entry(component_entry(value))

    @pydantic.field_validator("defenses", "candidates", mode="before")
    @classmethod
    def _defense_names(cls, value: Any) -> Any:
        return [component_entry(v) for v in value] if isinstance(value, list) else value

    @pydantic.field_validator("leave_out")
    @classmethod
    def _attacks_exist(cls, value: list[str]) -> list[str]:
        from leakshield.attacks import ATTACKS

        for name in value:
            try:
                ATTACKS.get(name)
            except LeakshieldError as exc:  # an unknown name, with the allowed ones
                raise ValueError(str(exc)) from None
        return value

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> AuditConfig:
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds: {self.seeds} repeats a seed; each seed is one repetition, list it once")
        late = [r for r in self.attack_rounds if r > self.rounds]
        if late:
            raise ValueError(f"attack_rounds: {late} after the last round {self.rounds} (rounds)")
        reserved = [d.display for d in [*self.defenses, *self.candidates] if d.display in ("none", "yours")]
        if reserved:
            raise ValueError(f"defenses: the labels {reserved} are the audit's own rows (no defense, yours)")
        return self

    def own_stack(self) -> list[dict[str, Any]]:
        """The federation's own defenses as one stack of config entries, in order (empty: none)."""
        return [{"name": e["name"], **e["params"]} for d in self.defenses for e in d.entries]

    @property
    def budget_points(self) -> float:
        """The budget in accuracy points (the leaderboard's unit)."""
        return 100 * self.budget


def parse_audit_config(data: Any, source: str = "audit config") -> AuditConfig:
    """Validate an audit config mapping; :class:`ConfigError` with one line naming the fields."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return AuditConfig.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError(f"{source}: {format_validation_error(exc)}") from None


def load_audit_config(path: str | Path) -> AuditConfig:
    """Read and validate an audit config (YAML); relative data roots are taken from the file's folder."""
    return with_absolute_root(
        parse_audit_config(read_yaml(path, "audit config"), source=str(path)), Path(path).parent
    )


def with_absolute_root(config: AuditConfig, base: Path) -> AuditConfig:
    """``config`` with a relative data root taken from ``base`` (the config file's folder, or the
    working directory): the ``audit.yaml`` the audit keeps in its folder reads the same data."""
    root = config.data.root
    if root is not None:
        config.data.root = str((base / Path(root).expanduser()).resolve())
    return config
