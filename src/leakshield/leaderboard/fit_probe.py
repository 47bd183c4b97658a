"""What the grid estimator leaves out, probed for the leaderboard's dry run: the fits of defenses and
attacks that need a fitted artifact (LODA's obscured data, Anti-GAN's generators, condensation's
synthetic set, GGL's public generator), the FL rounds trained under such a defense, and the adaptive
attacks run against it. Each fit runs at two short budgets in a temporary cache (never the run's) and is
extrapolated linearly to its configured budget (``FIT_BUDGETS``: the parameters a fit's time grows
with; a preset that leaves them at their defaults is scaled from the defaults); a round is timed once
after the short fit, and each attack at short values of its own probe budget,
doubled until resolved and extrapolated as the grid estimator does."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from leakshield.artifacts import ArtifactCache
from leakshield.attacks import ATTACKS
from leakshield.defenses import DEFENSES
from leakshield.experiment.attack_probe import probed_attack_time
from leakshield.experiment.cells import Cell, runs_against
from leakshield.experiment.config import Component, DefenseSetting, ExperimentConfig
from leakshield.experiment.pipeline import run_cell
from leakshield.experiment.probe_budgets import linear_at, timed
from leakshield.experiment.probe_cache import KeptProbes, probe_key
from leakshield.experiment.stamps import Stamper
from leakshield.experiment.world import ExperimentContext
from leakshield.registry import Registry

#: per fitted method, the parameters its fit's time grows with (scaled together in the probe)
FIT_BUDGETS: dict[str, tuple[str, ...]] = {
    "loda": ("steps",),
    "antigan": ("cgan_steps", "finetune_steps"),
    "dm": ("iterations",),
    "ggl": ("generator_steps",),
    "ggl-adaptive": ("generator_steps",),
    "guide": ("diffusion_steps",),
}
#: the largest budget parameter's value in the two probes (k and 2k)
PROBE_STEPS = 3


def _scaled(params: dict[str, Any], names: tuple[str, ...], steps: int) -> tuple[dict[str, Any], float]:
    """``params`` with its budget parameters scaled so that the largest is ``steps``, and the factor."""
    full = {n: int(params[n]) for n in names if isinstance(params.get(n), int) and params[n] > 0}
    if not full:
        return dict(params), 1.0
    factor = min(1.0, steps / max(full.values()))
    return {**params, **{n: max(1, round(v * factor)) for n, v in full.items()}}, factor


def in_force(entry: dict[str, Any], names: tuple[str, ...], registry: Registry = DEFENSES) -> dict[str, Any]:
    """An entry's parameters (a defense's, or an attack's with ``registry=ATTACKS``) with its budget
    parameters ``names`` at their values in force: a preset that leaves one at its default (LODA's
    steps, GGL's generator steps) is scaled from the default, not skipped."""
    defaults = registry.create(entry["name"], entry["params"]).params.model_dump()
    return {**{n: defaults[n] for n in names if n in defaults}, **entry["params"]}


def _at_full(times: list[float], factors: list[float]) -> float:
    """Seconds at the full budget (factor 1) from the two probes' (factor, seconds)."""
    (t1, t2), (f1, f2) = times, factors
    return linear_at(f1, t1, f2, t2, 1.0)


def _fitted_entry(defense: DefenseSetting) -> dict[str, Any] | None:
    return next((e for e in defense.entries if DEFENSES.get(e["name"]).name in FIT_BUDGETS), None)


def _probe_defense(
    config: ExperimentConfig, defense: DefenseSetting, device: torch.device, folder: str
) -> dict[str, float]:
    entry = _fitted_entry(defense)
    assert entry is not None
    name, model, seeds = DEFENSES.get(entry["name"]).name, config.models[0], config.seeds
    adaptive = _adaptive(config, defense)
    times, factors, attack_seconds = [], [], {}
    full = in_force(entry, FIT_BUDGETS[name])
    for steps in (PROBE_STEPS, 2 * PROBE_STEPS):
        params, factor = _scaled(full, FIT_BUDGETS[name], steps)
        short = DefenseSetting.model_validate({**defense.model_dump(exclude_none=True), **params})
        probe = config.model_copy(update={"defenses": [short], "seeds": seeds[:1]})
        context = ExperimentContext(probe, device, cache=ArtifactCache(f"{folder}/{steps}"))
        times.append(timed(lambda c=context, s=short: c.models.fresh(model, s, seeds[0])))
        factors.append(factor)
    round_seconds = timed(lambda c=context, s=short: c.models.at_round(model, s, seeds[0], 1))
    for attack in adaptive:  # after the (short) fit: each adaptive attack's cell, at short budgets
        attack_seconds[attack.display] = probed_attack_time(
            context, Cell("attack", model, short, attack, 0, seeds[0])
        )
    rounds = max([config.utility.rounds, *config.attack.rounds])
    out = {
        f"fit · {defense.display}": _at_full(times, factors) * len(seeds),
        f"FL training under {defense.display}": round_seconds * rounds * len(seeds),
    }
    for attack, seconds in attack_seconds.items():
        out[f"attack {attack} · {defense.display}"] = seconds * len(seeds) * len(config.attack.rounds)
    return out


def _probe_attack(
    config: ExperimentConfig, attack: Component, device: torch.device, folder: str
) -> dict[str, float]:
    name, model, seeds = ATTACKS.get(attack.name).name, config.models[0], config.seeds
    met, pairs = _met(config, attack)
    if not pairs:
        return {}
    times, factors, cell_seconds = [], [], 0.0
    full = in_force({"name": attack.name, "params": attack.params}, FIT_BUDGETS[name], ATTACKS)
    budget = ATTACKS.create(attack.name, attack.params).probe_budget
    for steps in (PROBE_STEPS, 2 * PROBE_STEPS):
        params, factor = _scaled(full, FIT_BUDGETS[name], steps)
        fitted = Component.model_validate({**attack.model_dump(exclude_none=True), **params})
        shortened = {budget: 2} if budget in ATTACKS.get(attack.name).params.model_fields else {}
        short = Component.model_validate({**fitted.model_dump(exclude_none=True), **shortened})
        probe = config.model_copy(update={"attacks": [short], "seeds": seeds[:1], "defenses": pairs[:1]})
        context = ExperimentContext(probe, device, cache=ArtifactCache(f"{folder}/{steps}"))
        cell = Cell("attack", model, pairs[0], short, 0, seeds[0])
        first = timed(lambda c=context, x=cell: run_cell(c, x))  # the fit and a two-step attack
        again = timed(lambda c=context, x=cell: run_cell(c, x))  # the two-step attack on the cached fit
        times.append(max(first - again, 0.0))
        factors.append(factor)
        if steps == PROBE_STEPS:  # the attack at its own budget, from short probes (each a short refit)
            cell_seconds = probed_attack_time(context, Cell("attack", model, pairs[0], fitted, 0, seeds[0]))
    cells = len(met) * len(seeds) * len(config.attack.rounds)
    return {f"fit · {attack.display}": _at_full(times, factors) * len(seeds),
            f"attack {attack.display} ({cells} cells)": cell_seconds * cells}  # fmt: skip


def _adaptive(config: ExperimentConfig, defense: DefenseSetting) -> list[Component]:
    """The attacks built against a defense (``targets``) that the grid runs against ``defense``."""
    return [a for a in config.attacks if ATTACKS.get(a.name).targets is not None and runs_against(a, defense)]


def _met(config: ExperimentConfig, attack: Component) -> tuple[list[DefenseSetting], list[DefenseSetting]]:
    """The defenses ``attack`` runs against, and those of them without a fit (where it is probed, as no
    defense's fit adds to it)."""
    met = [d for d in config.defenses if runs_against(attack, d)]
    return met, [d for d in met if _fitted_entry(d) is None]


def _kept_key(config: ExperimentConfig, stamper: Stamper, probed: Component | DefenseSetting,
              cells: list[Cell], *more: object) -> str:  # fmt: skip
    """What a fit probe's result depends on: the grid's settings (seeds, rounds, model, federation), the
    probed defense or attack, the cells it times and their components' code (their stamps), ``more``."""
    grid = config.model_dump(mode="json", exclude={"name", "report", "defenses", "attacks"})  # execution in
    stamps = [stamper.stamps(cell) for cell in cells]
    return probe_key("fit-probe", grid, probed.model_dump(mode="json"), [c.key for c in cells], stamps, more)


def probe_fits(
    config: ExperimentConfig, device: torch.device, kept: KeptProbes | None = None
) -> dict[str, float]:
    """Seconds (label → total over the grid's seeds) of the fits, fitted-defense FL rounds and attacks on
    fitted artifacts of ``config``, which the grid estimator lists as not estimated (``kept``: earlier
    dry runs' results, reused where the code and settings they depend on are unchanged)."""
    found: dict[str, float] = {}
    model, seed, stamper = config.models[0], config.seeds[0], Stamper(config)
    with tempfile.TemporaryDirectory() as folder:
        for i, defense in enumerate(config.defenses):
            if _fitted_entry(defense) is not None:  # its fit, a round under it, its adaptive attacks
                cells = [Cell("utility", model, defense, None, 1, seed)]
                cells += [Cell("attack", model, defense, a, 0, seed) for a in _adaptive(config, defense)]
                probe = partial(_probe_defense, config, defense, device, f"{folder}/d{i}")
                found.update(_kept(kept, _kept_key(config, stamper, defense, cells), probe))
        for i, attack in enumerate(config.attacks):
            if ATTACKS.get(attack.name).name in FIT_BUDGETS:  # its fit, its cells where no fit adds
                met, timed_on = _met(config, attack)  # its cell count; where it is probed
                cells = [Cell("attack", model, d, attack, 0, seed) for d in timed_on[:1]]
                probe = partial(_probe_attack, config, attack, device, f"{folder}/a{i}")
                found.update(
                    _kept(kept, _kept_key(config, stamper, attack, cells, [d.display for d in met]), probe)
                )
    return found


def _kept(kept: KeptProbes | None, key: str, probe: Callable[[], dict[str, float]]) -> dict[str, float]:
    """``probe()``'s labelled seconds, or the ones an earlier dry run kept under ``key``."""
    found = probe() if kept is None else kept.seconds(key, probe)
    assert isinstance(found, dict)
    return found
