"""The canary audit's verdicts on four planted deployments, its lower bound's false-alarm and detection
rates, and its estimate's bias — one run, the numbers of docs/dp-audit.md.

    python benchmarks/dp_audit.py --out runs/dp-audit --seeds 5

1. Planted deployments on the cross-device digits federation (150 clients, q 0.1, 30 rounds, 1,000
   canaries), each claiming the ε the accountant gives the correct one: a correct DP-FedAvg (z 3), no
   noise, noise sized to a sensitivity of 1e-4 of the clip (z 3e-4), and a percentile filter called DP.
2. The correct DP-FedAvg at z 0.5–3: the estimate and the lower bound beside the accountant.
3. The lower bound under its null (scores of exactly ε-DP mechanisms: randomized response at ε 1, and
   2-GDP Gaussians) and a planted effect (no privacy); the estimate's bias against a planted 3-GDP pair.

Every audit is stored under OUT/runs (keyed by its settings and the audit's and federation's source
hash) and skipped when rerun; OUT/table.md is written from the stored runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from leakshield.crossdevice.federation import CrossDeviceSettings
from leakshield.crossdevice.population import digit_population
from leakshield.dpaudit import code_stamp
from leakshield.dpaudit.audit import AuditSettings, audit_federation
from leakshield.dpaudit.estimate import gaussian_pair_epsilon, one_shot_estimate
from leakshield.dpaudit.lower_bound import one_run_lower_bound
from leakshield.dpaudit.mislabelled import percentile_filter

AUDIT = AuditSettings(canaries=1000, resamples=500)
CORRECT_Z = 3.0
SWEEP_Z = (0.5, 1.0, 2.0, 3.0)


def settings(z: float, mode: str = "central") -> CrossDeviceSettings:
    return CrossDeviceSettings(
        rounds=30,
        sample_rate=0.1,
        local_lr=0.1,
        width=32,
        local_epochs=2,
        local_batch=5,
        dp={"mode": mode, "noise_multiplier": z, "clip": 0.5},
    )


def cases() -> list[tuple[str, CrossDeviceSettings, bool]]:
    """(case, settings run, whether the percentile filter runs); every case claims the correct one's ε."""
    return [
        ("correct DP-FedAvg (z 3)", settings(CORRECT_Z), False),
        ("no noise", settings(0.0), False),
        ("noise at 1e-4 of the clip", settings(CORRECT_Z * 1e-4), False),
        ("percentile filter called DP", settings(0.0, "none"), True),
    ]


def run(out: Path, name: str, s: CrossDeviceSettings, seed: int, claim: float | None, filtered: bool) -> dict:
    key = {
        "case": name,
        "settings": s.model_dump(mode="json"),
        "seed": seed,
        "claim": claim,
        "filtered": filtered,
        "audit": AUDIT.model_dump(),
        "code": code_stamp(),
    }
    path = (
        out / "runs" / (hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16] + ".json")
    )
    if path.is_file():
        return json.loads(path.read_text())["result"]
    start = time.perf_counter()
    a = audit_federation(
        digit_population(150, 0.5, 0),
        s,
        seed,
        audit=AUDIT,
        claimed_epsilon=claim,
        client_filter=percentile_filter() if filtered else None,
    )
    result = {
        "verdict": a.verdict,
        "claimed": a.claimed_epsilon,
        "accountant": a.accountant_epsilon,
        "accuracy": a.accuracy,
        "seconds": time.perf_counter() - start,
        **{
            f"{k}_{obs}": v
            for obs, r in (("final", a.final), ("all", a.all_rounds))
            for k, v in (
                ("lower", r.lower_bound.epsilon),
                ("estimate", r.estimate.epsilon),
                ("low", r.estimate.low),
                ("high", r.estimate.high),
            )
        },
        "rounds_above": sum(r.lower_bound.epsilon > r.accountant for r in a.rounds),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "key": key,
                "result": {
                    k: str(v) if isinstance(v, float) and math.isinf(v) else v for k, v in result.items()
                },
            }
        )
    )
    return result


def _f(v: float | str) -> float:
    return float(v)


