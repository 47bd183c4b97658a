"""``leakshield dp-audit``: canary clients in a cross-device DP-FedAvg run, and the ε they show beside the
accountant's; ``leakshield check-dp``: the DP settings of a Flower app, an experiment config or a
cross-device federation, one line per finding, exit status 1 on an error."""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any

import pydantic

from leakshield.cli_common import add_common_options, positive_int, set_threads
from leakshield.cli_crossdevice import (
    _finite,
    add_federation_options,
    data_identity,
    per_seed,
    population_from,
    settings_from,
)
from leakshield.errors import ConfigError
from leakshield.registry import format_validation_error


def _epsilon(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: an ε > 0 (inf for none)")
    return value


def add_parser(sub: Any) -> None:
    """Register ``dp-audit`` and ``check-dp``."""
    p = sub.add_parser(
        "dp-audit",
        help="does the federation's DP do what it says? canary clients, an ε estimate and a lower bound",
        description="Runs a cross-device federation (the options of `leakshield cross-device`; Poisson "
        "sampling, --dp central or none) with --canaries canary clients, each a random direction scaled to "
        "the clip bound and inserted by a fair coin. From the cosines of what the federation released with "
        "the inserted and the held-out canaries it reports, for each round, the final model and every round "
        "together: Andrew et al.'s (ICLR 2024) one-shot ε estimate with a bootstrap interval, and Steinke et "
        "al.'s (NeurIPS 2023) one-run ε lower bound, beside the accountant's ε. The verdict holds the "
        "claimed ε (--claimed-epsilon; default the accountant's) against the lower bound: 'refuted' means "
        "the run is not DP at that ε, at the stated confidence. Exit status 1 when refuted.",
        epilog="Example: leakshield dp-audit --rounds 50 --sample-rate 0.1 --noise-multiplier 3 "
        "--out runs/audit  (about 10 s on 2 CPU cores; writes audit.html and one JSON per seed). "
        "The how-to: docs/howto/check-my-dp.md.",
    )
    add_federation_options(p)
    p.add_argument(
        "--canaries",
        type=positive_int,
        default=1000,
        help="canary clients, half inserted by coin (default 1000): more raise the lower bound's "
        "ceiling (3.86 at 1000 and 95 %%; about ln(canaries/20) while canaries·δ is small)",
    )
    p.add_argument(
        "--claimed-epsilon",
        type=_epsilon,
        default=None,
        help="the ε the deployment states (default: the accountant's for these settings)",
    )
    p.add_argument("--confidence", type=float, default=0.95,
                   help="of the verdict, over all seeds (0.95): with --seeds N each seed's bounds run at "
                   "(1 − confidence)/N")  # fmt: skip
    p.add_argument("--resamples", type=positive_int, default=1000, help="bootstrap draws (default 1000)")
    p.add_argument("--seeds", type=positive_int, default=1, help="seeds 0..N-1 (default 1)")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write audit.html and each seed's audit as JSON here; a rerun skips seeds kept",
    )
    p.add_argument("--json", action="store_true", help="print the audits as JSON")
    add_common_options(p)

    c = sub.add_parser(
        "check-dp",
        help="check DP settings: a Flower app, an experiment config, or the cross-device options given",
        description="Reads DP settings and prints one line per finding (error, warning, info) with its fix: "
        "noise calibrated to a sensitivity other than the clipping bound, no clipping, no noise where DP is "
        "set, ε per round reported as the run's, the accounting unit and adjacency, the sampling the "
        "accountant assumes. TARGET: a Flower app folder (its pyproject.toml), or an experiment YAML; "
        "without TARGET, the cross-device federation described by the options (as `leakshield "
        "cross-device`). Exit status 1 if any finding is an error.",
        epilog="Examples: leakshield check-dp path/to/flower-app ; leakshield check-dp config.yaml ; "
        "leakshield check-dp --noise-multiplier 1 --rounds 300 --claimed-epsilon 2",
    )
    c.add_argument(
        "target",
        nargs="?",
        type=Path,
        default=None,
        help="a Flower app folder (or its pyproject.toml) or an experiment YAML; the federation options "
        "below apply only without it",
    )
    add_federation_options(c)
    c.add_argument("--claimed-epsilon", type=_epsilon, default=None, help="the ε the deployment states")


def _audit_settings(args: argparse.Namespace) -> Any:
    from leakshield.dpaudit.audit import AuditSettings

    # with several seeds each runs at (1 − confidence)/seeds, so that "any seed refuted" (the exit status)
    # keeps the stated confidence (Bonferroni)
    confidence = 1 - (1 - args.confidence) / args.seeds
    try:
        return AuditSettings(canaries=args.canaries, confidence=confidence, resamples=args.resamples)
    except pydantic.ValidationError as exc:
        raise ConfigError(f"dp-audit: {format_validation_error(exc)}") from None


