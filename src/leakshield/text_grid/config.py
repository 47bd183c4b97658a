"""The config of a text grid (YAML with ``track: text``), validated with pydantic; errors name the field
and the allowed values. The grid is models × model states (untrained, trained by FL) × defenses ×
attacks × batch sizes × seeds; every cell attacks the same victims' updates.

A minimal config::

    track: text
    name: rt-small
    corpus: {path: rotten_tomatoes_corpus_full.csv.bz2}
    models: [{name: bert}]
    defenses: [none, {name: gaussian-noise, sigma: 0.001}]
    attacks: [bag-of-words, {name: tag, iterations: 300}]
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import pydantic

from leakshield.defenses import DEFENSES
from leakshield.errors import ConfigError, LeakshieldError
from leakshield.experiment.config import Component, DefenseSetting
from leakshield.experiment.sections import Section
from leakshield.experiment.yaml_files import file_name, read_yaml
from leakshield.fl.config import FLConfig, LocalTraining
from leakshield.registry import component_entry, format_validation_error
from leakshield.text.dataset import CorpusFormat, TextPartitionKind
from leakshield.text.fetch import default_corpus_path
from leakshield.text.tokenizer import TokenizerKind
from leakshield.text_grid.attacks import TEXT_ATTACKS, check_text_defense

State = Literal["untrained", "trained"]


class CorpusSection(Section):
    """path: the corpus file (a folder for rt-polarity; default: the Rotten Tomatoes CSV that
    ``leakshield fetch-corpus`` put in the data cache); format: how to read it; the splits keep each
    group (movie) on one side; max_train: keep the first that many training texts."""

    path: str | None = None
    format: CorpusFormat = "rotten-tomatoes"
    public_fraction: float = pydantic.Field(default=0.2, gt=0, lt=1)
    test_fraction: float = pydantic.Field(default=0.2, gt=0, lt=1)
    split_seed: int = 0
    max_train: pydantic.PositiveInt | None = None

    @pydantic.model_validator(mode="after")
    def _fractions_leave_training_text(self) -> CorpusSection:
        if self.public_fraction + self.test_fraction >= 1:
            raise ValueError(
                f"public_fraction {self.public_fraction} + test_fraction {self.test_fraction}: must stay "
                "below 1 (the rest is the clients' text)"
            )
        return self

    def digest(self) -> str:
        """SHA-256 (16 hex digits) of the corpus file's bytes (of a folder: each file's name and bytes),
        or ``missing`` when there is none (reading it then fails with a one-line error)."""
        path = Path(self.path).expanduser() if self.path is not None else default_corpus_path()
        digest = hashlib.sha256()
        try:
            if not path.is_dir():
                digest.update(path.read_bytes())
            for file in sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else []:
                digest.update(file.name.encode() + b"\0" + file.read_bytes())
        except OSError:
            return "missing"
        return digest.hexdigest()[:16]


class TokenizerSection(Section):
    """kind: wordpiece (BERT's) or bpe (GPT-2's); vocab_size: ids, the 4 special tokens included;
    fitted on the public split alone (a tokenizer fitted on client text would leak it)."""

    kind: TokenizerKind = "wordpiece"
    vocab_size: int = pydantic.Field(default=2000, ge=64, le=100_000)
    lowercase: bool = True


class PretrainSection(Section):
    """The public pretrained model the federation starts from (:mod:`leakshield.text.backbone`): trained
    centrally on the public split for ``epochs`` with ``objective`` (classifier: the task on its labels;
    language-model: the backbone alone), Adam at ``lr``."""

    objective: Literal["classifier", "language-model"] = "classifier"
    epochs: int = pydantic.Field(default=2, ge=1, le=200)
    lr: float = pydantic.Field(default=1e-3, gt=0, le=1)


class LoraSection(Section):
    """LoRA fine-tuning (:mod:`leakshield.text.lora`): rank r; alpha (default r: scale α/r = 1);
    targets: the adapted weights (attention, or attention+ffn); train_head: the classifier head (and
    BERT's pooler) is trained and shared too."""

    rank: int = pydantic.Field(ge=1, le=1024)
    alpha: float | None = pydantic.Field(default=None, gt=0)
    targets: Literal["attention", "attention+ffn"] = "attention"
    train_head: bool = True


class TextModelSpec(Section):
    """name: bert (untied input embedding) or gpt2 (input and output embeddings tied); width, layers
    and heads of the transformer; pretrain: start from a model pretrained on the public split (absent:
    random weights); lora: fine-tune LoRA adapters on the frozen backbone and share only them (absent:
    the whole model is trained and shared); label: the name in tables (default: the kind, with
    ``-lora-r<rank>`` under LoRA)."""

    name: Literal["bert", "gpt2"]
    label: str | None = None
    width: int = pydantic.Field(default=64, ge=8, le=1024)
    layers: int = pydantic.Field(default=2, ge=1, le=24)
    heads: int = pydantic.Field(default=2, ge=1, le=32)
    pretrain: PretrainSection | None = None
    lora: LoraSection | None = None

    @pydantic.model_validator(mode="after")
    def _heads_divide_width(self) -> TextModelSpec:
        if self.width % self.heads:
            raise ValueError(f"width {self.width} must be a multiple of heads {self.heads}")
        return self

    @property
    def display(self) -> str:
        if self.label:
            return self.label
        return self.name if self.lora is None else f"{self.name}-lora-r{self.lora.rank}"


class TrainingSection(Section):
    """rounds: FL rounds (``fl``: clients, their local training) that train the ``trained`` state from
    the seed's initialisation, each defense setting training under its own defenses."""

    rounds: int = pydantic.Field(default=10, ge=1, le=10_000)


class TextVictims(Section):
    """count: victim batches per batch size, drawn at random with seed from the clients in turn (victim
    i from client i mod clients); batches: the batch sizes attacked; offset: the first victim's index
    (victims offset … offset + count − 1). A config with offset k attacks other clients' texts than one
    with count ≤ k and offset 0 (held-out victims to tune attacks on), which needs offset + count ≤
    fl.clients (checked)."""

    count: pydantic.PositiveInt = 4
    batches: list[pydantic.PositiveInt] = pydantic.Field(default_factory=lambda: [1], min_length=1)
    seed: int = 0
    offset: int = pydantic.Field(default=0, ge=0)


def _fedavg() -> FLConfig:
    return FLConfig(clients=10, local=LocalTraining(algorithm="fedavg", optimizer="adam", local_lr=1e-3))


class TextExperimentConfig(Section):
    """A text grid; see the module docstring. ``update``: how a victim computes the attacked update on
    its batch (FedSGD: one gradient; FedAvg: local steps, whose update the attacks turn into a gradient
    estimate −Δθ / (lr · steps))."""

    track: Literal["text"]
    name: str = "text"
    seeds: list[int] = pydantic.Field(default_factory=lambda: [0], min_length=1)
    corpus: CorpusSection = pydantic.Field(default_factory=CorpusSection)
    tokenizer: TokenizerSection = pydantic.Field(default_factory=TokenizerSection)
    max_length: int = pydantic.Field(default=32, ge=4, le=512)
    models: list[TextModelSpec] = pydantic.Field(min_length=1)
    fl: FLConfig = pydantic.Field(default_factory=_fedavg)
    partition: TextPartitionKind = "iid"
    partition_seed: int = 0
    states: list[State] = pydantic.Field(default_factory=lambda: ["untrained"], min_length=1)
    training: TrainingSection = pydantic.Field(default_factory=TrainingSection)
    update: LocalTraining = pydantic.Field(default_factory=LocalTraining)
    victims: TextVictims = pydantic.Field(default_factory=TextVictims)
    defenses: list[DefenseSetting] = pydantic.Field(
        default_factory=lambda: [DefenseSetting(name="none")], min_length=1
    )
    attacks: list[Component] = pydantic.Field(min_length=1)

    @pydantic.field_validator("name")
    @classmethod
    def _name_is_a_file_name(cls, value: str) -> str:
        return file_name(value, "the default run folder is runs/<name>")

    @pydantic.field_validator("models", "attacks", mode="before")
    @classmethod
    def _names_to_components(cls, value: Any) -> Any:
        return [component_entry(v) for v in value] if isinstance(value, list) else value

    @pydantic.model_validator(mode="after")
    def _labels_fit_cell_keys(self) -> TextExperimentConfig:
        for section, labels in (("models", [m.display for m in self.models]),
                                ("defenses", [d.display for d in self.defenses]),
                                ("attacks", [a.display for a in self.attacks])):  # fmt: skip
            bad = [label for label in labels if "|" in label or "=" in label]
            if bad:
                raise ValueError(f"{section}: labels {bad} hold '|' or '=', which cell keys use; rename them")
        return self

    @pydantic.model_validator(mode="after")
    def _partition_here(self) -> TextExperimentConfig:
        if self.fl.partition.kind != "iid":
            raise ValueError("fl.partition: a text grid partitions by 'partition' (iid or by-group)")
        for name in ("states", "seeds"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ValueError(f"{name}: {values} lists a value twice")
        if self.fl.secure_aggregation:
            raise ValueError("fl.secure_aggregation: text grids attack single updates; set it false")
        if self.update.algorithm == "fedavg" and (self.update.optimizer != "sgd" or self.update.momentum):
            raise ValueError(
                "update: a FedAvg update is attacked as the mean gradient −Δθ / (lr · steps), which holds "
                "for plain SGD only; use optimizer sgd with momentum 0"
            )
        v = self.victims
        if v.offset and v.offset + v.count > self.fl.clients:
            raise ValueError(
                f"victims.offset: {v.offset} + count {v.count} exceeds fl.clients {self.fl.clients}: the "
                f"victims would wrap around to the clients of victims 0 … {v.offset - 1}; lower offset or "
                "count"
            )
        if len(set(self.victims.batches)) != len(self.victims.batches):
            raise ValueError(f"victims.batches: {self.victims.batches} lists a size twice")
        return self

    def check_components(self) -> None:
        """Every attack and defense known, text-compatible and validly parametrized; labels unique."""
        for i, attack in enumerate(self.attacks):
            if attack.against is not None:
                raise ConfigError(
                    f"attacks[{i}].against: a text grid runs every attack against every defense"
                )
            try:
                validated = TEXT_ATTACKS.validate(attack.name, attack.params)
            except LeakshieldError as exc:
                raise ConfigError(f"attacks[{i}]: {exc}") from None
            if TEXT_ATTACKS.get(attack.name).threat.modifies_model and self.update.algorithm != "fedsgd":
                raise ConfigError(
                    f"attacks[{i}]: {attack.name} reads one gradient step; set update.algorithm to fedsgd "
                    f"(it is {self.update.algorithm}: local steps move its bins)"
                )
            shallow = [(j, m) for j, m in enumerate(self.models) if m.layers < 2]
            narrow = [(j, m) for j, m in enumerate(self.models) if m.lora and m.lora.targets == "attention"]
            if TEXT_ATTACKS.get(attack.name).name == "dager" and narrow and max(self.victims.batches) > 1:
                j, model = narrow[0]
                raise ConfigError(
                    f"attacks[{i}] ({attack.display}) orders a LoRA batch into sequences by feed-forward "
                    f"adapters: models[{j}] ({model.display}) has lora.targets attention and victims.batches "
                    f"{self.victims.batches}; set lora.targets to attention+ffn or batches to [1]"
                )
            headless = [(j, m) for j, m in enumerate(self.models) if m.lora and not m.lora.train_head]
            if hasattr(validated, "labels_known") and headless and 1 in self.victims.batches:
                j, model = headless[0]
                raise ConfigError(
                    f"attacks[{i}] ({attack.display}) reads a batch of one's label off the head's "
                    f"gradient, which models[{j}].lora.train_head false does not share; set it true or "
                    "drop batch 1 from victims.batches"
                )
            adapted = [(j, m) for j, m in enumerate(self.models) if m.lora]
            if TEXT_ATTACKS.get(attack.name).threat.modifies_model and adapted:
                j, model = adapted[0]
                raise ConfigError(
                    f"attacks[{i}] ({attack.display}) plants a block whose gradients a LoRA update does not "
                    f"share (only adapters are sent): drop attacks[{i}] or models[{j}].lora ({model.display})"
                )
            if TEXT_ATTACKS.get(attack.name).name == "dager" and shallow:
                j, model = shallow[0]
                raise ConfigError(
                    f"attacks[{i}] ({attack.display}) needs models of two blocks or more (a one-block "
                    f"classifier's gradients see only the position its head reads): models[{j}] "
                    f"({model.display}) has layers: {model.layers}"
                )
            if getattr(validated, "labels_known", True) is False and max(self.victims.batches) > 1:
                raise ConfigError(
                    f"attacks[{i}].labels_known: false needs victims.batches [1] (only a batch of one leaks "
                    f"its label); the batches are {self.victims.batches}"
                )
        for i, setting in enumerate(self.defenses):
            for j, entry in enumerate(setting.entries):
                where = f"defenses[{i}]" + (f".stack[{j}]" if setting.stack else "")
                try:
                    DEFENSES.validate(entry["name"], entry["params"])
                except LeakshieldError as exc:
                    raise ConfigError(f"{where}: {exc}") from None
                check_text_defense(entry["name"], where)
                adapted = [m.display for m in self.models if m.lora]
                if adapted and getattr(DEFENSES.get(entry["name"]).factory, "guards", False):
                    raise ConfigError(
                        f"{where}: {entry['name']} is a client guard not calibrated for LoRA adapters "
                        f"(row-guard reads the zero B rows as duplicates): drop it or lora from {adapted}"
                    )
        for section, labels in (("models", [m.display for m in self.models]),
                                ("defenses", [d.display for d in self.defenses]),
                                ("attacks", [a.display for a in self.attacks])):  # fmt: skip
            dupes = sorted({x for x in labels if labels.count(x) > 1})
            if dupes:
                raise ConfigError(f"{section}: duplicate labels {dupes}; give each entry a unique label")

    def fingerprint(self) -> str:
        """Hash of everything that determines the results: the config and the corpus's content (not
        where the file is: moving it changes nothing, another file does)."""
        payload = self.model_dump(mode="json")
        payload["corpus"].pop("path", None)
        if not payload["victims"]["offset"]:  # the default: configs written before the option hash as before
            payload["victims"].pop("offset")
        payload["corpus"]["content"] = self.corpus.digest()
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def parse_text_config(data: Any, source: str = "config") -> TextExperimentConfig:
    """Validate a text grid's config mapping; :class:`ConfigError` in one line naming the fields."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        config = TextExperimentConfig.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError(f"{source}: {format_validation_error(exc)}") from None
    config.check_components()
    return config


def load_text_config(path: str | Path) -> TextExperimentConfig:
    return parse_text_config(read_yaml(path), source=str(path))


def is_text_config(data: Any) -> bool:
    """Whether a config mapping is a text grid's (``track: text``)."""
    return isinstance(data, dict) and data.get("track") == "text"
