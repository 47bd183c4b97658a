"""``leakshield audit CONFIG``: a user's own model and data, audited per threat model — the plan (which
attacks can work on the model, which are left out and why) and its time estimate first, then the
resumable run, then ``audit.html`` (and ``audit.pdf``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from leakshield.cli_common import add_common_options, set_threads

EXAMPLE = """\
name: my-audit
model: {import: "my_nets:SmallNet", width: 32}   # a class or factory of your own (module:name)
data: {name: imagefolder, root: ./images, size: 16, channels: 1}
federation:
  clients: 4
  local: {algorithm: fedavg, batch_size: 4, local_epochs: 1, local_lr: 0.05}
rounds: 10                       # FL rounds before the accuracy is measured
defenses: [{name: gaussian-noise, sigma: 0.001}]   # what your federation runs now
budget: 0.02                     # accuracy you can give up (0.02: two points)
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "audit",
        help="audit your own model and data: worst leakage per threat model, defenses within your budget",
        description="Audit a federation you describe: your model (a class or factory of your own package or "
        "of the working directory, 'import: module:name'), your data (an image folder, an .npz), your "
        "federation (clients, FedSGD/FedAvg, batch size, local epochs, secure aggregation), the defenses "
        "you run and the accuracy you can give up. leakshield checks the model on one image of the data, "
        "plans the attacks of each threat model whose preconditions hold (each one left out is printed "
        "with the reason), prints the plan with a time estimate, runs it (every cell kept as it finishes: "
        "rerun the same command to resume) and writes OUT/audit.html — per threat model the worst leakage "
        "of your federation with its interval over seeds and the worst attack after each attacked round, "
        "the defenses ranked at the strength that fits your budget, the DP settings check, reconstructions "
        "beside your images and the commands that reproduce every number.",
        epilog="Example config (every field: docs/howto/audit-my-model.md):\n" + EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", type=Path, help="the audit config (YAML)")
    p.add_argument("--out", type=Path, default=None, help="run folder (default: runs/<name>)")
    p.add_argument("--plan", action="store_true", help="print the plan and its time estimate, then stop")
    p.add_argument(
        "--pdf", action="store_true", help="also print the report to OUT/audit.pdf (headless Chromium)"
    )
    p.add_argument(
        "--no-estimate", action="store_true", help="skip the time estimate (its probes take a minute)"
    )
    p.add_argument("--workers", type=int, default=1, help="parallel single-threaded worker processes")
    p.add_argument("--retry-failed", action="store_true", help="recompute cells stored as failed")
    add_common_options(p)


def cmd_audit(args: argparse.Namespace) -> int:
    from leakshield.errors import LeakshieldError
    from leakshield.model_audit.config import load_audit_config
    from leakshield.model_audit.run import make_plan

    if args.workers < 1:
        raise LeakshieldError(f"--workers {args.workers}: must be at least 1")
    config = load_audit_config(args.config)
    out = args.out or Path("runs") / config.name
    set_threads(args.threads, args.matmul_precision)
    plan = make_plan(config)
    print("\n".join(plan.lines()))
    if not args.no_estimate:
        print_audit_estimate(plan, out, args)
    if args.plan:
        return 0
    return run_and_report(plan, out, args)


def print_audit_estimate(plan: Any, out: Path, args: argparse.Namespace) -> float:
    """Print the grid's probed estimate, stage 2's bound and the membership game's probe; the total
    seconds (worker start-up and the data's loading come on top, seconds each)."""
    from leakshield.experiment import ExperimentRunner
    from leakshield.experiment.estimate import print_estimate
    from leakshield.leaderboard.dry_run import stage_two_bound
    from leakshield.model_audit.run import GRID

    runner = ExperimentRunner(
        plan.grid, out / GRID, device=args.device, progress=False, cache_dir=args.cache_dir
    )
    found = print_estimate(runner, workers=args.workers)
    fresh = plan.config.fresh_victims
    reruns, rerun_seconds = stage_two_bound(plan.grid, found.attack_seconds, fresh) if fresh else (0, 0.0)
    total = found.seconds(args.workers) + rerun_seconds / args.workers
    print(
        f"stage 2: at most {reruns} rerun(s) of a row's strongest attack on {fresh} fresh batch(es) per "
        "seed, "
        f"≤ {rerun_seconds / args.workers / 60:.1f} min"
    )
    if plan.membership is not None:
        from leakshield.experiment.world import resolve_device
        from leakshield.membership.grid import estimate_seconds

        seconds = estimate_seconds(plan.membership, device=str(resolve_device(args.device)))
        print(f"membership game: about {seconds / 60:.1f} min (probed on its first seed)")
        total += seconds
    print(f"audit total: about {total / 60:.1f} min with {args.workers} worker(s), before worker start-up")
    return total


def run_and_report(plan: Any, out: Path, args: argparse.Namespace) -> int:
    """Run ``plan`` into ``out`` and write its report; 1 when a cell failed."""
    from leakshield.model_audit.api import run_audit

    report = run_audit(
        plan,
        out,
        pdf=args.pdf,
        workers=args.workers,
        device=args.device,
        progress=not args.quiet,
        cache_dir=args.cache_dir,
        retry_failed=args.retry_failed,
    )
    counts = report.counts
    print(
        f"audit: {counts['computed']} cells computed, {counts['stored']} already stored, {counts['failed']} "
        f"failed; {counts['reruns']} stage-2 rerun(s)"
    )
    for finding in report.findings:
        best = finding.own.strongest
        what = (
            "no attack succeeded"
            if best is None
            else (
                f"{best.where}: SSIM {best.ssim:.3f}, "
                + ("leaks" if best.measurable else "no measurable leakage")
            )
        )
        print(f"  {finding.threat}: {what}")
    print("report: " + "  ".join(str(p) for p in report.files))
    return 1 if counts["failed"] else 0
