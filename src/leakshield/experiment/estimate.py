"""``leakshield run --dry-run``: the cells still to compute and how long they should take.

Estimates come from short probes of the real code on the real data, victims and device, never from a
table: one FL round per (model, defense), and each (model, attack) run at a short budget k and at 2k, 4k
… until the difference is resolved, so that set-up and per-step cost separate (time ≈ set-up + budget ·
per step; L-BFGS attacks that stop early finish sooner, so theirs is an upper bound). The budget is
``iterations``, or the parameter an attack names (``Attack.probe_budget``; Carlini et al.'s attack: its
observed ``rounds``; the GAN attack's ``rounds`` and its ``setup_budget``, the final steps); the budget
of an attack it runs inside (``Attack.inner_budget``: the inner inversion's iterations) is shortened
too, and the time extrapolated in both. A defense whose update cost grows with a budget it declares
(a defense's ``probe_budget``: DCS²'s synthesis steps) is shortened the same way in its FL
round and in the updates of the attack cells probed against it (in a temporary cache; the probe of an
attack kind runs against the first defense it meets). A chain of cells (one model × defense × seed)
trains its FL model once up to its last round. An attack whose fit grows linearly with a budget it
declares (``Attack.fit_budget``, e.g. SEER's training steps) has its fit timed once per model layout at
two short budgets and its cells probed with a two-step fit (in a temporary cache, never the run's).
Other methods that need a fitted artifact (policy searches, public generators) are listed as not
estimated: a probe could start the fit itself, which may take hours. With N workers the total is divided
by N (chains permitting). A round is probed only for chains that train (an attack at round 0 with no
utility needs none), and the grids of one dry run (a leaderboard's main grid and its scenarios) share a
:class:`ProbeMemo`: a set-up timed once is not timed again.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from functools import partial

import torch

from leakshield.artifacts import FitData
from leakshield.attacks import create_attack
from leakshield.defenses.base import DefensePipeline
from leakshield.experiment.attack_probe import probed_attack_time
from leakshield.experiment.cells import Cell
from leakshield.experiment.compatibility import check_attacks_fit_models, check_defenses_fit_clients
from leakshield.experiment.config import Component, DefenseSetting
from leakshield.experiment.fitting import attack_fit_key, model_layout
from leakshield.experiment.parallel import chains
from leakshield.experiment.pipeline import ExperimentContext, run_cell
from leakshield.experiment.probe_budgets import extrapolated, resolved_slope, scaled_defense, scratch, timed
from leakshield.experiment.probe_budgets import linear_at as linear_at  # its public path since 0.2
from leakshield.experiment.probe_cache import ProbeMemo, memo_for
from leakshield.experiment.rundir import STORE_FILE, check_run_dir
from leakshield.experiment.server_attack import attack_fit_setting
from leakshield.experiment.stamps import Stamper, stale_keys
from leakshield.experiment.store import ResultStore
from leakshield.experiment.training import TrainedModels
from leakshield.fl import HonestClient, ServerKnowledge


def _setup_key(config, kind: str, *parts: object) -> str:
    """What a probe of ``kind`` (``round``: one FL round; ``attack``: one attack cell) depends on."""
    exclude = {"name", "seeds", "defenses", "attacks", "utility", "report", "execution"}
    if kind == "round":  # the victims and how they are attacked do not change the federation's training
        exclude |= {"attack", "victims"}
    payload = config.model_dump(mode="json", exclude=exclude)
    payload.get("attack", {}).pop("rounds", None)
    return json.dumps([kind, payload, *parts], sort_keys=True, default=str)


@dataclass
class GridEstimate:
    """Seconds per kind of cell (label → (cells, seconds each)), FL training, and what was left out."""

    kinds: dict[str, tuple[int, float]] = field(default_factory=dict)
    training: float = 0.0
    not_estimated: list[str] = field(default_factory=list)
    total_cells: int = 0
    todo: int = 0
    #: (model, attack, scale label) → seconds of one attack cell (None: not probed), as probed
    attack_seconds: dict[tuple[str, str, str], float | None] = field(default_factory=dict)

    def seconds(self, workers: int = 1) -> float:
        work = self.training + sum(n * s for n, s in self.kinds.values())
        return work / max(workers, 1)


#: ``leakshield run`` prints the estimate before it starts when at least this many cells are to compute
LONG_RUN_CELLS = 40


def cells_to_compute(runner) -> list[Cell]:
    """The cells of ``runner``'s grid not stored yet, or stored by other code or settings than the
    installed ones (refuses a run directory of another config)."""
    check_run_dir(runner.config, runner.out)
    store_path = runner.out / STORE_FILE
    cells = runner.cells()
    done: set[str] = set()
    if store_path.exists():
        store = ResultStore(store_path)
        done = store.finished_keys() - stale_keys(store, runner.stamps(cells))
    return [c for c in cells if c.key not in done]


def estimate_grid(runner, memo: ProbeMemo | None = None) -> GridEstimate:
    """Probe every kind of cell of ``runner``'s grid that is not stored yet (see the module docstring);
    ``memo``: probe times shared with the other grids of the same dry run."""
    if memo is None:  # one grid alone: its own kept times, written when it is done (or stopped)
        with memo_for(None, runner.cache.root, runner.device) as own:
            return estimate_grid(runner, own)
    todo = cells_to_compute(runner)
    result = GridEstimate(total_cells=len(runner.cells()), todo=len(todo))
    if not todo:
        return result
    config = runner.config
    context = ExperimentContext(config, runner.device, progress=False, cache=runner.cache)
    check_attacks_fit_models(config, context.info)  # the run would refuse it: so does its estimate
    check_defenses_fit_clients(config, context.clients)
    round_seconds: dict[tuple, float | None] = {}
    attack_seconds: dict[tuple, float | None] = {}
    stamper = Stamper(config)
    memo.execution = config.execution.model_dump(mode="json")
    fits: set[object] = set()  # the cells (attack, model, defense, seed) and fit keys already counted
    for chain in chains(todo):
        first = chain[0]
        if first.kind == "baseline":
            for cell in chain:
                probe = partial(timed, partial(run_cell, context, cell))
                _add(
                    result,
                    "baseline",
                    memo.seconds(
                        memo.cells, _setup_key(config, "cell", cell.key), stamper.stamps(cell), probe
                    ),
                )
            continue
        pair = (first.coordinates["model"], first.coordinates["defense"])
        last = max((c.round or 0) + _observed(c) - 1 for c in chain)
        trains = last > 0 or any(c.kind == "detection" and c.round for c in chain)
        if trains and pair not in round_seconds:  # a chain at round 0 only trains nothing: no probe
            model, defense = first.model.model_dump(mode="json"), first.defense.model_dump(mode="json")
            key = _setup_key(config, "round", model, defense)
            stamps = {k: v for k, v in stamper.stamps(first).items() if k != "attack"}
            round_seconds[pair] = memo.seconds(memo.rounds, key, stamps, partial(_round_time, context, first))
        per_round = round_seconds.get(pair, 0.0)
        if per_round is not None:
            result.training += per_round * last
        for cell in chain:
            if cell.kind == "utility":
                label = f"utility · {cell.coordinates['model']}"
                _add(result, label, 0.0 if per_round is not None else None)
                continue
            if cell.kind == "detection":  # it replays the federation's rounds to judge each model
                probe = partial(_detection_time, context, cell)
                # it judges every model-modifying attack's model at every attack round
                judged = [a.model_dump(mode="json") for a in config.attacks], config.attack.rounds
                key = _setup_key(config, "cell", cell.key, judged)
                seconds = memo.seconds(memo.cells, key, stamper.stamps(cell), probe)
                if seconds is not None and per_round is not None:
                    seconds += per_round * (cell.round or 0)
                _add(result, f"detection · {pair[0]} · {pair[1]}", seconds)
                continue
            scale = cell.scale.label if cell.scale else ""
            key = (cell.coordinates["model"], cell.coordinates["attack"], scale)
            label = " · ".join(p for p in (f"attack {key[1]}", str(key[0]), scale) if p)
            if key not in attack_seconds:
                shared = _setup_key(config, "attack", cell.model.model_dump(mode="json"),
                                    cell.attack.model_dump(mode="json"), scale)  # fmt: skip
                try:
                    attack_seconds[key] = memo.seconds(
                        memo.attacks,
                        shared,
                        stamper.stamps(cell),
                        partial(_attack_time, context, cell),
                    )
                except Exception as exc:  # the cell would fail the same way: say so now
                    attack_seconds[key] = None
                    result.not_estimated.append(f"{label}: its probe failed ({type(exc).__name__}: {exc})")
            _add(result, label, attack_seconds[key])
            if attack_seconds[key] is not None:
                _add_fit(result, context, cell, fits, (memo, stamper))
    for pair, seconds in round_seconds.items():
        if seconds is None:
            result.not_estimated.append(f"FL training under {pair[1]} ({pair[0]}) ({NOT_PROBED})")
    result.attack_seconds = dict(attack_seconds)
    return result


#: why a kind of cell without a probe is not estimated
NOT_PROBED = "needs a fitted artifact; such methods are not probed"


def _add(result: GridEstimate, label: str, seconds: float | None) -> None:
    if seconds is None:
        if not any(entry.startswith(label) for entry in result.not_estimated):
            result.not_estimated.append(f"{label} ({NOT_PROBED})")
        return
    count, _ = result.kinds.get(label, (0, seconds))
    result.kinds[label] = (count + 1, seconds)


def _observed(cell: Cell) -> int:
    return create_attack(cell.attack.name, cell.attack.params).rounds_observed if cell.attack else 1


def _needs_fit(cell: Cell) -> bool:
    pipeline = DefensePipeline.from_config(cell.defense.entries)
    return any(d.fit_scope is not None and not d.fit_measures_only for d in pipeline.defenses)


def _round_time(context: ExperimentContext, cell: Cell) -> float | None:
    """Seconds of one FL round of (model, defense), measured on a fresh model; a defense whose update
    cost grows with a budget (a defense's ``probe_budget``: DCS²'s synthesis steps) has its
    round timed at a short budget and at doublings of it until resolved (after a warm-up, in a temporary
    cache), and extrapolated."""
    if _needs_fit(cell):
        return None
    short = scaled_defense(cell.defense, 1)
    if short is None or short[1] >= 1.0:
        return _one_round(context.models, cell, cell.defense)

    def round_at(multiple: int) -> tuple[float, float]:
        scaled, factor = scaled_defense(cell.defense, multiple)  # type: ignore[misc]  # not None: short is
        return _one_round(context.models, cell, scaled), factor

    with scratch(context):
        _one_round(context.models, cell, short[0])  # warm-up: first forward passes
        t1 = _one_round(context.models, cell, short[0])
        per_budget = resolved_slope(round_at, t1, short[1], 0.25)
    return max(t1 - short[1] * per_budget, 0.0) + per_budget


def _one_round(models: TrainedModels, cell: Cell, defense: DefenseSetting) -> float:
    models._states = {}
    models.at_round(cell.model, defense, cell.seed, 0)  # build (and cache) the fresh model
    seconds = timed(lambda: models.at_round(cell.model, defense, cell.seed, 1))
    models._states = {}
    return seconds


def _add_fit(
    result: GridEstimate,
    context: ExperimentContext,
    cell: Cell,
    seen: set[object],
    kept: tuple[ProbeMemo, Stamper],
) -> None:
    """The one-off fit of the cell's attack (attacks that declare a
    :attr:`~leakshield.attacks.base.Attack.fit_budget` only): once per fit the run will make — per seed,
    model and, for fits of the model's own parameters, model layout — unless the cache already holds it;
    timed at a short budget and its doublings and extrapolated once per label, the other seeds counted
    at that time."""
    where = cell.coordinates
    quadruple = (where["attack"], where["model"], where["defense"], cell.seed)
    if quadruple in seen:
        return
    seen.add(quadruple)
    attack = context.config.create_attack(cell.attack)
    if attack.fit_budget is None or _needs_fit(cell):
        return
    setting = attack_fit_setting(context, cell)
    key = attack_fit_key(attack, setting)
    if key.digest in seen or context.cache.load(key) is not None:
        return  # another defense with the same layout shares this fit, or the run loads it
    seen.add(key.digest)
    net = setting.model
    label = f"fit {cell.coordinates['attack']} · {cell.coordinates['model']}"
    if attack.fit_trains_model:  # one fit per model layout (a defense's model stage may change it)
        label += f" · layout {hashlib.sha256(json.dumps(model_layout(net)).encode()).hexdigest()[:8]}"
    if label in result.kinds:  # another seed: the same fit again
        _add(result, label, result.kinds[label][1])
        return
    budget = int(getattr(attack.params, attack.fit_budget))

    def fit(steps: int) -> float:
        short = context.config.create_attack(
            Component(**{**cell.attack.model_dump(exclude_none=True), attack.fit_budget: steps})
        )
        data = FitData(context.info, context.data.public, copy.deepcopy(net), cell.seed or 0, context.device)
        return timed(lambda: short.fit(data))

    memo, stamper = kept
    _add(
        result,
        label,
        memo.seconds(memo.fits, key.digest, stamper.stamps(cell), lambda: extrapolated(fit, budget)),
    )


def _detection_time(context: ExperimentContext, cell: Cell) -> float | None:
    """Seconds of a detection cell beyond its FL training: every defended client judges the honest model
    of each of its rounds and each model-modifying attack's model at each attack round (one judgement
    and each attack's preparation timed on the fresh model; attacks' fits are counted with their
    attack cells)."""
    if _needs_fit(cell):
        return None
    config = context.config
    net, pipeline = context.models.fresh(cell.model, cell.defense, cell.seed)
    ids = [i for i, data in enumerate(context.models.clients) if config.fl.is_defended(i) and len(data)]
    if not ids:
        return 0.0
    local = config.fl_for(cell.defense).local
    client = HonestClient(ids[0], context.models.clients[ids[0]], local, pipeline, context.info,
                          public=context.models.public, seed=cell.seed or 0)  # fmt: skip
    generator = torch.Generator(next(net.parameters()).device).manual_seed(0)
    client.inspect(net, 0, generator)  # the first call's lazy set-up is not the cell's cost
    judge = timed(lambda: client.inspect(net, 0, generator))
    knowledge = ServerKnowledge(context.info, context.data.public)
    modifying = [a for a in map(config.create_attack, config.attacks) if a.threat.modifies_model]
    prepare = sum(timed(lambda a=a: a.prepare_model(net, knowledge)) for a in modifying if not a.fit_scope)
    rounds = len(config.attack.rounds)
    return judge * len(ids) * ((cell.round or 0) + len(modifying) * rounds) + prepare * rounds


def _attack_time(context: ExperimentContext, cell: Cell) -> float | None:
    """Seconds of the attack on every victim at round 0 (at the cell's scale), extrapolated from a short
    budget and its doublings (an attack with a fit budget: its cell with a two-step fit, the fit itself
    apart)."""
    attack = context.config.create_attack(cell.attack)
    if _needs_fit(cell) or (attack.fit_scope is not None and attack.fit_budget is None):
        return None
    if attack.fit_budget is not None:
        short = Component(**{**cell.attack.model_dump(exclude_none=True), attack.fit_budget: 2})
        probe = Cell("attack", cell.model, cell.defense, short, 0, cell.seed, cell.scale)
        with scratch(context):
            run_cell(context, probe)  # the two-step fit and the first forward passes
            return timed(lambda: run_cell(context, probe))
    return probed_attack_time(context, cell)


def print_estimate(runner, *, workers: int = 1, memo: ProbeMemo | None = None) -> GridEstimate:
    """Print the dry run: cells to compute, seconds per kind, the total for ``workers`` workers
    (``memo``: probe times shared with the dry run's other grids)."""
    with memo_for(memo, runner.cache.root, runner.device) as used:
        found = estimate_grid(runner, used)
    print(f"{runner.config.name}: {found.total_cells} cells, {found.todo} to compute in {runner.out}")
    rows = sorted(found.kinds.items())
    width = max((len(label) for label, _ in rows), default=10)
    for label, (count, seconds) in rows:
        print(f"  {label:<{width}}  {count:4d} × {_duration(seconds):>8}")
    if found.training:
        print(f"  {'FL training (all chains)':<{width}}         {_duration(found.training):>8}")
    for entry in found.not_estimated:
        print(f"  not estimated: {entry}")
    total = found.seconds(workers)
    print(f"estimated total: {_duration(total)} with {workers} worker{'s' if workers > 1 else ''}")
    if memo is None and used.kept is not None and (used.kept.probed or used.kept.reused):
        print(used.kept.summary())
    return found


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