def _line(r: dict[str, Any]) -> str:
    e, b = r["estimate"], r["lower_bound"]
    acc = "∞" if math.isinf(r["accountant"]) else f"{r['accountant']:.3g}"
    return (
        f"  {r['observer']:<12} accountant {acc:>7}   estimate {e['epsilon']:.3g} [{e['low']:.3g}, "
        f"{e['high']:.3g}]   lower bound {b['epsilon']:.3g} ({b['correct']}/{b['guesses']} right)"
    )


def cmd_dp_audit(args: argparse.Namespace) -> int:
    """Audit each seed (kept seeds are read back), write the report, print the verdicts; exit 1 when a
    seed refutes the claim."""
    from tqdm import tqdm

    from leakshield.crossdevice.federation import check_canaries
    from leakshield.dpaudit.audit import audit_federation
    from leakshield.dpaudit.report import audit_page
    from leakshield.experiment.world import resolve_device

    set_threads(args.threads, args.matmul_precision)
    device = str(resolve_device(args.device))
    settings, audit = settings_from(args), _audit_settings(args)
    check_canaries(settings)  # before the population is built
    population = population_from(args)
    from leakshield.dpaudit import code_stamp

    config = {
        **data_identity(args, population),
        "audit_code": code_stamp(),
        "settings": settings.model_dump(mode="json"),
        "audit": audit.model_dump(),
        "claimed": args.claimed_epsilon,
    }

    def run(seed: int) -> dict[str, Any]:
        bar = tqdm(total=settings.rounds, desc=f"seed {seed}", disable=args.quiet, leave=False)
        a = audit_federation(population, settings, seed, audit=audit, claimed_epsilon=args.claimed_epsilon,
                             progress=lambda _r: bar.update(1), device=device)  # fmt: skip
        bar.close()
        return a.to_dict()

    kept = per_seed(args.out, args.seeds, config, "audit", run)
    audits = [_from_dict(a) for a in kept]
    command = "leakshield " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["dp-audit"] else ""
    if args.out is not None:
        (args.out / "audit.html").write_text(audit_page(audits, command))
    if args.json:
        print(json.dumps(_finite({"config": config, "audits": kept}), indent=1))
    else:
        for seed, a in enumerate(kept):
            print(f"seed {seed}: {a['verdict']}: {a['reason']}; accuracy {a['accuracy']:.3f}")
            for r in [a["final"], a["all_rounds"]]:
                print(_line(r))
        if args.out is not None:
            print(f"report: {args.out / 'audit.html'}")
    return 1 if any(a.verdict == "refuted" for a in audits) else 0


def _from_dict(d: dict[str, Any]) -> Any:
    """A kept audit (JSON) back as a :class:`DPAudit`."""
    from leakshield.dpaudit.audit import DPAudit, Reading
    from leakshield.dpaudit.estimate import Estimate
    from leakshield.dpaudit.lower_bound import LowerBound

    def reading(r: dict[str, Any]) -> Reading:
        return Reading(
            r["observer"], Estimate(**r["estimate"]), LowerBound(**r["lower_bound"]), r["accountant"]
        )

    fields = {k: v for k, v in d.items() if k not in ("final", "all_rounds", "rounds")}
    return DPAudit(
        final=reading(d["final"]),
        all_rounds=reading(d["all_rounds"]),
        rounds=[reading(r) for r in d["rounds"]],
        **fields,
    )


def cmd_check_dp(args: argparse.Namespace) -> int:
    """Print the findings for the target (or the federation options); exit 1 on an error."""
    from leakshield.dpaudit.checker import check_cross_device, check_experiment
    from leakshield.dpaudit.findings import has_errors
    from leakshield.dpaudit.flower_check import check_flower_app

    target: Path | None = args.target
    if target is not None and args.claimed_epsilon is not None:
        raise ConfigError("check-dp: --claimed-epsilon is checked against the cross-device options; with a "
                          "TARGET the settings are read from it (drop one of the two)")  # fmt: skip
    if target is None:
        settings = settings_from(args)
        clients = 301 if args.data == "text" else (150 if args.clients is None else args.clients)
        findings = check_cross_device(settings, clients, args.claimed_epsilon)
    elif target.name == "pyproject.toml" or target.is_dir():
        target = target.parent if target.name == "pyproject.toml" else target
        findings = check_flower_app(target.resolve())
    elif target.is_file():
        from leakshield.experiment.config import load_config

        findings = check_experiment(load_config(target))
    else:
        raise ConfigError(
            f"check-dp: {target}: no such file or folder (a Flower app folder or an experiment YAML)"
        )
    for f in findings:
        print(f.line())
    errors = sum(f.level == "error" for f in findings)
    print(f"{errors} error(s), {sum(f.level == 'warning' for f in findings)} warning(s)")
    return 1 if has_errors(findings) else 0
