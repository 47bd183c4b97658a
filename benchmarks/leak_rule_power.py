"""Power of the leaderboard's leakage rule, analytic beside Monte Carlo: the table in
docs/leaderboard.md ("The ranking rule, and its power") and the margins of tests/test_leak_rate.py.

For each case of ``leakshield.leaderboard.power.MODELS`` (5 % of victims leak; a seed in three fails;
everything at the no-information level) it prints how often the rule flags a defense — analytically and
through the leaderboard's own path on simulated cells — and how often the rate's interval covers the
true rate, with the leaderboard's interval and with Wald's.

    python benchmarks/leak_rule_power.py --seeds 8 --victims 2 --repetitions 2000
"""

from __future__ import annotations

import argparse

from leakshield.leaderboard.leak_rate import wald_interval
from leakshield.leaderboard.power import MODELS, analytic_flag_rate, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--victims", type=int, default=2)
    parser.add_argument("--repetitions", type=int, default=2000)
    args = parser.parse_args()
    print(f"{args.seeds} seeds × {args.victims} victims, {args.repetitions} simulated leaderboards per case")
    print("| case | flagged (analytic) | flagged (simulated) | interval covers the true rate "
          "| Wald interval: flagged, covers |")  # fmt: skip
    print("|---|---|---|---|---|")
    for i, model in enumerate(MODELS):
        ours = simulate(model, args.seeds, args.victims, args.repetitions, seed=i)
        wald = simulate(model, args.seeds, args.victims, args.repetitions, seed=i, interval=wald_interval)
        analytic = analytic_flag_rate(model, args.seeds, args.victims)
        print(f"| {model.name} | {analytic:.3f} | {ours.flag_rate:.3f} | {ours.coverage:.3f} "
              f"| {wald.flag_rate:.3f}, {wald.coverage:.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
