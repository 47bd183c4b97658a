"""Short probes and their extrapolation, shared by the dry run's estimators: a probe runs the real code
at a short value k of a budget the cost grows linearly with, then at 2k, 4k … until the difference is
resolved, and extrapolates (time ≈ set-up + budget · per step).

A component tells the estimator what its cost grows with through its own declarations: an attack's
``probe_budget``, ``inner_budget``, ``fit_budget`` and optional ``setup_budget``, a defense's optional
``probe_budget`` (read with ``getattr``: only the components that have one declare it, so that no
other component's code stamp changes)."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from leakshield.artifacts import Artifact, ArtifactCache, FitKey
from leakshield.attacks.base import Attack
from leakshield.defenses import DEFENSES
from leakshield.experiment.config import DefenseSetting

if TYPE_CHECKING:
    from leakshield.experiment.world import ExperimentContext


def setup_budget(attack: Attack) -> str | None:
    """A parameter of once-per-cell work whose cost adds to the probe budget's, which the probe shortens
    too (an attack's optional ``setup_budget``: the GAN attack's final generator steps), or None."""
    return getattr(attack, "setup_budget", None)


def defense_budget(defense: object) -> str | None:
    """The parameter a defense's update cost grows linearly with (its optional ``probe_budget``: DCS²'s
    synthesis steps per minibatch holding a sensitive sample), or None."""
    return getattr(defense, "probe_budget", None)


def timed(run: Callable[[], object]) -> float:
    """Wall-clock seconds of ``run()``."""
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def short_budget(budget: int) -> int:
    """The short probe budget k for a full ``budget`` (k is timed, then 2k, 4k … until resolved)."""
    return max(2, min(budget // 100, 5))


#: a probe's budget is doubled until the time it adds reaches this many seconds (a smaller difference
#: drowns in timing noise) or the next doubling would pass a quarter of the full budget (the first
#: doubling, 2k, always runs)
RESOLVED_SECONDS = 0.5


def resolved_slope(run_at: Callable[[int], tuple[float, float]], t1: float, x1: float, cap: float) -> float:
    """Seconds per unit of a budget: ``run_at(m)`` runs at m × the short value and returns (seconds,
    budget); m = 2, 4, 8 … until the run takes ``RESOLVED_SECONDS`` more than ``t1`` (the time at ``x1``,
    m = 1) or the next doubling would pass ``cap``; never negative."""
    m = 2
    while True:
        seconds, x = run_at(m)
        if seconds - t1 >= RESOLVED_SECONDS or 2 * x > max(cap, 2 * x1) or x <= x1:
            return max(seconds - t1, 0.0) / (x - x1) if x > x1 else 0.0
        m *= 2


def linear_at(x1: float, t1: float, x2: float, t2: float, x: float) -> float:
    """Seconds at budget ``x`` from seconds ``t1``, ``t2`` at budgets ``x1`` < ``x2``: set-up + x · per
    step, neither negative (noise can make the longer probe the faster one). ``x2 <= x1``: the probe
    already ran at the budget, its time is the answer."""
    if x2 <= x1:
        return t2
    per_step = max(t2 - t1, 0.0) / (x2 - x1)
    return max(t1 - x1 * per_step, 0.0) + x * per_step


def extrapolated(run: Callable[[int], float], budget: int) -> float:
    """Seconds of ``run`` at ``budget``: set-up + budget · per step, from its time at a short budget k
    (after a warm-up run at k: first forward passes, caches) and at 2k, 4k … until resolved
    (:func:`resolved_slope`)."""
    k = min(short_budget(budget), budget)
    run(k)
    t1 = run(k)
    if budget <= k:
        return t1
    per_step = resolved_slope(lambda m: (run(min(m * k, budget)), min(m * k, budget)), t1, k, budget / 4)
    return max(t1 - k * per_step, 0.0) + budget * per_step


def scaled_defense(defense: DefenseSetting, multiple: int) -> tuple[DefenseSetting, float] | None:
    """``defense`` with the probe budgets of its entries (:func:`defense_budget`) scaled by one factor,
    so that the largest is ``multiple`` × its short budget k, and the factor; None when no entry has
    one."""
    full: dict[int, tuple[str, int]] = {}
    for i, entry in enumerate(defense.entries):
        made = DEFENSES.create(entry["name"], entry["params"])
        name = defense_budget(made)
        if name is not None and isinstance(getattr(made.params, name, None), int):
            full[i] = (name, int(getattr(made.params, name)))
    if not full:
        return None
    largest = max(value for _, value in full.values())
    factor = min(1.0, multiple * short_budget(largest) / largest)
    changed = []
    for i, entry in enumerate(defense.entries):
        params = dict(entry["params"])
        if i in full:
            name, value = full[i]
            params[name] = max(1, round(value * factor))
        changed.append({"name": entry["name"], **params})
    dump = defense.model_dump(exclude_none=True)
    if defense.stack is not None:
        return DefenseSetting.model_validate({**dump, "stack": changed}), factor
    kept = {key: dump[key] for key in ("label", "training") if key in dump}
    return DefenseSetting.model_validate({**kept, **changed[0]}), factor


class ProbeCache(ArtifactCache):
    """A probe's temporary artifact cache, which leaves out the fits that only measure (DCS²'s budget
    check): their cost is paid once per chain, not in a round or a cell, and a probe needs no measure."""

    def get_or_fit(self, key: FitKey, fit: Callable[[], Artifact]) -> Artifact:
        kind, _, name = key.component.partition(":")
        if kind == "defense" and getattr(DEFENSES.get(name).factory, "fit_measures_only", False):
            return Artifact({})
        return super().get_or_fit(key, fit)


@contextmanager
def scratch(context: ExperimentContext) -> Iterator[None]:
    """A probe's fits in a temporary :class:`ProbeCache` (never the run's), and the models it trains and
    the artifacts it records forgotten after."""
    models = context.models
    with tempfile.TemporaryDirectory() as folder:
        saved = context.cache, models.cache, models._states, models.used
        context.cache = models.cache = ProbeCache(folder)
        models._states, models.used = {}, list(models.used)
        try:
            yield
        finally:
            context.cache, models.cache, models._states, models.used = saved
