"""The leaderboard ranking's error rates and power, side by side with the variants it must beat.

Runs simulated tables (:mod:`leakshield.leaderboard.error_rates`: stage-1 cells, each row's chosen cell
rerun on fresh victims per seed, variance components measured on the standard export) through the real
ranking code, and prints, per case, how often each event happened:

* a null of 20 identical rows: some row shown to leak less than no defense (family-wise error), some
  pair separated (all pairs) — with the rule as shipped on a pool of distinct images and on the
  protocol's 20 (client 0's sensitive samples, which repeat across seeds), with victims fixed across
  seeds (the draw ignores the seed), and without Holm's correction;
* power among 20 rows: a row hiding half of the victims against no defense, DP-SGD (every victim hidden)
  against no defense, DP-SGD against Soteria (a quarter hidden) in the letters;
* the positive control (:mod:`leakshield.leaderboard.controls`, one no-defense row per table): how often
  it passes when the attack only reconstructs each victim's own guess (references near 0.65, so guesses
  cross SSIM 0.6 and only the test over seeds can refuse them), and when the attack leaks at levels
  from weak (0.45) to the standard export's (0.75).

    python benchmarks/ranking_error_rates.py --tables 1000
"""

from __future__ import annotations

import argparse
import functools
import time

from leakshield.leaderboard import comparisons, error_rates, ordering


def _unadjusted_rank(rows: list) -> list:
    """The ordering with each test at α alone (Holm's correction dropped)."""
    holm = comparisons.holm
    comparisons.holm = lambda p_values, alpha: [p <= alpha for p in p_values]
    try:
        return ordering.rank(rows)
    finally:
        comparisons.holm = holm


def _less(name: str):
    def happened(table) -> bool:  # a table whose positive control fails compares nothing
        found = next(s for s in table.standings if s.defense == name).versus_none
        return found is not None and found.less

    return happened


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=300, help="simulated tables per case (default 300)")
    args = parser.parse_args()
    null = {"vs none": error_rates.false_versus_none, "all pairs": error_rates.false_pairs}
    large = {"pool": 400}  # distinct images, as the rule assumes
    variants = {
        "as shipped, 400-image pool": large,
        "as shipped, the protocol's 20": {},
        "victims fixed across seeds": {**large, "draw": lambda victim_seed, cell_seed: victim_seed},
        "no multiplicity correction": {**large, "rank": _unadjusted_rank},
    }
    print(f"{args.tables} tables per case (8 seeds, 2 selection + 16 fresh victims, 5 attacks per row)")
    print("\nnull: 20 identical rows           false 'less than none'   some pair separated")
    for name, options in variants.items():
        start = time.perf_counter()
        rates = error_rates.measure(error_rates.null_rows(20), null, args.tables, seed=1, **options)
        print(f"  {name:<32} {rates.rate('vs none'):>10.3f} {rates.rate('all pairs'):>22.3f}"
              f"   ({time.perf_counter() - start:.0f} s)")  # fmt: skip
    rows = [error_rates.Row("none"), error_rates.Row("half", protection=0.5),
            error_rates.Row("dp-sgd", protection=1.0), error_rates.Row("soteria", protection=0.25),
            *(error_rates.Row(f"same-{i}") for i in range(16))]  # fmt: skip
    apart = functools.partial(error_rates.separated, a="dp-sgd", b="soteria")
    events = {"half-leak row < none": _less("half"), "DP-SGD < none": _less("dp-sgd"),
              "DP-SGD, Soteria separated": apart}  # fmt: skip
    rates = error_rates.measure(rows, events, args.tables, seed=2, **large)
    print("\npower among 20 rows (none, half, DP-SGD, Soteria, 16 like none; 400-image pool)")
    for name in events:
        print(f"  {name:<32} {rates.rate(name):>10.3f}")
    print("\npositive control: the no-defense row's attack          passes")
    passes = {"pass": error_rates.control_passes}
    cases = {
        "guesses only (null), references ≈ 0.65": ({"protection": 1.0}, {"reference": (0.65, 0.05)}),
        "guesses only (null), references ≈ 0.35": ({"protection": 1.0}, {}),
        "leaks at level 0.45": ({"level": 0.45}, {}),
        "leaks at level 0.60": ({"level": 0.6}, {}),
        "leaks at level 0.75 (standard)": ({}, {}),
    }
    for name, (row, options) in cases.items():
        rates = error_rates.measure([error_rates.Row("none", **row)], passes, args.tables, seed=3,
                                    **large, **options)  # fmt: skip
        print(f"  {name:<44} {rates.rate('pass'):>10.3f}")


if __name__ == "__main__":
    main()
