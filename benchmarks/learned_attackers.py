"""Attackers that learn against Gaussian noise: the learned inverter (Wu et al., UAI 2023), its output
denoised by a diffusion prior (GUIDE) and diffusion posterior sampling, beside IG and the noise-aware
attack, over the noise's σ.

Setting: digits at 16×16 grey, the leaderboard's untrained tanh LeNet, each victim a FedSGD gradient of
one image of client 0 (labels known), noise N(0, σ²) on every entry of the released update. A seed draws
its own ``--victims`` victims, the noise and the attacks' starts. Every attack is scored by its margin
over its own no-information reference, per victim: IG and the noise-aware attack over the public split's
mean image (the leaderboard's no-information guess); the learned attackers over their placebos (the
same attack on public batches with the victim's labels, through the same defenses; the best match of
them). All are also scored over the public class-mean image of the label (the best guess from the
labels alone). The unit is the seed: per σ, the mean per seed with a 95 % t-interval over seeds, and
the paired SSIM difference of each other attack from the better of IG and the noise-aware attack.
``learned (clean pairs)`` is the ablation: the inverter trained on undefended updates.

    python benchmarks/learned_attackers.py --seeds 3 --json docs/learned_attackers.json \
        --out docs/learned_attackers.png
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from leakshield.attacks import Reconstruction
from leakshield.attacks.learned.attack import class_template
from leakshield.data import load_dataset
from leakshield.experiment.evaluation import score_reconstructions
from leakshield.experiment.probe import probe_attack
from leakshield.experiment.sections import MetricSection
from leakshield.leaderboard.intervals import estimate

TANH_LENET = {"activation": "tanh", "init_range": None}
SIGMAS = (0.01, 0.1, 0.3, 1.0)
ATTACKS = {
    "IG": ("ig", {"iterations": 200}),
    "noise-aware": ("noise-aware", {"iterations": 200}),
    "learned": ("learned-inversion", {}),
    "learned (clean pairs)": ("learned-inversion", {"through_defense": False}),
    "GUIDE (learned)": ("guide", {}),
    "diffusion posterior": ("diffusion-posterior", {}),
}
OPTIMISATION = ("IG", "noise-aware")


def guess_ssim(data, victims: tuple[int, ...], template: bool) -> list[float]:
    """Per victim: SSIM of the public split's mean image (the no-information guess), or of the public
    class mean of its label (``template``: the best guess from the label alone)."""
    batches = [data.train.subset([i]) for i in victims]
    guesses = [
        class_template(data.public, b.y) if template else data.public.x.mean(dim=0, keepdim=True)
        for b in batches
    ]
    scored = score_reconstructions(
        [Reconstruction(images=g) for g in guesses], batches, metrics=MetricSection()
    )
    return [statistics.fmean(v["ssim"]) for v in scored.victims]


def measure(seeds: int, victims: int, sigmas: tuple[float, ...], only: list[str] | None = None) -> list[dict]:
    data = load_dataset("digits", {"channels": 1, "size": 16})
    rows = []
    for sigma in sigmas:
        for seed in range(seeds):
            chosen = tuple(range(seed * victims, (seed + 1) * victims))
            floor, template = guess_ssim(data, chosen, False), guess_ssim(data, chosen, True)
            for label, (name, params) in ATTACKS.items():
                if only and label not in only:
                    continue
                start = time.perf_counter()
                r = probe_attack(
                    data,
                    [("gaussian-noise", {"sigma": sigma})],
                    name,
                    params,
                    model_params=TANH_LENET,
                    victims=chosen,
                    pool=max(60, (seed + 1) * victims),
                    seed=seed,
                )
                reference = r.prior or floor
                rows.append(
                    {
                        "sigma": sigma,
                        "seed": seed,
                        "attack": label,
                        "ssim": r.private,
                        "reference": reference,
                        "template": template,
                        "seconds": time.perf_counter() - start,
                    }
                )
                print(
                    f"σ {sigma:<5g} seed {seed} {label:22s} SSIM {statistics.fmean(r.private):.3f} reference "
                    f"{statistics.fmean(reference):.3f} template {statistics.fmean(template):.3f} "
                    f"({rows[-1]['seconds']:.0f} s)",
                    flush=True,
                )
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per σ and attack, over seeds (the unit): the mean SSIM, its margin over the attack's own
    reference and over the class template, each with a 95 % t-interval, and for every attack but the
    optimisation ones the paired SSIM difference from the better of them in each seed (same victims)."""
    out = []
    for sigma in sorted({r["sigma"] for r in rows}):
        at = [r for r in rows if r["sigma"] == sigma]
        seeds = sorted({r["seed"] for r in at})

        def per_seed(label: str, value, at: list[dict] = at, seeds: list[int] = seeds) -> list[float]:
            return [value(next(r for r in at if r["seed"] == s and r["attack"] == label)) for s in seeds]

        def mean_of(field: str):
            return lambda row: statistics.fmean(row[field])

        def over(field: str):
            return lambda row: statistics.fmean(a - b for a, b in zip(row["ssim"], row[field], strict=True))

        labels = [a for a in ATTACKS if any(r["attack"] == a for r in at)]
        measured = [a for a in OPTIMISATION if a in labels]
        best = [max(pair) for pair in zip(*(per_seed(a, mean_of("ssim")) for a in measured), strict=True)]
        for label in labels:
            ssim = estimate(per_seed(label, mean_of("ssim")))
            margin, above = (
                estimate(per_seed(label, over("reference"))),
                estimate(per_seed(label, over("template"))),
            )
            line = {
                "sigma": sigma,
                "attack": label,
                "seeds": len(seeds),
                "ssim": ssim.mean,
                "ssim_half_width": ssim.half_width,
                "reference": statistics.fmean(per_seed(label, mean_of("reference"))),
                "margin": margin.mean,
                "half_width": margin.half_width,
                "template": above.mean,
                "template_half_width": above.half_width,
            }
            if label not in OPTIMISATION and best:
                d = estimate([a - b for a, b in zip(per_seed(label, mean_of("ssim")), best, strict=True)])
                line.update(paired=d.mean, paired_half_width=d.half_width)
            out.append(line)
    return out


