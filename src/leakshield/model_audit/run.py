"""Running an audit: load the user's data, check their model, plan the battery, print the plan and its
time estimate, then run the grid and stage 2 into one run folder — every cell stored as it finishes,
so a killed audit rerun with the same command computes only what is missing."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leakshield.data import load_dataset, partition_indices
from leakshield.data.types import DatasetSplits
from leakshield.errors import ConfigError, RunDirectoryError
from leakshield.experiment import ExperimentRunner
from leakshield.experiment.compatibility import check_attacks_fit_models, check_defenses_fit_clients
from leakshield.experiment.config import ExperimentConfig
from leakshield.experiment.rundir import STORE_FILE, check_run_dir
from leakshield.experiment.store import CellRecord, ResultStore
from leakshield.leaderboard.stage_two import (
    FOLDER,
    chosen_cells,
    load_stage_two,
    rerun_config,
    run_reruns,
    write_index,
)
from leakshield.leaderboard.tables import ranked_records
from leakshield.matmul_precision import ENV as MATMUL_ENV
from leakshield.membership.config import MembershipConfig
from leakshield.model_audit.config import AuditConfig
from leakshield.model_audit.facts import ModelFacts, build_checked, inspect_model
from leakshield.model_audit.membership_risk import membership_config
from leakshield.model_audit.plan import (
    PlannedAttack,
    defense_reason,
    defense_rows,
    experiment_config,
    leaderboard_document,
    plan_attacks,
    plan_lines,
)

#: the audit config as run, in its folder (what ``leakshield audit`` reruns)
CONFIG_FILE = "audit.yaml"
#: where the Python API writes data given as arrays, inside the audit's folder
DATA = "data"
#: the grid's run directory inside the audit's folder (stage 2 under its ``fresh-<N>/stage2``)
GRID = "grid"


def check_audit_folder(out: Path) -> None:
    """Refuse an ``out`` that holds something else than an audit (touching nothing)."""
    if out.exists() and not out.is_dir():
        raise RunDirectoryError(f"{out} is a file, not an audit's folder; choose another --out")
    others = [p for p in out.iterdir() if p.name != DATA] if out.is_dir() else []
    if others and not (out / CONFIG_FILE).is_file():
        raise RunDirectoryError(
            f"{out} exists, is not empty and holds no {CONFIG_FILE}: not an audit's folder; "
            "choose another --out"
        )


@dataclass(frozen=True)
class AuditPlan:
    """An audit ready to run: its config, the model's facts, the battery (left-out attacks with their
    reasons) and the grid."""

    config: AuditConfig
    facts: ModelFacts
    attacks: list[PlannedAttack]
    grid: ExperimentConfig
    #: the membership game (None: left out)
    membership: MembershipConfig | None = None
    #: (label, reason) of each candidate defense that cannot work on the model
    left_out: list[tuple[str, str]] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The plan as printed before any work."""
        grid = self.grid
        rows = [d.display for d in grid.defenses]
        fl = grid.fl
        local = fl.local
        steps = "one gradient" if local.algorithm == "fedsgd" else f"{local.local_epochs} local epoch(s)"
        return [
            *self.facts.lines(),
            f"federation: {fl.clients} clients, {local.algorithm} ({steps} on batches of "
            f"{local.batch_size}), "
            f"secure aggregation {'on' if fl.secure_aggregation else 'off'}; accuracy after "
            f"{self.config.rounds} rounds; victims attacked after rounds {grid.attack.rounds}",
            f"defense rows ({len(rows)}): {', '.join(rows)}",
            f"seeds {list(grid.seeds)}: {grid.victims.count} batch(es) per seed choose each row's strongest "
            f"attack, {self.config.fresh_victims} fresh batch(es) per seed measure it; budget "
            f"{self.config.budget_points:g} accuracy points",
            *(f"candidate left out: {label}: {reason}" for label, reason in self.left_out),
            *plan_lines(self.attacks),
            "membership: "
            + (
                f"the game on {self.membership.clients} clients of {self.membership.records_per_client} "
                f"records (half members), rows {[r.label for r in self.membership.rows]}"
                if self.membership is not None
                else "left out (membership.run: false)"
            ),
        ]


def load_data(config: AuditConfig) -> DatasetSplits:
    """The audit's data (one line when it cannot be read)."""
    ds = config.data
    root = Path(ds.root).expanduser() if ds.root else None
    return load_dataset(ds.name, ds.params, root=root)


def make_plan(config: AuditConfig) -> AuditPlan:
    """Check the model on the data and plan the battery (nothing computed yet but one forward pass)."""
    data = load_data(config)
    facts = inspect_model(config.model, data)
    fl = config.federation
    parts = partition_indices(data.train.y, fl.clients, fl.partition, 0)
    clients = [data.train.subset(p) for p in parts]
    needed = (config.victims + config.fresh_victims) * fl.local.batch_size
    if len(clients[0]) < needed:
        raise ConfigError(
            f"victims: client 0 holds {len(clients[0])} training images; the audit attacks "
            f"{config.victims} + {config.fresh_victims} (fresh_victims) batches of "
            f"{fl.local.batch_size} = {needed} per seed: fewer victims, or fewer clients"
        )
    document = leaderboard_document()
    model = build_checked(config.model, data)
    for i, setting in enumerate(config.defenses):
        reason = defense_reason(setting, model, facts)
        if reason is not None:
            raise ConfigError(f"defenses[{i}] ({setting.display}): {reason}")
    rows, left_out = defense_rows(config, document, model, facts)
    attacks = plan_attacks(config, facts, model, data, clients, rows, document)
    grid = experiment_config(config, attacks, rows)
    grid.check_data(data.info.shape, data.info.num_classes)
    check_attacks_fit_models(grid, data.info)
    check_defenses_fit_clients(grid, clients)
    return AuditPlan(config, facts, attacks, grid, membership_config(config, len(data.train)), left_out)


