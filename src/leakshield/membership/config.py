"""The membership experiment's validated configuration (``leakshield membership``; presets in
``configs/membership.yaml``).

The game, per seed: the training split is cut into ``clients`` pools of ``records_per_client`` records;
in every pool a random half (drawn per seed) are the records the client trains on
(members) and which stay out (non-members of the same distribution). The server attacks every client;
clients ``0 … clients/2 − 1`` are stage 1 (their candidates *choose* each defense's strongest attack),
the others stage 2 (fresh candidates, the headline), as the leaderboard's two stages do.
"""

from __future__ import annotations

from typing import Any

import pydantic

from leakshield.experiment.config import Component
from leakshield.fl.config import LocalTraining

#: the row every other row is compared with
REFERENCE = "none"


class MembershipRow(pydantic.BaseModel):
    """A defense row: ``label``, the defense ``stack`` applied in order (empty: no defense) and whether
    the server sees only aggregates (``secure_aggregation``: per-client attacks are then impossible)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    label: str
    stack: list[Component] = pydantic.Field(default_factory=list)
    secure_aggregation: bool = False

    @property
    def entries(self) -> list[dict[str, Any]]:
        return [{"name": c.name, "params": c.params} for c in self.stack]


class MembershipConfig(pydantic.BaseModel):
    """The game's setting.

    dataset, dataset_params, data_root: a registered image dataset (``leakshield list datasets``).
    model: a registered model. clients: how many clients (≥ 4: two stages of ≥ 2, and FedMIA fits its
    non-member Gaussian to the other clients). records_per_client: each client's pool; a random half are
    members. rounds: FedAvg/FedSGD rounds, every client every round. local: the
    clients' training. attack_rounds: the rounds (0-based) at which one-round attacks run (default: the
    first and the last). observe_every: the attacker records every k-th round (and the last), as FedMIA's
    code records every 10th; the series attacks average over those. fpr: the headline FPR level. seeds:
    the unit of every interval. rows: the defenses compared, one labelled ``none`` with an empty stack
    (the reference).
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    dataset: str = "digits"
    dataset_params: dict[str, Any] = pydantic.Field(default_factory=lambda: {"size": 8})
    data_root: str | None = None
    model: Component = pydantic.Field(
        default_factory=lambda: Component(name="mlp", hidden_layers=1, width=512)
    )
    clients: int = pydantic.Field(default=20, ge=4)
    records_per_client: int = pydantic.Field(default=30, ge=2)
    rounds: int = pydantic.Field(default=30, ge=1)
    local: LocalTraining = pydantic.Field(
        default_factory=lambda: LocalTraining(algorithm="fedavg", local_lr=0.1, local_epochs=5, batch_size=10)
    )
    attack_rounds: list[int] | None = None
    observe_every: int = pydantic.Field(default=1, ge=1)
    fpr: float = pydantic.Field(default=0.01, gt=0, lt=1)
    seeds: list[int] = pydantic.Field(default_factory=lambda: list(range(6)), min_length=1)
    rows: list[MembershipRow] = pydantic.Field(default_factory=lambda: [MembershipRow(label=REFERENCE)])

    @pydantic.field_validator("seeds")
    @classmethod
    def _distinct(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError(f"{value}: seeds repeat")
        return value

    @pydantic.model_validator(mode="after")
    def _rows(self) -> MembershipConfig:
        labels = [r.label for r in self.rows]
        if len(set(labels)) != len(labels):
            raise ValueError(f"rows: labels repeat ({labels})")
        ref = [r for r in self.rows if r.label == REFERENCE]
        if not ref or ref[0].stack or ref[0].secure_aggregation:
            raise ValueError(f"rows: needs a row labelled {REFERENCE!r} without stack or secure aggregation")
        return self

    @pydantic.model_validator(mode="after")
    def _attack_rounds(self) -> MembershipConfig:
        if self.attack_rounds == []:
            raise ValueError("attack_rounds: empty; leave it out for the first and the last round")
        wrong = [r for r in self.attack_rounds or () if r not in self.observed_rounds]
        if wrong:
            raise ValueError(f"attack_rounds: {wrong} not observed (rounds 0 … {self.rounds - 1}, every "
                             f"{self.observe_every}th and the last)")  # fmt: skip
        return self

    @property
    def observed_rounds(self) -> set[int]:
        """The rounds the attacker records: every ``observe_every``-th from 0, and the last."""
        return set(range(0, self.rounds, self.observe_every)) | {self.rounds - 1}

    @property
    def rounds_attacked(self) -> list[int]:
        return sorted(set(self.attack_rounds)) if self.attack_rounds else sorted({0, self.rounds - 1})

    def row(self, label: str) -> MembershipRow:
        found = [r for r in self.rows if r.label == label]
        if not found:
            raise ValueError(f"row {label!r}: the config has {', '.join(r.label for r in self.rows)}")
        return found[0]