def _pm(mean: float, half: float | None) -> str:
    return f"{mean:+.3f} ± {half:.3f}" if half is not None else f"{mean:+.3f}"


def print_summary(lines: list[dict]) -> None:
    print(
        "\n| σ | attack | SSIM | its reference | SSIM − its reference | SSIM − class template "
        "| SSIM − better of IG / noise-aware |"
    )
    print("|---|---|---|---|---|---|---|")
    for line in lines:
        paired = _pm(line["paired"], line["paired_half_width"]) if "paired" in line else ""
        print(
            f"| {line['sigma']:g} | {line['attack']} | {_pm(line['ssim'], line['ssim_half_width'])[1:]} "
            f"| {line['reference']:.3f} | {_pm(line['margin'], line['half_width'])} "
            f"| {_pm(line['template'], line['template_half_width'])} | {paired} |"
        )


def plot(lines: list[dict], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), dpi=120)
    for label in ATTACKS:
        points = [line for line in lines if line["attack"] == label]
        if not points:
            continue
        sigmas = [p["sigma"] for p in points]
        left.errorbar(
            sigmas,
            [p["margin"] for p in points],
            yerr=[p["half_width"] or 0 for p in points],
            marker="o",
            capsize=3,
            label=label,
        )
        right.errorbar(
            sigmas,
            [p["template"] for p in points],
            yerr=[p["template_half_width"] or 0 for p in points],
            marker="o",
            capsize=3,
            label=label,
        )
    left.set_ylabel("SSIM above the attack's own reference")
    left.set_title("Above its own no-information reference", fontsize=10)
    right.set_ylabel("SSIM above the public class mean of the label")
    right.set_title("Above the class template (what the labels alone give)", fontsize=10)
    for ax in (left, right):
        ax.axhline(0, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel("σ of the Gaussian noise on the released update")
    left.legend(fontsize=8)
    fig.suptitle(
        "Attackers that learn against noise (digits 16 px, LeNet, batch 1; 95 % CI over seeds)", fontsize=11
    )
    fig.tight_layout()
    fig.savefig(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--victims", type=int, default=8, help="victims per seed")
    parser.add_argument("--sigmas", type=float, nargs="+", default=list(SIGMAS))
    parser.add_argument("--out", help="the plot (PNG)")
    parser.add_argument("--json", help="write the raw numbers here")
    parser.add_argument("--from-json", help="summarise (and plot) a --json file instead of measuring")
    parser.add_argument(
        "--only", nargs="+", help="measure these attacks (labels) only, e.g. 'diffusion posterior'"
    )
    parser.add_argument("--merge", help="a --json file: keep its rows of the attacks not measured now")
    args = parser.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            rows = json.load(f)["rows"]
    else:
        rows = measure(args.seeds, args.victims, tuple(args.sigmas), args.only)
        if args.merge:
            with open(args.merge) as f:
                measured = {r["attack"] for r in rows}
                rows = [r for r in json.load(f)["rows"] if r["attack"] not in measured] + rows
    lines = summary(rows)
    print_summary(lines)
    if args.json and not args.from_json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "summary": lines}, f, indent=1)
    if args.out:
        plot(lines, args.out)


if __name__ == "__main__":
    main()