def span(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


def gdp_epsilon(mu: float, delta: float) -> float:
    return float(gaussian_pair_epsilon(mu, 1.0, 0.0, 1.0, delta))


def statistics_rows(rng: np.random.Generator, trials: int) -> list[str]:
    rows = []
    above, bounds = 0, []
    for _ in range(trials):  # randomized response at ε 1: the ε-DP extreme
        coin = rng.random(1000) < 0.5
        flip = rng.random(1000) < 1 / (1 + math.e)
        s = (coin ^ flip) + 1e-9 * rng.random(1000)
        b = one_run_lower_bound(s[coin], s[~coin], 0.0).epsilon
        bounds.append(b)
        above += b > 1.0
    rows.append(
        f"| null: randomized response, ε 1 | {above}/{trials} | "
        f"mean {np.mean(bounds):.2f}, max {max(bounds):.2f} |"
    )
    truth, above, bounds = gdp_epsilon(2.0, 1e-5), 0, []
    for _ in range(trials):
        coin = rng.random(1000) < 0.5
        s = rng.normal(2.0 * coin, 1.0)
        b = one_run_lower_bound(s[coin], s[~coin], 1e-5).epsilon
        bounds.append(b)
        above += b > truth
    rows.append(
        f"| null: 2-GDP Gaussians, ε {truth:.2f} at δ 1e-5 | {above}/{trials} | "
        f"mean {np.mean(bounds):.2f}, max {max(bounds):.2f} |"
    )
    seen = [
        one_run_lower_bound(rng.normal(1, 0.01, 500), rng.normal(0, 0.01, 500), 1e-5).epsilon
        for _ in range(20)
    ]
    rows.append(
        f"| effect: no privacy (perfect separation) | bound > 3.5 in {sum(b > 3.5 for b in seen)}/20 | "
        f"mean {np.mean(seen):.2f} |"
    )
    return rows


def bias_rows(rng: np.random.Generator) -> list[str]:
    rows = []
    for mu in (0.0, 0.5, 3.0):
        truth = gdp_epsilon(mu, 1e-5) if mu > 0 else 0.0
        cells = []
        for m in (500, 2000, 8000):
            est = [
                one_shot_estimate(rng.normal(mu, 1, m), rng.normal(0, 1, m), 1e-5, resamples=200, seed=i)
                for i in range(20)
            ]
            cover = sum(e.low <= truth <= e.high for e in est)
            cells.append(f"{np.mean([e.epsilon for e in est]):.2f} ({cover}/20)")
        rows.append(f"| {mu:g} | {truth:.2f} | " + " | ".join(cells) + " |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("runs/dp-audit"))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--trials", type=int, default=300, help="null draws of the lower bound (default 300)")
    args = p.parse_args()
    torch.set_num_threads(1)
    lines = [
        "## Planted deployments (digits, 150 clients, q 0.1, 30 rounds, 1,000 canaries)",
        "",
        "| deployment | claimed ε | accountant ε as run | verdicts | lower bound, final / all rounds | "
        "estimate, all rounds | accuracy |",
        "|---|---|---|---|---|---|---|",
    ]
    claims = [
        run(args.out, "correct DP-FedAvg (z 3)", settings(CORRECT_Z), s, None, False)["accountant"]
        for s in range(args.seeds)
    ]
    claim = float(claims[0])
    seconds = []
    for name, s, filtered in cases():
        rs = [
            run(args.out, name, s, seed, None if name.startswith("correct") else claim, filtered)
            for seed in range(args.seeds)
        ]
        seconds += [r["seconds"] for r in rs]
        verdicts = ", ".join(
            f"{v} {sum(r['verdict'] == v for r in rs)}"
            for v in ("consistent", "suspect", "refuted")
            if any(r["verdict"] == v for r in rs)
        )
        acc = _f(rs[0]["accountant"])
        lines.append(
            f"| {name} | {claim:.3g} | {'∞' if math.isinf(acc) else f'{acc:.3g}'} | {verdicts} | "
            f"{span([_f(r['lower_final']) for r in rs])} / {span([_f(r['lower_all']) for r in rs])} | "
            f"{span([_f(r['estimate_all']) for r in rs])} | "
            f"{statistics.fmean(r['accuracy'] for r in rs):.3f} |"
        )
    lines += [
        "",
        f"Median [min, max] over seeds 0–{args.seeds - 1}; seconds per audit "
        f"{statistics.fmean(seconds):.1f}.",
        "",
        "## The correct DP-FedAvg at several noise multipliers",
        "",
        "| z | accountant ε | estimate, final model | estimate, all rounds "
        "| est. interval's low end ≤ accountant | lower bound (max) | rounds whose bound exceeds their ε |",
        "|---|---|---|---|---|---|---|",
    ]
    for z in SWEEP_Z:
        rs = [run(args.out, f"sweep z {z}", settings(z), seed, None, False) for seed in range(args.seeds)]
        acc = _f(rs[0]["accountant"])
        ok = sum(max(_f(r["low_final"]), _f(r["low_all"])) <= acc for r in rs)
        lines.append(
            f"| {z:g} | {acc:.3g} | {span([_f(r['estimate_final']) for r in rs])} | "
            f"{span([_f(r['estimate_all']) for r in rs])} | {ok}/{len(rs)} | "
            f"{max(max(_f(r['lower_final']), _f(r['lower_all'])) for r in rs):.2f} | "
            f"{sum(r['rounds_above'] for r in rs)} |"
        )
    rng = np.random.default_rng(0)
    lines += [
        "",
        "## The lower bound: false alarms and detection (1,000 canaries, confidence 0.95)",
        "",
        "| scores | bound above the truth | bounds |",
        "|---|---|---|",
        *statistics_rows(rng, args.trials),
        "",
        "## The estimate's bias: mean over 20 draws (95 % interval covering the truth)",
        "",
        "| μ (GDP) | true ε at δ 1e-5 | 500 per side | 2,000 per side | 8,000 per side |",
        "|---|---|---|---|---|",
        *bias_rows(rng),
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
