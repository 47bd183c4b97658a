"""The ``gpu`` preset's time on an H200, projected from this CPU's dry run (docs/leaderboard.md, "The
gpu preset"): each kind of cell's CPU seconds × this CPU's IG rate ÷ the H200's IG rate at the cell's
images in flight, as measured by benchmarks/gpu_speed.py. Used by ``benchmarks/gpu_preset.py --dry``.
"""

from __future__ import annotations

import io
import itertools
import json
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any


class ProjectionError(Exception):
    """The projection cannot be made (said in one line)."""


#: IG's image·steps per second on one H200 (docs/speed-and-scale.md, "On a GPU": untrained 32-px
#: victims) when the victims of one FedSGD round on an eval-mode model advance together (vectorized):
#: (images in flight, rate) points, read linearly between them, flat beyond the last, and in
#: proportion below the first (a step there is bound by kernel launches, not arithmetic)
H200_VECTORIZED: dict[str, list[tuple[int, float]]] = {
    "resnet18": [(1, 36.8), (8, 146.7), (64, 398.7)],  # one victim alone runs at the one-by-one rate
    "lenet": [(16, 877.0), (1024, 34574.0)],
}
#: one victim at a time (``path: loop``; train-mode BatchNorm, FedAvg updates and the BatchNorm prior
#: always run so): ResNet-18 ran 8 victims × 20 steps at 36.8 image·steps/s, a step of one image in
#: 27 ms; a step of m images is taken to take as long, up to the vectorized rate at m images
H200_ONE_BY_ONE: dict[str, float] = {"resnet18": 36.8}


def h200_rate(model: str, images: int, one_by_one_step: int | None = None) -> float | None:
    """Image·steps per second of an optimisation attack on ``model`` on an H200: ``images`` in flight
    together, or (``one_by_one_step``) victims one at a time with that many images in each forward
    pass; None for a model not measured there."""
    points = H200_VECTORIZED.get(model)
    if points is None:
        return None

    def vectorized(n: int) -> float:
        if n <= points[0][0]:
            return points[0][1] * n / points[0][0]
        for (x1, y1), (x2, y2) in itertools.pairwise(points):
            if n <= x2:
                return y1 + (y2 - y1) * (n - x1) / (x2 - x1)
        return points[-1][1]

    if one_by_one_step is None:
        return vectorized(images)
    if model not in H200_ONE_BY_ONE:
        return None
    return min(H200_ONE_BY_ONE[model] * one_by_one_step, vectorized(one_by_one_step))


#: defenses whose defended model samples (PRECODE's bottleneck, dropout): the engine then runs its
#: victims one at a time
STOCHASTIC_DEFENSES = {"precode", "dropout"}


def cell_batch(config: Any, cell: Any) -> int:
    """The images of each of ``cell``'s victims: its point of the batch axis, else the config's."""
    return cell.scale.batch if cell.scale and cell.scale.batch else config.victims.batch_size


def cell_rate(config: Any, cell: Any, model: str) -> float | None:
    """:func:`h200_rate` for ``cell``, by how the inversion engine would run it (the conditions of
    ``GradientInversion.vectorizable``): its victims together only for one FedSGD round on an eval-mode,
    deterministic model, more than one victim, no BatchNorm prior, joint labels only with L-BFGS, no
    part the attack overrides (FedLeak, the FedAvg attack, the adaptive attacks) and a path other than
    ``loop``; otherwise one at a time. None: an attack outside the engine (analytic), or a model not
    measured on an H200."""
    from leakshield.attacks.passive.inversion.engine import GradientInversion

    attack = config.create_attack(cell.attack)
    if not isinstance(attack, GradientInversion):
        return None
    p, update = attack.params, config.attack.update
    batch = cell_batch(config, cell)
    stochastic = any(entry["name"] in STOCHASTIC_DEFENSES for entry in cell.defense.entries)
    together = attack.execution.path != "loop" and config.victims.count > 1 and not p.bn_stats
    together = together and not attack._parts_changed() and (p.labels != "joint" or p.optimizer == "lbfgs")
    together = (
        together and config.attack.model_mode == "eval" and update.algorithm == "fedsgd" and not stochastic
    )
    if together:
        return h200_rate(model, config.victims.count * batch)
    step = batch if update.algorithm == "fedsgd" else min(update.batch_size, batch)
    return h200_rate(model, batch, one_by_one_step=step)


def cell_work(config: Any, cell: Any) -> int:
    """The image·steps of ``cell``'s attack: victims × images each × steps × restarts × local epochs (a
    FedAvg update replays every image once an epoch)."""
    attack = config.create_attack(cell.attack)
    batch = cell_batch(config, cell)
    update = config.attack.update
    epochs = update.local_epochs if update.algorithm != "fedsgd" else 1
    steps = int(getattr(attack.params, "iterations", 0)) * int(getattr(attack.params, "restarts", 1))
    return config.victims.count * batch * steps * epochs


