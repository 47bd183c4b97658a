"""The dry run's probe of one attack cell: the real cell at short budgets, extrapolated to its own
(see :mod:`leakshield.experiment.estimate`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leakshield.attacks.base import Attack
from leakshield.attacks.passive.inversion.calibration import SMALL_JOB
from leakshield.experiment.cells import Cell
from leakshield.experiment.config import Component, DefenseSetting
from leakshield.experiment.pipeline import ExperimentContext, run_cell
from leakshield.experiment.probe_budgets import (
    extrapolated,
    resolved_slope,
    scaled_defense,
    scratch,
    setup_budget,
    short_budget,
    timed,
)
from leakshield.experiment.server_attack import fitted_attack


def probed_attack_time(context: ExperimentContext, cell: Cell) -> float:
    """Seconds of ``cell``'s attack at round 0, timed at a short value of its probe budget
    (``Attack.probe_budget``) and at doublings of it until resolved
    (:func:`~leakshield.experiment.probe_budgets.resolved_slope`), and extrapolated. Also shortened, and
    doubled from their short values in turn: the budget of an attack it runs inside
    (``Attack.inner_budget``, whose cost multiplies), else the budgets whose cost adds — the attack's
    once-per-cell work (its ``setup_budget``) and the defense's (its ``probe_budget``: DCS²'s synthesis
    makes the victims' updates). The defense's budget is modelled as once per cell: a participant
    attack whose every round trains through it is under-counted, and an attack with an inner budget
    runs the defense's whole. An attack without a probe budget, or with one of k or fewer, runs once,
    whole."""
    attack = context.config.create_attack(cell.attack)
    budget_name = attack.probe_budget
    iterations = getattr(attack.params, budget_name, None)
    k = short_budget(iterations or 0)
    if not iterations or iterations <= k:
        probe = Cell("attack", cell.model, cell.defense, cell.attack, 0, cell.seed, cell.scale)
        return timed(lambda: run_cell(context, probe))

    calibrated: list[bool] = []

    def run(updates: dict[str, Any], defense: DefenseSetting | None = None) -> float:
        short = Cell("attack", cell.model, defense or cell.defense,
                     Component(**{**cell.attack.model_dump(exclude_none=True), **updates}), 0, cell.seed,
                     cell.scale)  # fmt: skip
        # untimed, as a run pays them once and not per cell: the defenses' fits and the attack's own
        # (its key holds the probe's budgets), and the path calibration the first run of SMALL_JOB
        # steps or more makes
        context.models.at_round(cell.model, short.defense, cell.seed, 0)
        if attack.fit_scope is not None:
            fitted_attack(context, short, short.attack)
        if not calibrated and int(updates.get(budget_name, 0)) >= SMALL_JOB:
            calibrated.append(True)
            run_cell(context, short)
        return timed(lambda: run_cell(context, short))

    def main(m: int) -> tuple[dict[str, Any], DefenseSetting | None, float]:
        return {budget_name: min(m * k, iterations)}, None, float(min(m * k, iterations))

    inner = attack.inner_budget()
    if inner is not None and inner[0] > 2 * short_budget(inner[0]):
        # cost ≈ set-up + rounds · (per round + inner steps · per inner step)
        j, set_inner = short_budget(inner[0]), inner[1]
        run({**main(1)[0], **set_inner(j)})  # warm-up
        t1 = run({**main(1)[0], **set_inner(j)})
        per_round = resolved_slope(lambda m: (run({**main(m)[0], **set_inner(j)}), main(m)[2]), t1, k,
                                   iterations / 4)  # fmt: skip
        per_inner_step = resolved_slope(lambda m: (run({**main(1)[0], **set_inner(m * j)}), m * j), t1, j,
                                        inner[0] / 4) / k  # fmt: skip
        setup = max(t1 - k * per_round, 0.0)
        return setup + iterations * (max(per_round - j * per_inner_step, 0.0) + inner[0] * per_inner_step)
    budgets: list[Added] = [(main, float(iterations)), *_added_budgets(attack, cell)]
    if len(budgets) == 1:
        return extrapolated(lambda budget: run({budget_name: budget}), iterations)
    # cost ≈ set-up + Σ over the budgets (main, added) of value · cost per unit
    short_updates = {key: value for at, _ in budgets for key, value in at(1)[0].items()}
    short_defense = next((at(1)[1] for at, _ in budgets if at(1)[1] is not None), None)

    def run_at(at: At, m: int) -> tuple[float, float]:
        updates, defense, value = at(m)
        return run({**short_updates, **updates}, defense or short_defense), value

    with scratch(context):
        run(short_updates, short_defense)  # warm-up
        t1 = run(short_updates, short_defense)
        slopes = [
            resolved_slope(lambda m, at=at: run_at(at, m), t1, at(1)[2], full / 4) for at, full in budgets
        ]
    setup = max(t1 - sum(slope * at(1)[2] for slope, (at, _) in zip(slopes, budgets, strict=True)), 0.0)
    return setup + sum(slope * full for slope, (_, full) in zip(slopes, budgets, strict=True))


#: a budget at m × its short value: (attack parameter updates, the defense to run or None, its value)
At = Callable[[int], tuple[dict[str, Any], DefenseSetting | None, float]]
#: a budget the probe shortens: its settings at m × its short value, and its full value
Added = tuple[At, float]


def _added_budgets(attack: Attack, cell: Cell) -> list[Added]:
    """The budgets whose cost adds to the probe budget's: the attack's once-per-cell work and the
    defense's (see :func:`probed_attack_time`)."""
    added: list[Added] = []
    name = setup_budget(attack)
    value = getattr(attack.params, name, None) if name else None
    full = int(value) if isinstance(value, int) else 0
    if name and full > 2 * short_budget(full):
        short = short_budget(full)

        def setup_at(m: int) -> tuple[dict[str, Any], DefenseSetting | None, float]:
            return {name: min(m * short, full)}, None, float(min(m * short, full))

        added.append((setup_at, float(full)))
    if (scaled := scaled_defense(cell.defense, 1)) is not None and scaled[1] < 1.0:

        def defense_at(m: int) -> tuple[dict[str, Any], DefenseSetting | None, float]:
            found = scaled_defense(cell.defense, m)
            assert found is not None
            return {}, _relabelled(*found), found[1]

        added.append((defense_at, 1.0))
    return added


def _relabelled(defense: DefenseSetting, factor: float) -> DefenseSetting:
    """A probe's scaled ``defense`` under a label of its own (the trained models are cached by label)."""
    return defense.model_copy(update={"label": f"{defense.display} (probe at {factor:g})"})
