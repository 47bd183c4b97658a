"""Cross-device DP-FedAvg: accuracy, client-level ε (both adjacencies) and word-set leakage per observer,
on the Rotten Tomatoes corpus (one client per movie) and on digits (150 Dirichlet clients).

    python benchmarks/cross_device.py --corpus PATH/rotten_tomatoes_corpus_full.csv.bz2 \
        --out runs/cross-device --seeds 3

Every run is stored as JSON under OUT/runs and skipped when rerun (an interrupted sweep resumes);
OUT/table.md and OUT/cross_device.png are written from the stored runs. ``--quick`` runs one seed of a
smaller grid (a check that the pipeline works, not a measurement).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import time
from pathlib import Path

from scipy.stats import t as student
from tqdm import tqdm

from leakshield import __version__
from leakshield.crossdevice import code_stamp
from leakshield.crossdevice.federation import CrossDeviceSettings, run_federation
from leakshield.crossdevice.leakage import OBSERVERS, leakage
from leakshield.crossdevice.population import digit_population, movie_population
from leakshield.errors import ConfigError

TEXT = {"local_lr": 1.0, "width": 4, "local_epochs": 2, "local_batch": 10}
IMAGE = {"local_lr": 0.1, "width": 32, "local_epochs": 2, "local_batch": 5}
CENTRAL_Z = (0.3, 0.5, 1.0, 2.0)
LOCAL_Z = (0.01, 0.1, 1.0)
FIXED_CLIP_Z = (0.5, 1.0)


def grid(quick: bool) -> list[dict]:
    """(population, q, sampling, dp) settings: no defense, central adaptive DP-FedAvg at 4 z, local DP at
    3 z (text), and one fixed-size central setting (its replace-one ε)."""
    out = []
    for pop, rates in (("text", (0.05, 0.3)), ("image", (0.1, 0.3))):
        for q in rates[:1] if quick else rates:
            out.append({"population": pop, "q": q, "sampling": "poisson", "dp": {"mode": "none"}})
            for z in CENTRAL_Z[2:3] if quick else CENTRAL_Z:
                out.append(
                    {
                        "population": pop,
                        "q": q,
                        "sampling": "poisson",
                        "dp": {"mode": "central", "noise_multiplier": z, "clip": 0.1, "adaptive": True},
                    }
                )
            if pop == "text" and not quick:  # fixed clipping beside adaptive
                for z in FIXED_CLIP_Z:
                    out.append({"population": pop, "q": q, "sampling": "poisson",
                                "dp": {"mode": "central", "noise_multiplier": z, "clip": 0.5}})  # fmt: skip
            if pop == "text" or not quick:
                for z in LOCAL_Z[1:2] if quick else LOCAL_Z:
                    out.append(
                        {
                            "population": pop,
                            "q": q,
                            "sampling": "poisson",
                            "dp": {"mode": "local", "noise_multiplier": z, "clip": 0.5},
                        }
                    )
    if not quick:
        out.append(
            {
                "population": "text",
                "q": 0.05,
                "sampling": "fixed",
                "dp": {"mode": "central", "noise_multiplier": 1.0, "clip": 0.1, "adaptive": True},
            }
        )
    return out


def key(setting: dict, seed: int, rounds: int) -> str:
    dp = setting["dp"]
    z = dp.get("noise_multiplier", 0)
    mode = dp["mode"] + ("-fixedclip" if dp["mode"] == "central" and not dp.get("adaptive") else "")
    return f"{setting['population']}-q{setting['q']}-{setting['sampling']}-{mode}-z{z}-r{rounds}-s{seed}"


def identity(setting: dict, rounds: int, corpus_sha256: str) -> dict:
    """Everything a stored run depends on: a run stored under another identity is recomputed."""
    base = TEXT if setting["population"] == "text" else IMAGE
    data = {"corpus_sha256": corpus_sha256} if setting["population"] == "text" else {}
    stamp = {"leakshield": __version__, "code": code_stamp()}
    return {"setting": setting, "base": base, "rounds": rounds, **stamp, **data}


def run_one(setting: dict, seed: int, rounds: int, populations: dict, corpus_sha256: str) -> dict:
    pop = populations[setting["population"]]
    base = TEXT if setting["population"] == "text" else IMAGE
    settings = CrossDeviceSettings(
        rounds=rounds,
        sample_rate=setting["q"],
        sampling=setting["sampling"],
        eval_every=max(1, rounds // 6),
        dp=setting["dp"],
        **base,
    )
    start = time.perf_counter()
    result = run_federation(pop, settings, seed, capture=(0, rounds - 1))
    leaks = [vars(w) for c in result.captured for w in leakage(pop, c)]
    return {
        "identity": identity(setting, rounds, corpus_sha256),
        "setting": setting,
        "seed": seed,
        "accuracy": result.final_accuracy,
        "curve": result.accuracy,
        "epsilon": result.epsilon,
        "delta": result.delta,
        "rounds_per_second": result.rounds_per_second,
        "seconds": time.perf_counter() - start,
        "leakage": leaks,
        "clients": pop.clients,
    }


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the 95 % t half-width over seeds (0 for one seed)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, float(
        student.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    )


def fmt(mean: float, half: float) -> str:
    return f"{mean:.3f} ± {half:.3f}"


def eps_text(value: float | None) -> str:
    if value is None:
        return "n/a"
    if math.isinf(value):
        return "∞"
    return f"{value:.2g}" if value >= 1000 else f"{value:.2f}"


def add_remove_cell(epsilon: dict) -> str:
    """add/remove ε; under local noise (not defined there) the zero-out ε in its place, so marked."""
    if epsilon.get("zero-out") is not None:
        return f"zero-out {eps_text(epsilon['zero-out'])}"
    return eps_text(epsilon["add-remove"])


def worst_epsilon(recs: list[dict]) -> dict:
    """Each relation's ε, the largest over seeds (local ε follows who took part most); None where the
    relation does not apply."""
    out = {}
    for name in recs[0]["epsilon"]:
        values = [r["epsilon"].get(name) for r in recs]
        out[name] = None if any(v is None for v in values) else max(values)
    return out


def leak_cells(recs: list[dict]) -> dict:
    """(observer, first|last) → (mean, half-width) of the score over seeds, and of the reference."""
    out = {}
    for obs in OBSERVERS:
        for which, index in (("first", 0), ("last", -1)):
            rows = [[w for w in r["leakage"] if w["observer"] == obs] for r in recs]
            rows = [row[index] for row in rows if row]
            if rows:
                out[obs, which] = interval([w["score"] for w in rows])
                out[obs, which, "reference"] = interval([w["reference"] for w in rows])
    return out


def summarise(records: list[dict], out: Path) -> None:
    """OUT/table.md: accuracy and ε per setting, then what each observer reads; OUT/cross_device.png."""
    groups: dict[str, list[dict]] = {}
    for rec in records:
        groups.setdefault(json.dumps(rec["setting"], sort_keys=True), []).append(rec)
    utility = ["| data | q | DP | z | accuracy | ε add/remove | ε replace-one | rounds/s |",
               "|" + "---|" * 8]  # fmt: skip
    leaks = ["| data | q | DP | z | server: round 0 / last | global-model observer: round 0 / last "
             "| no-information: round 0 / last |", "|" + "---|" * 7]  # fmt: skip
    points = []
    for recs in groups.values():
        s = recs[0]["setting"]
        acc = interval([r["accuracy"] for r in recs])
        eps = worst_epsilon(recs)
        leak = leak_cells(recs)
        mode = s["dp"]["mode"] + (
            ", fixed S 0.5" if s["dp"]["mode"] == "central" and not s["dp"].get("adaptive") else ""
        )
        z = s["dp"].get("noise_multiplier", "—")
        speed = statistics.fmean(r["rounds_per_second"] for r in recs)
        eps_cells = f"{add_remove_cell(eps)} | {eps_text(eps['replace-one'])}"
        where = s["q"] if s["sampling"] == "poisson" else f"{s['q']} fixed"
        utility.append(
            f"| {s['population']} | {where} | {mode} | {z} | {fmt(*acc)} | {eps_cells} | {speed:.0f} |"
        )
        if ("server", "first") in leak:
            cells = [f"{fmt(*leak[o, 'first'])} / {fmt(*leak[o, 'last'])}" for o in OBSERVERS]
            refs = [leak["server", w, "reference"][0] for w in ("first", "last")]
            ref = f"{refs[0]:.3f} / {refs[1]:.3f}"
            if leak["server", "first", "reference"] != leak["global-model observer", "first", "reference"]:
                other = [leak["global-model observer", w, "reference"][0] for w in ("first", "last")]
                ref += f" (observer: {other[0]:.3f} / {other[1]:.3f})"
            leaks.append(f"| {s['population']} | {where} | {mode} | {z} | {cells[0]} | {cells[1]} | {ref} |")
        points.append((s, acc, eps, leak))
    n = max(len(recs) for recs in groups.values())
    (out / "table.md").write_text(
        f"Accuracy: mean ± 95 % t half-width over {n} seeds; ε: the largest over seeds, at δ "
        f"{records[0]['delta']:.0e}.\n\n" + "\n".join(utility) + "\n\nWhat a sampled client's update "
        "shows (text: word-set F1; image: PSNR in dB), mean ± half-width over seeds.\n\n"
        + "\n".join(leaks)
        + "\n"
    )
    plot(points, out / "cross_device.png")


def worse(leak: dict, observer: str) -> tuple:
    """The leakier of round 0 and the last round (by mean), with that round's reference."""
    which = max(("first", "last"), key=lambda w: leak[observer, w][0])
    return leak[observer, which], leak[observer, which, "reference"]


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def plot(points: list, path: Path) -> None:
    """Accuracy against replace-one ε (central DP-FedAvg); the leak against ε for text and images."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    for pop, marker in (("text", "o"), ("image", "s")):
        for q in sorted({s["q"] for s, *_ in points if s["population"] == pop}):
            here = [
                p
                for p in points
                if p[0]["population"] == pop and p[0]["q"] == q and p[0]["sampling"] == "poisson"
            ]
            rows = sorted((e["add-remove"], a) for s, a, e, _ in here
                          if s["dp"].get("adaptive") and finite(e["add-remove"]))  # fmt: skip
            if rows:
                xs, means, halves = [r[0] for r in rows], [r[1][0] for r in rows], [r[1][1] for r in rows]
                line = axes[0].errorbar(xs, means, halves, marker=marker, capsize=3, label=f"{pop}, q {q}")
                plain = [a for s, a, _, _ in here if s["dp"]["mode"] == "none"]
                if plain:
                    axes[0].axhline(plain[0][0], color=line[0].get_color(), ls=":", lw=1)
    axes[0].set(xscale="log", xlabel="client-level ε (add/remove)", ylabel="test accuracy",
                title="central DP-FedAvg, adaptive clipping (dotted: no DP)")  # fmt: skip
    axes[0].legend(fontsize=8)
    for ax, pop, q, metric in ((axes[1], "text", 0.05, "word-set F1"), (axes[2], "image", 0.1, "PSNR (dB)")):
        reference = None
        for mode, obs, style in (("local", "server", "-o"), ("central", "server", "-^"),
                                 ("central", "global-model observer", "-s")):  # fmt: skip
            rows = sorted((e["replace-one"], *worse(leak, obs))
                          for s, _, e, leak in points
                          if s["population"] == pop and s["q"] == q and s["dp"]["mode"] == mode
                          and (mode != "central" or s["dp"].get("adaptive"))
                          and s["sampling"] == "poisson" and (obs, "last") in leak
                          and finite(e["replace-one"]))  # fmt: skip
            if rows:
                ax.errorbar([r[0] for r in rows], [r[1][0] for r in rows], [r[1][1] for r in rows], fmt=style,
                            capsize=3, label=f"{mode} DP, the {obs}")  # fmt: skip
                reference = rows[0][2][0]
        if reference is not None:
            ax.axhline(reference, color="grey", ls=":", label="no-information level")
        ax.set(xscale="log", xlabel="client-level ε (replace-one)", ylabel=f"{metric}, the worse of 2 rounds",
               title=f"{pop}, q {q}: what a sampled client's update leaks")  # fmt: skip
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="the Rotten Tomatoes CSV (bz2 or not)")
    parser.add_argument("--out", type=Path, default=Path("runs/cross-device"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="one seed, a smaller grid, 30 rounds")
    args = parser.parse_args()
    seeds, rounds = (1, 30) if args.quick else (args.seeds, args.rounds)
    store = args.out / "runs"
    store.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256(args.corpus.read_bytes()).hexdigest()
    populations = {"text": movie_population(args.corpus), "image": digit_population(150, 0.5, 0)}
    jobs = [(s, seed) for s in grid(args.quick) for seed in range(seeds)]
    records = []
    for setting, seed in tqdm(jobs, desc="cross-device runs"):
        path = store / f"{key(setting, seed, rounds)}.json"
        if not path.is_file() or json.loads(path.read_text()).get("identity") != identity(
            setting, rounds, sha
        ):
            try:
                record = run_one(setting, seed, rounds, populations, sha)
            except ConfigError as exc:  # a diverged run is recorded, not the end of the sweep
                record = {"identity": identity(setting, rounds, sha), "setting": setting, "seed": seed,
                          "failed": str(exc)}  # fmt: skip
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(record, default=str))
            tmp.replace(path)
        record = json.loads(path.read_text())
        if "failed" in record:
            print(f"{path.name}: {record['failed']}")
            continue
        records.append(record)
    summarise(records, args.out)
    print((args.out / "table.md").read_text())


if __name__ == "__main__":
    main()
