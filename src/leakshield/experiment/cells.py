"""Grid cells: the unit of work and of storage. A cell is a pure function of the config and its seed."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Literal

from leakshield.attacks import ATTACKS
from leakshield.defenses import DEFENSES
from leakshield.experiment.axes import Scale
from leakshield.experiment.config import Component, DefenseSetting, ExperimentConfig
from leakshield.threats import Adversary

CellKind = Literal["baseline", "utility", "attack", "detection"]


@dataclass(frozen=True)
class Cell:
    """``baseline``: the no-information reconstruction (``metrics.no_information``) scored on the victims.
    ``utility``: FL training under a defense → accuracy. ``attack``: one attack on every victim.
    ``detection``: a defense setting's client guard judged on malicious and honest models (``round``:
    the honest rounds judged)."""

    kind: CellKind
    model: Component | None = None
    defense: DefenseSetting | None = None
    attack: Component | None = None
    round: int | None = None
    seed: int | None = None
    #: the point of the config's scale axes (None without axes, or for cells they do not apply to)
    scale: Scale | None = None

    @property
    def coordinates(self) -> dict[str, object]:
        coordinates: dict[str, object] = {
            "kind": self.kind,
            "model": self.model.display if self.model else None,
            "defense": self.defense.display if self.defense else None,
            "attack": self.attack.display if self.attack else None,
            "round": self.round,
            "seed": self.seed,
        }
        if self.scale is not None:  # only then: the keys of cells without a scale stay as they were
            coordinates.update({"batch": self.scale.batch, "clients": self.scale.clients})
        return coordinates

    @property
    def key(self) -> str:
        return json.dumps(self.coordinates, sort_keys=True)

    @property
    def slug(self) -> str:
        parts = [str(v) for v in self.coordinates.values() if v is not None]
        return re.sub(r"[^A-Za-z0-9_.+-]+", "_", "__".join(parts))

    def describe(self) -> str:
        return " · ".join(f"{k}={v}" for k, v in self.coordinates.items() if v is not None and k != "kind")


def runs_against(attack: Component, defense: DefenseSetting) -> bool:
    """Whether the grid pairs ``attack`` with ``defense``: as listed in the attack's ``against``, else
    always, except that an adaptive attack meets only the defenses it targets."""
    if attack.against is not None:
        return defense.display in attack.against
    targets = ATTACKS.get(attack.name).targets
    if targets is None:
        return True
    return any(DEFENSES.get(entry["name"]).name in targets for entry in defense.entries)


def guards(defense: DefenseSetting) -> bool:
    """Whether the defense setting includes a client guard (a defense with an ``inspect`` stage)."""
    return any(getattr(DEFENSES.get(e["name"]).factory, "guards", False) for e in defense.entries)


def expand_grid(config: ExperimentConfig) -> list[Cell]:
    """Every cell of the config, in run order: the baseline (one per batch size of the scale axes), then
    per seed, model and defense the utility cell (seeds of ``utility.seeds`` only), the detection cell
    (a setting with a client guard) and the attack cells (round-major, then attack, then scale; a
    participant attack, which attacks no victim batch, has no scale)."""
    scales = config.axes.scales()
    batches = list(dict.fromkeys(s.batch for s in scales))
    shared = [Cell("baseline", scale=Scale(b)) for b in batches] if scales else [Cell("baseline")]
    if config.victims.per_seed:  # each seed's victims have their own no-information references
        cells = [dataclasses.replace(c, seed=seed) for seed in config.seeds for c in shared]
    else:
        cells = shared
    for seed in config.seeds:
        for model in config.models:
            for defense in config.defenses:
                if config.utility.rounds > 0 and seed in config.utility_seeds:
                    cells.append(Cell("utility", model, defense, None, config.utility.rounds, seed))
                if guards(defense) and config.utility.detection:
                    honest_rounds = config.utility.rounds or max(config.attack.rounds) + 1
                    cells.append(Cell("detection", model, defense, None, honest_rounds, seed))
                for rnd in config.attack.rounds:
                    for attack in config.attacks:
                        if not runs_against(attack, defense):
                            continue
                        if not scales or ATTACKS.get(attack.name).threat.adversary is Adversary.PARTICIPANT:
                            cells.append(Cell("attack", model, defense, attack, rnd, seed))
                            continue
                        cells += [Cell("attack", model, defense, attack, rnd, seed, s) for s in scales]
    return cells
