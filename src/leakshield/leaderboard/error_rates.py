"""The ranking's power and error rates, measured by running simulated tables through the real code.

A simulated table is a set of stored cells — stage 1 (every row × K attacks × seeds, a few victims) and
stage 2 (each row's chosen cell rerun on fresh victims), with per-seed baselines — built from variance
components of SSIM measured on the standard export: a seed effect per row and seed (the model trained
under that defense), a cell-seed effect per attack cell, a per-victim effect, and an image × row
interaction (an image that one defense hides and another does not). Victims are drawn per seed by the
experiment's own draw (:func:`leakshield.experiment.victims.victim_draw_seed`), from a pool of images
whose effects persist across seeds and rows. Every cell is a secure-aggregation cell of 4 clients, and
a row's guard refuses the model in some seeds (``aggregate_clients`` 0), so a table that followed the
outcome instead of the design would lose those seeds.

A row *protects* each victim with its protection probability: a protected victim is reconstructed at its
no-information level. "Half leak" protects half of the victims; full protection (DP-SGD) every one.

``tests/test_ranking_error_rates.py`` states the rates this module measures;
``benchmarks/ranking_error_rates.py`` prints them at more repetitions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from leakshield.experiment.store import CellRecord
from leakshield.experiment.victims import victim_draw_seed

#: SSIM variance components (standard deviations) measured on the standard export's honest table
SEED_SD, CELL_SEED_SD, VICTIM_SD, INTERACTION_SD = 0.15, 0.13, 0.29, 0.10
#: the images victims are drawn from: client 0's sensitive samples in the leaderboard's protocol
POOL = 20
#: the no-information references N(mean, sd) of the pool's images
REFERENCE = (0.35, 0.05)
#: the attacks of a row (stage 1 chooses among them) and their offsets from the row's level
ATTACKS = {"ig": 0.0, "dlg": -0.1, "cpl": -0.2, "gradinversion": -0.3, "ggl": -0.4}
THREAT = {"adversary": "observing-server", "knowledge": ["labels"], "rounds": "one",
          "secure_aggregation": True, "who": "honest-but-curious server", "aggregated": True,
          "aggregate_size": 4}  # fmt: skip

#: the threat model of a simulated table's cells (a ranking's title)
TABLE_THREAT = "honest-but-curious server under secure aggregation"


@dataclass(frozen=True)
class Row:
    """A simulated defense: its level (mean SSIM of an unprotected victim under the strongest attack), the
    share of victims it protects, and the share of seeds in which its guard refuses every update."""

    name: str
    protection: float = 0.0
    level: float = 0.75
    refused_seeds: float = 0.0


@dataclass
class Table:
    """What one simulated table produced: the rows' standings, the images each row's stage 2 saw, and
    its stored cells."""

    standings: list = field(default_factory=list)
    images: dict[str, set[int]] = field(default_factory=dict)
    records: list = field(default_factory=list)


def _cell(kind: str, row: str | None, attack: str | None, seed: int | None, stage: int,
          ssims: Sequence[float], refused: bool = False) -> CellRecord:  # fmt: skip
    victims = [{"ssim": [float(v)], **({"refused": True} if refused else {})} for v in ssims]
    metrics = {"ssim": float(np.mean(ssims)), "images": float(len(ssims))}
    if kind == "attack":
        metrics["aggregate_clients"] = 0.0 if refused else 4.0
        metrics["refused"] = 1.0 if refused else 0.0
    key = f"{kind}/{row}/{attack}/{seed}/{stage}"
    return CellRecord(key, kind, "m" if row else None, row, attack, 0 if attack else None, seed, "ok",
                      metrics, victims, None, None, 0.0, 0.0, attack_name=attack,
                      threat=THREAT if attack else None, scale="clients=4" if attack else None,
                      stage=stage)  # fmt: skip


@dataclass(frozen=True)
class _RowEffects:
    """One row's draws: its seed effects, its cells' seed effects, the seeds its guard refused."""

    seed: np.ndarray
    cell: dict[str, np.ndarray]
    refused: np.ndarray


@dataclass(frozen=True)
class _World:
    """The pool's images: references, effects that persist across seeds, image × row interactions."""

    references: np.ndarray
    image_effect: np.ndarray
    interaction: dict[str, np.ndarray]
    rng: np.random.Generator

    def ssims(self, row: Row, effects: _RowEffects, attack: str, seed: int, images: list[int]) -> np.ndarray:
        """The reconstructions' SSIMs of ``images`` under ``attack`` on ``row`` in ``seed``."""
        rng = self.rng
        level = row.level + ATTACKS[attack] + effects.seed[seed] + effects.cell[attack][seed]
        noise = rng.normal(0.0, VICTIM_SD, size=len(images))
        own = self.image_effect[images] + self.interaction[row.name][images]
        leaked = np.clip(level + own + noise, 0.0, 1.0)
        hidden = (rng.random(len(images)) < row.protection) | effects.refused[seed]
        guess = np.clip(self.references[images] + rng.normal(0.0, 0.02, size=len(images)), 0.0, 1.0)
        return np.where(hidden, guess, leaked)


