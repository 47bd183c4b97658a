"""The experiment config (YAML), validated with pydantic; errors name the field and allowed values.

Components (datasets, models, defenses, attacks) are written as a name or as a mapping with ``name``,
an optional display ``label`` and the component's own parameters inline, e.g.
``{name: ig, label: ig-1k, iterations: 1000}``. A defense setting may stack several defenses:
``{label: mixup+noise, stack: [{name: mixup}, {name: gaussian, sigma: 0.001}]}``.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pydantic

from leakshield.attacks import ATTACKS
from leakshield.attacks.base import Attack, create_attack
from leakshield.attacks.execution import EXECUTION_FIELDS, Execution, split_execution
from leakshield.data import DATASETS
from leakshield.defenses import DEFENSES
from leakshield.errors import ConfigError, LeakshieldError
from leakshield.experiment.axes import AxesSection, check_axes
from leakshield.experiment.sections import (
    AttackSection,
    MetricSection,
    ReportSection,
    Section,
    UtilitySection,
    VictimSection,
)
from leakshield.experiment.yaml_files import file_name, read_yaml
from leakshield.fl.config import FLConfig, LocalTraining
from leakshield.models import MODELS
from leakshield.models.imported import model_entry
from leakshield.registry import Registry, component_entry, format_validation_error
from leakshield.threats import Adversary

#: the most cells one run may hold (a cell takes seconds to hours: more is a mistyped range)
MAX_CELLS = 100_000
#: (path, default) of fields added after runs were stored; a path is the keys from the payload's root
ADDED_FIELDS = ((("fl", "aggregator"), "mean"), (("fl", "local", "optimizer"), "sgd"),
                (("attack", "update", "optimizer"), "sgd"), (("fl", "secure_aggregation"), False),
                (("fl", "secagg_drop_rate"), 0.0), (("metrics", "no_information"), "public-mean"),
                (("axes",), {"batch_size": None, "clients": None}), (("victims", "per_seed"), False),
                (("victims", "offset"), 0), (("utility", "detection"), True))  # fmt: skip


class Component(pydantic.BaseModel):
    """``name`` of a registered component, an optional ``label`` (defaults to the name) and its
    parameters inline. Attacks only: ``against`` lists the defense labels to run the attack against
    (default: every defense, except that an adaptive attack runs only against the defenses it targets)."""

    model_config = pydantic.ConfigDict(extra="allow")
    name: str
    label: str | None = None
    against: list[str] | None = None

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @property
    def display(self) -> str:
        return self.label or self.name

    def check(self, registry: Registry, where: str) -> None:
        try:
            registry.validate(self.name, self.params)
        except LeakshieldError as exc:
            raise ConfigError(f"{where}: {exc}") from None


class DefenseSetting(pydantic.BaseModel):
    """One column of defenses: a single defense or a ``stack`` applied in order. ``training``: this
    setting's own client training (replaces ``fl.local`` for its FL rounds, e.g. the defense paper's
    optimizer and a tuned learning rate); None trains as ``fl.local`` says."""

    model_config = pydantic.ConfigDict(extra="allow")
    name: str | None = None
    label: str | None = None
    stack: list[Component] | None = None
    training: LocalTraining | None = None

    @pydantic.model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        return component_entry(value)

    @pydantic.field_validator("stack", mode="before")
    @classmethod
    def _stack_names(cls, value: Any) -> Any:
        return [component_entry(v) for v in value] if isinstance(value, list) else value

    @pydantic.model_validator(mode="after")
    def _one_form(self) -> DefenseSetting:
        if (self.name is None) == (self.stack is None):
            raise ValueError("give either a defense name or a stack of defenses")
        if self.stack is not None and self.model_extra:
            raise ValueError(f"parameters {sorted(self.model_extra)} belong inside the stack entries")
        return self

    @property
    def entries(self) -> list[dict[str, Any]]:
        if self.stack is not None:
            return [{"name": c.name, "params": c.params} for c in self.stack]
        return [{"name": self.name, "params": dict(self.model_extra or {})}]

    @property
    def display(self) -> str:
        if self.label:
            return self.label
        return "+".join(c.display for c in self.stack) if self.stack else str(self.name)


class DatasetSection(pydantic.BaseModel):
    """``name``, the folder ``root`` holding its files (not needed for digits), its parameters inline."""

    model_config = pydantic.ConfigDict(extra="allow")
    name: str = "digits"
    root: str | None = None

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ExperimentConfig(Section):
    """A whole experiment: the grid is models × defenses × attacks × attack rounds × seeds."""

    name: str = "experiment"
    seeds: list[int] = pydantic.Field(default_factory=lambda: [0], min_length=1)
    dataset: DatasetSection = pydantic.Field(default_factory=DatasetSection)
    models: list[Component] = pydantic.Field(min_length=1)
    fl: FLConfig = pydantic.Field(default_factory=FLConfig)
    partition_seed: int = 0
    attack: AttackSection = pydantic.Field(default_factory=AttackSection)
    victims: VictimSection = pydantic.Field(default_factory=VictimSection)
    defenses: list[DefenseSetting] = pydantic.Field(
        default_factory=lambda: [DefenseSetting(name="none")], min_length=1
    )
    attacks: list[Component] = pydantic.Field(min_length=1)
    axes: AxesSection = pydantic.Field(default_factory=AxesSection)
    utility: UtilitySection = pydantic.Field(default_factory=UtilitySection)
    metrics: MetricSection = pydantic.Field(default_factory=MetricSection)
    report: ReportSection = pydantic.Field(default_factory=ReportSection)
    #: how attacks run (speed only, outside the fingerprint): path, compile_after, victim_shards
    execution: Execution = pydantic.Field(default_factory=Execution)

    @pydantic.field_validator("name")
    @classmethod
    def _name_is_a_file_name(cls, value: str) -> str:
        return file_name(value, "the default run folder is runs/<name>")

    @pydantic.field_validator("models", "attacks", mode="before")
    @classmethod
    def _names_to_components(cls, value: Any) -> Any:
        return [model_entry(component_entry(v)) for v in value] if isinstance(value, list) else value

    @pydantic.model_validator(mode="after")
    def _sensitive_victims_need_a_rule(self) -> ExperimentConfig:
        if self.victims.sensitive is not None and self.metrics.sensitive is None:
            raise ValueError("victims.sensitive needs metrics.sensitive (which samples are sensitive)")
        check_axes(self.axes, self.fl, self.victims.sensitive)
        return self

    @pydantic.model_validator(mode="after")
    def _grid_within_bounds(self) -> ExperimentConfig:
        # an upper bound on the cells (adaptive attacks pair with fewer defenses), counted without
        # expanding the grid: a mistyped range must be one line now, not minutes of silence
        settings = len(self.seeds) * len(self.models) * len(self.defenses)
        scales = max(len(self.axes.scales()), 1)
        cells = scales + settings * (2 + len(self.attack.rounds) * len(self.attacks) * scales)
        if cells > MAX_CELLS:
            raise ValueError(
                f"the grid has up to {cells:,} cells (seeds {len(self.seeds)} × models {len(self.models)} × "
                f"defenses {len(self.defenses)} × attack rounds {len(self.attack.rounds)} × attacks "
                f"{len(self.attacks)} × scales {scales}); at most {MAX_CELLS:,} per run: split it into "
                "several runs"
            )
        repeated = sorted(seed for seed, n in Counter(self.seeds).items() if n > 1)
        if repeated:
            raise ValueError(f"seeds: repeated {repeated[:5]}; each seed is one repetition, list it once")
        outside = sorted(set(self.utility.seeds or ()) - set(self.seeds))
        if outside:
            raise ValueError(f"utility.seeds: {outside} are not in seeds {self.seeds}; the utility seeds are "
                             "a subset of the experiment's")  # fmt: skip
        return self

    @property
    def utility_seeds(self) -> list[int]:
        """The seeds that measure utility (``utility.seeds``, else every seed)."""
        return list(self.utility.seeds) if self.utility.seeds is not None else list(self.seeds)

    def check_components(self) -> None:
        """Validate every component against its registry and require unique labels."""
        try:
            DATASETS.validate(self.dataset.name, self.dataset.params)
        except LeakshieldError as exc:
            raise ConfigError(f"dataset: {exc}") from None
        for i, m in enumerate(self.models):
            if m.against is not None:
                raise ConfigError(f"models[{i}].against: only attacks take 'against'")
            m.check(MODELS, f"models[{i}]")
        defense_labels = [d.display for d in self.defenses]
        for i, a in enumerate(self.attacks):
            method, settings = split_execution(a.params)
            try:
                ATTACKS.validate(a.name, method)
                Execution(**settings)
            except LeakshieldError as exc:
                raise ConfigError(f"attacks[{i}]: {exc}") from None
            except pydantic.ValidationError as exc:
                raise ConfigError(f"attacks[{i}]: {format_validation_error(exc)}") from None
            attack = create_attack(a.name, method)
            if attack.threat.adversary is Adversary.PARTICIPANT:  # its client must exist: say so now
                attacker = attack.participation().attacker
                if attacker is not None and attacker >= self.fl.clients:
                    raise ConfigError(f"attacks[{i}].attacker: client {attacker}; the federation has clients "
                                      f"0..{self.fl.clients - 1} (fl.clients)")  # fmt: skip
            unknown = sorted(set(a.against or ()) - set(defense_labels))
            if unknown:
                raise ConfigError(
                    f"attacks[{i}].against: unknown defense labels {unknown}; "
                    f"the defenses are {defense_labels}"
                )
        for where, entry in self._defense_entries():
            try:
                DEFENSES.validate(entry["name"], entry["params"])
            except LeakshieldError as exc:
                raise ConfigError(f"{where}: {exc}") from None
        for i, sweep in enumerate(self.report.sweeps):
            unknown = sorted(set(sweep.points) - set(defense_labels))
            if unknown:
                raise ConfigError(f"report.sweeps[{i}].points: unknown defense labels {unknown}; "
                                  f"the defenses are {defense_labels}")  # fmt: skip
        for section, items in (
            ("models", self.models),
            ("defenses", self.defenses),
            ("attacks", self.attacks),
        ):
            labels = [c.display for c in items]
            dupes = sorted({x for x in labels if labels.count(x) > 1})
            if dupes:
                raise ConfigError(f"{section}: duplicate labels {dupes}; give each entry a unique label")

    def check_data(self, shape: tuple[int, int, int], num_classes: int) -> None:
        """Refuse components whose values cannot work on this dataset's images and classes (windows
        larger than the image, classes that do not exist…): called once the data is loaded, before any
        training, so nothing fails late as a stored cell."""
        entries = [(f"attacks[{i}]", ATTACKS, a.name, split_execution(a.params)[0])
                   for i, a in enumerate(self.attacks)]  # fmt: skip
        entries += [(where, DEFENSES, e["name"], e["params"]) for where, e in self._defense_entries()]
        for where, registry, name, params in entries:
            validated = registry.validate(name, params)
            try:
                validated.check_data(shape, num_classes)
            except ValueError as exc:
                raise ConfigError(f"{where}.{exc}") from None

    def _defense_entries(self) -> list[tuple[str, dict[str, Any]]]:
        """(where in the config, entry) of every defense, stacked ones one by one."""
        return [(f"defenses[{i}]" + (f".stack[{j}]" if d.stack else ""), entry)
                for i, d in enumerate(self.defenses) for j, entry in enumerate(d.entries)]  # fmt: skip

    def fl_for(self, defense: DefenseSetting) -> FLConfig:
        """The federation ``defense`` trains in: ``fl`` with the setting's own ``training`` if it has one."""
        if defense.training is None:
            return self.fl
        return self.fl.model_copy(update={"local": defense.training})

    @property
    def victim_update(self) -> LocalTraining:
        """The protocol of the attacked update."""
        return self.attack.update or self.fl.local

    def create_attack(self, spec: Component, cache_dir: str | Path | None = None) -> Attack:
        """The attack of ``spec`` with this run's execution settings (the entry's own take precedence);
        ``cache_dir``: the run's cache folder, where path calibrations are remembered."""
        execution = self.execution.model_dump()
        if cache_dir is not None:
            execution["calibration_dir"] = str(cache_dir)
        return create_attack(spec.name, spec.params, execution)

    def fingerprint(self) -> str:
        """Hash of everything that determines the results (the report layout and the location of the
        dataset's files are excluded: moving the data does not change the numbers)."""
        payload = self.model_dump(mode="json", exclude={"report", "execution"})
        payload["dataset"].pop("root", None)
        for defense in payload["defenses"]:  # added after runs were stored: counts only when set
            if defense.get("training") is None:
                defense.pop("training", None)
        for attack in payload["attacks"]:  # how an attack runs is not what it computes
            for name in EXECUTION_FIELDS:
                attack.pop(name, None)
        # fields added after runs were stored count only when set off their default, so that a run
        # directory of an earlier version still matches its config
        for path, default in ADDED_FIELDS:
            parent = payload
            for key in path[:-1]:
                parent = parent.get(key) if isinstance(parent, dict) else None
            if isinstance(parent, dict) and parent.get(path[-1]) == default:
                parent.pop(path[-1])
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def parse_config(data: Any, source: str = "config") -> ExperimentConfig:
    """Validate a config mapping; raises :class:`ConfigError` with one line naming the fields."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        config = ExperimentConfig.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError(f"{source}: {format_validation_error(exc)}") from None
    config.check_components()
    return config


def load_config(path: str | Path) -> ExperimentConfig:
    """Read and validate a YAML experiment config."""
    return parse_config(read_yaml(path), source=str(path))
