"""The leaderboard's stage 2: each row's chosen cell rerun on fresh victims.

Stage 1 (the preset's grids) chooses, per threat table and row, the strongest (attack, round, scale) cell
(:func:`.ranking.strongest`). Stage 2 reruns only that cell, on the same seeds, with
``stage2.victims`` (default 16) new victims per seed: the victim draw follows the seed
(``victims.per_seed``) and skips the batches stage 1 used (``victims.offset``), so the stage-2 victims of
a seed are disjoint from its selection victims and, across seeds, mostly other images. Each rerun is a
grid of its own (:func:`rerun_config`: the source grid's config cut to that model, defense, attack,
round and scale, no utility) stored under ``<run>/stage2/<name>``; its cells are tagged ``stage`` 2 when
loaded, and the export keeps them beside stage 1's (``stage2`` in the JSON). A participant's attack (the
GAN attack of a malicious client), whose victims are classes, is not rerun.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from leakshield.errors import ConfigError
from leakshield.experiment.config import ExperimentConfig, parse_config
from leakshield.experiment.store import CellRecord, atomic_write_bytes
from leakshield.leaderboard.export import STAGE_TWO_PREFIX as PREFIX
from leakshield.leaderboard.export import Scenario
from leakshield.leaderboard.rerun import Rerun

#: the folder of a run that holds the stage-2 grids, and the file that lists them
FOLDER = "stage2"
INDEX = "index.json"
#: fresh victims per seed unless a preset's ``stage2.victims`` says otherwise
VICTIMS = 16


def stage_two_victims(document: dict[str, Any], preset: str) -> int:
    """``presets.<preset>.stage2.victims`` (default :data:`VICTIMS`; 0 turns stage 2 off)."""
    chosen = ((document.get("presets") or {}).get(preset) or {}).get("stage2") or {}
    if not isinstance(chosen, dict) or not isinstance(chosen.get("victims", VICTIMS), int):
        raise ConfigError(f"presets.{preset}.stage2: expected {{victims: N}} (fresh victims per seed; "
                          "0: none)")  # fmt: skip
    count = int(chosen.get("victims", VICTIMS))
    if count < 0:
        raise ConfigError(f"presets.{preset}.stage2.victims: {count}; give 0 or more")
    return count


def chosen_cells(
    records: Sequence[CellRecord], scenarios: Sequence[Scenario], configs: dict[str | None, ExperimentConfig],
    victims: int,
) -> list[Rerun]:  # fmt: skip
    """Every row's stage-1 choice in every threat table of the main grid's ``records`` and the ranked
    ``scenarios`` (participants' attacks left out), with the grid each came from (``configs``: source →
    its config, for the offset: the victims stage 1 drew)."""
    from leakshield.leaderboard.ranking import standings, threats
    from leakshield.leaderboard.tables import ranked_records
    from leakshield.leaderboard.threats import MALICIOUS_CLIENT

    ranked = [s for s in scenarios if s.ranked and not s.name.startswith(PREFIX)]
    everything = ranked_records(records, [r for s in ranked for r in s.records])
    sources: list[tuple[str | None, Sequence[CellRecord]]] = [(None, records)]
    sources += [(s.name, s.records) for s in ranked]
    found: dict[Rerun, None] = {}
    for threat in threats(everything):
        if threat.startswith(MALICIOUS_CLIENT):
            continue
        for row in standings(everything, threat):
            best = row.strongest
            if best is None or best.metric != "ssim":
                continue
            place = (row.model, row.defense, best.attack, best.round, best.scale)
            source = next((name for name, held in sources if any(
                r.kind == "attack" and r.status == "ok" and (r.model, r.defense, r.attack, r.round or 0,
                r.scale or "") == place for r in held)), None)  # fmt: skip
            config = configs.get(source)
            if config is None:
                continue
            found[Rerun(source, *place, victims, config.victims.offset + config.victims.count)] = None
    return list(found)


def rerun_config(config: ExperimentConfig, rerun: Rerun) -> ExperimentConfig:
    """``config`` (the source grid's) cut to the rerun's model, defense, attack, round and scale, without
    utility, with ``rerun.victims`` victims per seed drawn per seed after stage 1's batches."""
    data = config.model_dump(mode="json")
    models = [m for m in data["models"] if (m.get("label") or m["name"]) == rerun.model]
    defenses = [d for d in config.defenses if d.display == rerun.defense]
    attacks = [a for a in data["attacks"] if (a.get("label") or a["name"]) == rerun.attack]
    if not models or not defenses or not attacks:
        where = f"{rerun.model} · {rerun.defense} · {rerun.attack}"
        raise ConfigError(f"stage 2: {where} is not in the grid {rerun.source or 'main'} (was the "
                          "leaderboard file edited since stage 1?)")  # fmt: skip
    if not config.victims.per_seed:  # another draw order: offset would not keep stage 1's victims out
        raise ConfigError(
            f"stage 2 of {rerun.source or 'the main grid'}: needs victims.per_seed: true in "
            "its grid (fresh victims are the batches after stage 1's in each seed's draw)"
        )
    data["models"], data["attacks"] = models, [{**attacks[0], "against": [rerun.defense]}]
    data["defenses"] = [next(d for d in data["defenses"] if _display(d) == rerun.defense)]
    data["attack"]["rounds"] = [rerun.round]
    data["utility"] = {**data["utility"], "rounds": 0, "detection": False}
    scale = dict(part.split("=", 1) for part in rerun.scale.split())
    axes = data.get("axes") or {}
    data["axes"] = {name: [int(scale[key])] if key in scale and axes.get(name) else None
                    for name, key in (("batch_size", "batch"), ("clients", "clients"))}  # fmt: skip
    data["victims"] = {**data["victims"], "count": rerun.victims, "per_seed": True, "offset": rerun.offset}
    data["name"] = f"{config.name}-stage2-{rerun.name}"
    data.pop("report", None)
    return parse_config(data, source=f"stage 2 of {rerun.source or 'the main grid'}")


def _display(entry: dict[str, Any]) -> str:
    from leakshield.experiment.config import DefenseSetting

    return DefenseSetting.model_validate(entry).display


def write_index(run_dir: Path, reruns: Sequence[Rerun]) -> None:
    """List the stage-2 grids of ``run_dir`` (what the leaderboard loads)."""
    folder = run_dir / FOLDER
    atomic_write_bytes(folder / INDEX, (json.dumps([r.as_json() for r in reruns], indent=1) + "\n").encode())


def load_stage_two(run_dir: Path) -> list[tuple[Rerun, list[CellRecord]]]:
    """The stored stage-2 grids of ``run_dir`` listed in its index, their cells tagged ``stage`` 2
    (attack and baseline cells: a guard's detection cells are stage 1's)."""
    from leakshield.experiment.rundir import STORE_FILE
    from leakshield.experiment.store import ResultStore

    index = run_dir / FOLDER / INDEX
    if not index.is_file():
        return []
    out = []
    for item in json.loads(index.read_text()):
        rerun = Rerun.from_json(item)
        store = run_dir / FOLDER / rerun.name / STORE_FILE
        if store.is_file():
            records = [dataclasses.replace(r, stage=2) for r in ResultStore(store).records()
                       if r.kind in ("attack", "baseline")]  # fmt: skip
            out.append((rerun, records))
    return out


def as_scenarios(found: Sequence[tuple[Rerun, Sequence[CellRecord]]]) -> list[Scenario]:
    """The stage-2 grids as ranked groups the tables read beside the scenarios."""
    return [Scenario(PREFIX + rerun.name, f"stage 2: {rerun.name}", True, list(records))
            for rerun, records in found]  # fmt: skip


def run_rerun(
    config_json: str, where: str, device: str, cache_dir: str | None, precision: str | None,
    retry_failed: bool = False,
) -> tuple[int, int, int]:  # fmt: skip
    """One stage-2 rerun (a grid of its own, resumable), in this process on its threads (a worker's:
    one); ``precision``: the matmul precision to set (None: leave it); (cells computed, already stored,
    failed)."""
    from leakshield.experiment import ExperimentRunner
    from leakshield.matmul_precision import set_matmul_precision

    if precision is not None:
        set_matmul_precision(precision)
    config = parse_config(json.loads(config_json), source="stage 2")
    done = ExperimentRunner(config, where, device=device, progress=False, cache_dir=cache_dir).run(
        retry_failed=retry_failed
    )
    return done.computed, done.skipped, done.failed


def run_reruns(
    jobs: Sequence[tuple], workers: int, *, progress: bool = True,
    keep_going: Callable[[], bool] | None = None, task: Callable[..., tuple[int, int, int]] | None = None,
) -> tuple[list[tuple[int, int, int]], bool]:  # fmt: skip
    """Each rerun of ``jobs`` (``task``'s arguments, :func:`run_rerun` by default): in this process, or with
    ``workers`` > 1 that many at a time in single-threaded processes that stay up between reruns (Ctrl-C,
    or a rerun that raised, stops them at once). ``keep_going``: asked before each rerun starts (a
    deadline): with workers, a rerun is handed to a process only when one is free, so a deadline that
    passes leaves the rest unstarted. Returns each finished rerun's counts, and whether some rerun was
    left unstarted."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from multiprocessing import get_context

    from tqdm.auto import tqdm

    from leakshield.experiment.parallel import top_up
    from leakshield.workers import init_single_threaded_worker, stop_workers

    task = task or run_rerun

    def go() -> bool:
        return keep_going is None or keep_going()

    bar = tqdm(total=len(jobs), desc="stage 2", unit="rerun", disable=not progress or not jobs)
    results: list[tuple[int, int, int]] = []
    queue: list[tuple] = list(jobs)
    if workers > 1:
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                                   initializer=init_single_threaded_worker)  # fmt: skip
        try:
            pending: dict = {}

            def start(job: tuple) -> Any:
                return pool.submit(task, *job)

            while True:
                # a free process takes the next rerun unless the deadline passed (the running ones finish)
                top_up(queue, pending, workers, start, go)
                if not pending:
                    break
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    pending.pop(future)
                    results.append(future.result())
                    bar.update(1)
        except BaseException:
            stop_workers(pool)
            bar.close()
            raise
        pool.shutdown()
    else:
        while queue and go():
            results.append(task(*queue.pop(0)))
            bar.update(1)
    bar.close()
    return results, bool(queue)
