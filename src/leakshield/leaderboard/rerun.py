"""A stage-2 rerun's coordinates (:class:`Rerun`) and its folder name (:func:`stage_two_name`): one
definition that the stage-2 runner, the export and the export's schema all read."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Annotated, Any

import pydantic


@dataclass(frozen=True)
class Rerun:
    """One chosen cell to rerun: the grid it came from (None: the main grid; else a scenario's name), its
    coordinates, and the victims per seed (``victims``) after the ``offset`` batches stage 1 used."""

    source: str | None
    model: str
    defense: str
    attack: str
    round: int
    scale: str
    victims: Annotated[int, pydantic.Field(ge=1)]
    offset: Annotated[int, pydantic.Field(ge=0)]

    @property
    def name(self) -> str:
        """A folder name: ``main__lenet-tanh__dp-sgd__ig__0`` (the scale appended where there is one)."""
        return stage_two_name(self.as_json())

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Rerun:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})


def stage_two_name(rerun: dict[str, Any]) -> str:
    """A stage-2 rerun's folder name from its JSON: ``main__lenet-tanh__dp-sgd__ig__0`` (scale last)."""
    parts = [rerun.get("source") or "main", rerun["model"], rerun["defense"], rerun["attack"],
             str(rerun["round"]), rerun.get("scale") or ""]  # fmt: skip
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", "__".join(p for p in parts if p))