def cell_h200(config: Any, cell: Any, model: str, cpu_seconds: float, cpu_rate: float) -> float | None:
    """A cell's seconds on an H200: its CPU seconds at this CPU's IG pace, moved to the card's rate for
    how it runs there, and never less than its image·steps at that rate (the CPU runs a large batch
    faster per image than 8 victims, which the card's rate already counts); None where not calibrated."""
    rate = cell_rate(config, cell, model)
    if rate is None:
        return None
    return max(cpu_seconds * cpu_rate / rate, cell_work(config, cell) / rate)


def gpu_projection(config_file: Path | None, data: Path, run: Path, log: Path) -> dict[str, Any]:
    """The preset's dry run on this CPU (written to ``log``), each attack cell projected on an H200 by
    :func:`cell_h200` (its CPU seconds × this CPU's IG rate, from the dry run's own probe of the main
    grid's IG cell, ÷ the card's rate for how the cell runs there, and at least its image·steps at that
    rate): an attack that costs k IG steps a step on the CPU is projected to cost k on the card. FL
    training, baselines and stage 2's bound are projected at IG's pace; analytic attacks and models not
    measured on an H200 are counted at their CPU seconds and listed; kinds the dry run could not
    estimate are listed (counted 0)."""
    from leakshield.experiment.cells import expand_grid
    from leakshield.leaderboard.dry_run import estimate_grids, stage_two_bound
    from leakshield.leaderboard.presets import load_leaderboard, load_scenarios, load_stage_two_victims

    main = load_leaderboard("gpu", path=config_file, data_root=data)
    if not any(a.name == "ig" for a in main.attacks):
        raise ProjectionError("the preset's main grid runs no IG, the attack the projection is calibrated on")
    grids = [("main grid", main, run)] + [
        (f"scenario {n}", c, run / "scenarios" / n)
        for n, c, _ in load_scenarios("gpu", path=config_file, data_root=data)
    ]
    jobs = [(t, json.dumps(c.model_dump(mode="json")), str(w)) for t, c, w in grids]
    printed = io.StringIO()
    with redirect_stdout(printed):
        parts = estimate_grids(jobs, "cpu", None, 1)
    model = main.models[0]
    ig = next(a for a in main.attacks if a.name == "ig")
    ig_cell = next(c for c in expand_grid(main) if c.attack == ig and c.model == model)
    ig_seconds = (parts[0].attacks or {}).get((model.display, ig.display, ""))
    if not ig_seconds:
        raise ProjectionError(f"the dry run could not time IG on {model.display} (its probe failed)")
    cpu_rate = cell_work(main, ig_cell) / ig_seconds
    ig_rate = cell_rate(main, ig_cell, model.name)
    slow = cpu_rate / (ig_rate or cpu_rate)  # H200 seconds per CPU second at IG's pace
    found: dict[str, Any] = {
        "cpu rate (IG image·steps/s)": round(cpu_rate, 1),
        "grids": {},
        "not calibrated": [],
        # kinds the dry run could not estimate (listed in the log, counted 0 here)
        "not estimated": [
            f"{g[0]}: {part.not_estimated} kind(s)"
            for g, part in zip(grids, parts, strict=True)
            if part.not_estimated
        ],
    }
    cpu_total = h200_total = 0.0
    for (title, config, _), part in zip(grids, parts, strict=True):
        names = {m.display: m.name for m in config.models}
        attack_cpu = attack_h200 = 0.0
        for cell in expand_grid(config):
            if cell.kind != "attack" or cell.attack is None:
                continue
            scale = cell.scale.label if cell.scale else ""
            seconds = (part.attacks or {}).get((cell.model.display, cell.attack.display, scale)) or 0.0
            projected = cell_h200(config, cell, names[cell.model.display], seconds, cpu_rate)
            attack_cpu += seconds
            if projected is None:  # counted at its CPU seconds
                found["not calibrated"].append(f"{title}: {cell.attack.display} on {cell.model.display}")
            attack_h200 += seconds if projected is None else projected
        rest = max(part.seconds - attack_cpu, 0.0)  # FL training, baselines
        grid_h200 = attack_h200 + rest * slow
        found["grids"][title] = {"cpu s": round(part.seconds, 1), "h200 s": round(grid_h200, 1)}
        cpu_total, h200_total = cpu_total + part.seconds, h200_total + grid_h200
    fresh = load_stage_two_victims("gpu", path=config_file)
    reruns, stage2 = stage_two_bound(main, parts[0].attacks or {}, fresh)
    found["grids"]["stage 2 (bound)"] = {
        "reruns": reruns,
        "cpu s": round(stage2, 1),
        "h200 s": round(stage2 * slow, 1),
    }
    found["cpu seconds"] = round(cpu_total + stage2, 1)
    found["h200 seconds"] = round(h200_total + stage2 * slow, 1)
    found["not calibrated"] = sorted(set(found["not calibrated"]))
    cpu_minutes, h200_minutes = found["cpu seconds"] / 60, found["h200 seconds"] / 60
    summary = (f"— stage 2: at most {reruns} reruns on {fresh} fresh victims per seed, "
               f"≤ {stage2 / 60:.1f} min\n"
               f"leaderboard total on this CPU: {cpu_minutes:.1f} min with 1 worker; "
               f"projected on an H200: {h200_minutes:.1f} min\n")  # fmt: skip
    log.write_text(printed.getvalue() + "".join(part.text for part in parts) + summary)
    return found
