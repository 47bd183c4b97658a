"""Leakage to an honest-but-curious server against ε: client-level DP (DP-FedAvg, local and central)
beside record-level DP-SGD, on one plot.

Setting: digits at 32×32×3, untrained tanh LeNet, each victim a FedSGD batch of one image of a client
holding 60 (victims 0 and 7), clipping bound 1 for all three. The strongest of IG and the adaptive
``noise-aware`` attack (cosine against DP-FedAvg, the Gaussian likelihood against DP-SGD), ``--iterations``
signed-Adam steps, labels known; the mean SSIM over ``--seeds`` seeds with a 95 % t-interval.

The ε on the x-axis is what the observed release spends (PRV accountant, δ 1e-5): client-level for
DP-FedAvg (one release of the client, no subsampling: the server knows who it sampled), record-level for
DP-SGD (one step at sampling rate 1/60). With a batch of one, local DP-FedAvg and DP-SGD add the same
noise to the same clipped gradient: their leakage is the same, their ε differ by the unit protected and
the sampling. Central DP-FedAvg noises the aggregate after the server has seen each clipped update, so
its leakage to the server does not move with ε.

    python benchmarks/dp_leakage.py --seeds 3 --iterations 500 --out docs/dp_leakage.png
"""

from __future__ import annotations

import argparse
import json

from leakshield.data import load_dataset
from leakshield.defenses.dp_fedavg import client_level_epsilon
from leakshield.experiment.probe import probe_attack
from leakshield.leaderboard.intervals import estimate

TANH_LENET = {"activation": "tanh", "init_range": None}
POOL = 60
SIGMAS = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
SERIES = {
    "DP-FedAvg local (client-level ε)": ("dp-fedavg", {"mode": "local", "clip": 1.0}, 1.0, SIGMAS),
    "DP-FedAvg central (client-level ε)": ("dp-fedavg", {"mode": "central", "clip": 1.0}, 1.0, (0.1, 1.0)),
    "DP-SGD (record-level ε)": ("dp-sgd", {"clip": 1.0}, 1 / POOL, SIGMAS),
}


def measure(seeds: int, iterations: int) -> list[dict]:
    digits = load_dataset("digits", {"channels": 3, "size": 32})
    rows = []
    for label, (name, params, rate, sigmas) in SERIES.items():
        for sigma in sigmas:
            entries = [(name, {**params, "noise_multiplier": sigma})]
            per_seed = []
            for seed in range(seeds):
                best = max(
                    probe_attack(digits, entries, attack, {"iterations": iterations}, model_params=TANH_LENET,
                                 pool=POOL, seed=seed).ssim
                    for attack in ("ig", "noise-aware")
                )  # fmt: skip
                per_seed.append(best)
            e = estimate(per_seed)
            eps = client_level_epsilon(sigma, rate, 1, 1e-5)
            rows.append({"series": label, "sigma": sigma, "epsilon": eps, "ssim": per_seed,
                         "mean": e.mean, "half_width": e.half_width})  # fmt: skip
            print(f"{label:38s} σ {sigma:<5} ε {eps:10.3f}  SSIM {e.mean:.3f} ± {e.half_width or 0:.3f} "
                  f"(n={e.n})", flush=True)  # fmt: skip
    return rows


def plot(rows: list[dict], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    markers = {"DP-FedAvg local": "o", "DP-FedAvg central": "s", "DP-SGD": "^"}
    for label in SERIES:
        points = sorted((r for r in rows if r["series"] == label), key=lambda r: r["epsilon"])
        marker = next(m for prefix, m in markers.items() if label.startswith(prefix))
        xs, ys = [r["epsilon"] for r in points], [r["mean"] for r in points]
        errors = [r["half_width"] or 0 for r in points]
        ax.errorbar(xs, ys, yerr=errors, marker=marker, capsize=3, label=label)
        below = label.startswith("DP-SGD")  # its points sit near the local series': label them underneath
        colour = ax.lines[-1].get_color()
        for r in points:
            ax.annotate(f"σ {r['sigma']:g}", (r["epsilon"], r["mean"]), textcoords="offset points",
                        xytext=(4, -11 if below else 5), fontsize=7, color=colour)  # fmt: skip
    ax.axhline(0.6, color="grey", linestyle=":", linewidth=1)
    ax.text(0.02, 0.62, "SSIM 0.6: leaked", fontsize=7, color="grey", transform=ax.get_yaxis_transform())
    ax.set_xscale("log")
    ax.set_xlabel("ε of the observed release (δ = 1e-5; PRV accountant, its RDP bound above 100)")
    ax.set_ylabel("SSIM of the strongest attack (95 % CI)")
    ax.set_title("Leakage to the server against ε: client-level vs record-level DP", fontsize=10)
    ax.legend(fontsize=8, loc="center left")
    fig.tight_layout()
    fig.savefig(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--out", default="dp_leakage.png", help="the plot (PNG)")
    parser.add_argument("--json", help="write the raw numbers here")
    parser.add_argument("--from-json", help="redraw the plot from a --json file instead of measuring")
    args = parser.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            plot(json.load(f), args.out)
        return
    rows = measure(args.seeds, args.iterations)
    plot(rows, args.out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