def check_workers(plan: AuditPlan, workers: int) -> None:
    """Refuse worker processes for a model they cannot import (one handed over in this process)."""
    if workers > 1 and plan.config.model.name.startswith("local:"):
        raise ConfigError(
            f"workers {workers}: the model {plan.config.model.display} was defined in __main__ (a script, a "
            "notebook) or inside a function, which worker processes cannot import; put it in a module and "
            "pass it from there, or use one worker"
        )


def run_plan(
    plan: AuditPlan,
    out: Path,
    *,
    workers: int = 1,
    device: str = "auto",
    progress: bool = True,
    cache_dir: str | Path | None = None,
    retry_failed: bool = False,
) -> dict[str, Any]:
    """Run the grid, then each row's chosen cell on fresh victims per seed (stage 2); returns the
    counts ``{computed, stored, failed, reruns}``."""
    check_workers(plan, workers)
    grid_dir = out / GRID
    runner = ExperimentRunner(plan.grid, grid_dir, device=device, progress=progress, cache_dir=cache_dir)
    summary = runner.run(workers=workers, retry_failed=retry_failed)
    counts = {"computed": summary.computed, "stored": summary.skipped, "failed": summary.failed, "reruns": 0}
    records = ResultStore(grid_dir / STORE_FILE).records()
    reruns = (
        chosen_cells(records, [], {None: plan.grid}, plan.config.fresh_victims)
        if plan.config.fresh_victims
        else []
    )
    second = stage_dir(out, plan.config)
    write_index(second, reruns)
    cache = None if cache_dir is None else str(cache_dir)
    precision = os.environ.get(MATMUL_ENV)  # the choice made, if any (workers inherit it too)
    jobs = [
        (
            json.dumps(rerun_config(plan.grid, r).model_dump(mode="json")),
            str(second / FOLDER / r.name),
            device,
            cache,
            precision,
            retry_failed,
        )
        for r in reruns
    ]
    results, _ = run_reruns(jobs, workers, progress=progress)
    for computed, stored, failed in results:
        counts["computed"] += computed
        counts["stored"] += stored
        counts["failed"] += failed
    counts["reruns"] = len(reruns)
    return counts


def stage_dir(out: Path, config: AuditConfig) -> Path:
    """Where stage 2 runs: one folder per count of fresh victims (another count, other reruns)."""
    return out / GRID / f"fresh-{config.fresh_victims}"


def check_resumable(plan: AuditPlan, out: Path) -> None:
    """Refuse, before anything is written, an ``out`` that holds something else, or an audit of other
    settings (whose cells would not be this one's)."""
    check_audit_folder(out)
    if (out / GRID / "config.json").is_file():
        try:
            check_run_dir(plan.grid, out / GRID)
        except RunDirectoryError:
            raise RunDirectoryError(
                f"{out} holds an audit of other settings (its {CONFIG_FILE} says which); "
                "choose another folder, or delete it to start over"
            ) from None


def audit_records(out: Path, config: AuditConfig) -> list[CellRecord]:
    """The cells an audit's report reads: the grid's and stage 2's."""
    records = ResultStore(out / GRID / STORE_FILE).records()
    second = [r for _, cells in load_stage_two(stage_dir(out, config)) for r in cells]
    return ranked_records(records, second)


def print_estimate(
    plan: AuditPlan, out: Path, *, workers: int = 1, device: str = "auto", cache_dir: str | Path | None = None
) -> float:
    """Print the grid's probed estimate, stage 2's bound and the membership game's probe; the total
    seconds (worker start-up and the data's loading come on top, seconds each)."""
    from leakshield.experiment.estimate import print_estimate as print_grid_estimate
    from leakshield.experiment.world import resolve_device
    from leakshield.leaderboard.dry_run import stage_two_bound
    from leakshield.membership.grid import estimate_seconds

    runner = ExperimentRunner(plan.grid, out / GRID, device=device, progress=False, cache_dir=cache_dir)
    found = print_grid_estimate(runner, workers=workers)
    fresh = plan.config.fresh_victims
    reruns, rerun_seconds = stage_two_bound(plan.grid, found.attack_seconds, fresh) if fresh else (0, 0.0)
    total = found.seconds(workers) + rerun_seconds / workers
    print(
        f"stage 2: at most {reruns} rerun(s) of a row's strongest attack on {fresh} fresh batch(es) per "
        f"seed, ≤ {rerun_seconds / workers / 60:.1f} min"
    )
    if plan.membership is not None:
        seconds = estimate_seconds(plan.membership, device=str(resolve_device(device)))
        print(f"membership game: about {seconds / 60:.1f} min (probed on its first seed)")
        total += seconds
    print(f"audit total: about {total / 60:.1f} min with {workers} worker(s), before worker start-up")
    return total