def simulate_table(
    rows: Sequence[Row],
    rng: np.random.Generator,
    seeds: int = 8,
    selection_victims: int = 2,
    fresh_victims: int = 16,
    pool: int = POOL,
    draw: Callable[[int, int], int] = victim_draw_seed,
    rank: Callable | None = None,
    reference: tuple[float, float] = REFERENCE,
) -> Table:
    """One table of ``rows`` through :func:`leakshield.leaderboard.ranking.standings` (``rank``: replaces
    the ordering :func:`~.ordering.rank` that standings calls, for the benchmark's variants; ``reference``:
    the pool's no-information references N(mean, sd))."""
    from leakshield.leaderboard import ranking

    references = np.clip(rng.normal(*reference, size=pool), 0.0, 1.0)
    image_effect = rng.normal(0.0, VICTIM_SD * 0.25, size=pool)  # persists across seeds and rows
    interaction = {r.name: rng.normal(0.0, INTERACTION_SD, size=pool) for r in rows}
    records: list[CellRecord] = []
    table = Table(images={r.name: set() for r in rows})
    draws = {}
    for seed in range(seeds):
        generator = torch.Generator().manual_seed(draw(0, seed))
        order = torch.randperm(pool, generator=generator).tolist()
        draws[seed] = (
            order[:selection_victims],
            order[selection_victims : selection_victims + fresh_victims],
        )
        for stage, images in ((1, draws[seed][0]), (2, draws[seed][1])):
            records.append(_cell("baseline", None, None, seed, stage, references[images]))
    world = _World(references, image_effect, interaction, rng)
    for row in rows:
        effects = _RowEffects(rng.normal(0.0, SEED_SD, size=seeds),
                              {a: rng.normal(0.0, CELL_SEED_SD, size=seeds) for a in ATTACKS},
                              rng.random(seeds) < row.refused_seeds)  # fmt: skip
        for seed in range(seeds):
            for attack in ATTACKS:
                records.append(_cell("attack", row.name, attack, seed, 1,
                                     world.ssims(row, effects, attack, seed, draws[seed][0]),
                                     bool(effects.refused[seed])))  # fmt: skip
        stage_one = [r for r in records if r.stage == 1 and (r.defense == row.name or r.kind == "baseline")]
        (found,) = ranking.attack_scores(stage_one).values()  # with the seeds' references, as standings
        best, _ = ranking.strongest(found)
        assert best is not None
        for seed in range(seeds):
            images = draws[seed][1]
            table.images[row.name].update(images)
            records.append(_cell("attack", row.name, best.attack, seed, 2,
                                 world.ssims(row, effects, best.attack, seed, images),
                                 bool(effects.refused[seed])))  # fmt: skip
    original = ranking.rank
    try:
        if rank is not None:
            ranking.rank = rank  # type: ignore[assignment]
        table.standings = ranking.standings(records, TABLE_THREAT)
        table.records = records
    finally:
        ranking.rank = original  # type: ignore[assignment]
    return table


@dataclass(frozen=True)
class Rates:
    """How often, over ``tables`` simulated tables, each event happened."""

    tables: int
    counts: dict[str, int]

    def rate(self, event: str) -> float:
        return self.counts.get(event, 0) / self.tables


def separated(table: Table, a: str, b: str) -> bool:
    """Whether rows ``a`` and ``b`` share no letter (shown different by the all-pairs tests)."""
    found = {s.defense: s.letters for s in table.standings}
    return not set(found[a]) & set(found[b])


def measure(
    rows: Sequence[Row],
    events: dict[str, Callable[[Table], bool]],
    tables: int,
    seed: int = 0,
    **options: object,
) -> Rates:
    """Count ``events`` over ``tables`` simulated tables of ``rows``."""
    rng = np.random.default_rng(seed)
    counts = dict.fromkeys(events, 0)
    for _ in range(tables):
        table = simulate_table(rows, rng, **options)  # type: ignore[arg-type]
        for name, happened in events.items():
            counts[name] += bool(happened(table))
    return Rates(tables, counts)


def null_rows(count: int = 20) -> list[Row]:
    """``count`` identical rows, the first of them no defense (a guard refusing 1 seed in 8 on each)."""
    return [Row("none" if i == 0 else f"same-{i}", protection=0.0, refused_seeds=0.125) for i in range(count)]


def false_versus_none(table: Table) -> bool:
    """Some row shown to leak less than no defense."""
    return any(s.versus_none is not None and s.versus_none.less for s in table.standings)


def false_pairs(table: Table) -> bool:
    """Some pair of rows shown different."""
    return len({letter for s in table.standings for letter in s.letters}) > 1


def control_passes(table: Table) -> bool:
    """The no-defense row's positive control passes (its strongest attack leaks it measurably)."""
    found = next(s for s in table.standings if s.defense == "none").control
    return found is not None and found.passes
