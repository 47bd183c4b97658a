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
        "the defenses ranked at the strength that fits your budget, membership risk, the DP settings check, "
        "reconstructions beside your images and the commands that reproduce every number.",
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
        "--no-estimate", action="store_true", help="skip the time estimate (its probes: seconds to a minute)"
    )
    p.add_argument("--workers", type=int, default=1, help="parallel single-threaded worker processes")
    p.add_argument("--retry-failed", action="store_true", help="recompute cells stored as failed")
    add_common_options(p)


def cmd_audit(args: argparse.Namespace) -> int:
    from leakshield.errors import LeakshieldError
    from leakshield.model_audit.config import load_audit_config
    from leakshield.model_audit.pdf import find_chromium
    from leakshield.model_audit.run import check_resumable, check_workers, make_plan, print_estimate

    if args.workers < 1:
        raise LeakshieldError(f"--workers {args.workers}: must be at least 1")
    config = load_audit_config(args.config)
    out = args.out or Path("runs") / config.name
    set_threads(args.threads, args.matmul_precision)
    plan = make_plan(config)
    print("\n".join(plan.lines()))
    check_resumable(plan, out)  # an --out of other settings is refused before the probes
    check_workers(plan, args.workers)
    if args.pdf:
        find_chromium()  # so is a missing browser, not after the run
    if not args.no_estimate:
        print_estimate(plan, out, workers=args.workers, device=args.device, cache_dir=args.cache_dir)
    if args.plan:
        return 0
    return run_and_report(plan, out, args)


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
                f"{best.where}: {'SSIM' if best.metric == 'ssim' else best.metric} {best.ssim:.3f}, "
                + ("leaks" if best.measurable else "no measurable leakage")
            )
        )
        print(f"  {finding.threat}: {what}")
    print("report: " + "  ".join(str(p) for p in report.files))
    return 1 if counts["failed"] else 0
