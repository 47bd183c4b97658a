"""Convergence of the leaderboard's fitted defenses at each preset's budget: the table in
docs/components/defenses.md ("Budgets that converge").

Each fitted defense of the leaderboard (LODA, DCS², Anti-GAN, DM) is fitted with a preset's parameters
on the preset's own clients (digits, 16 px, the Dirichlet partition), seed by seed, through the same
``fit`` the leaderboard runs, and its convergence criterion read from the artifact
(``leakshield.defenses.convergence``). ``full`` is the papers' budgets; DM's (20,000 iterations at 50
images per class) is left out unless ``--with-full-dm`` (hours on 2 cores).

    python benchmarks/fit_convergence.py --presets quick standard full --clients 0 --seeds 0 1
    python benchmarks/fit_convergence.py --presets standard --only loda dcs2 \
        --set loda.steps=50 --set loda.epochs=3 --set dcs2.steps=50      # the wave-3 budgets
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from leakshield.artifacts import ArtifactCache, FitData
from leakshield.defenses import create_defense
from leakshield.defenses.convergence import fit_convergence
from leakshield.experiment.federation import build_model, load_world
from leakshield.leaderboard.presets import load_leaderboard

#: each fitted defense and the parameters its budget is made of
FITTED = {"loda": ("steps", "epochs"), "dcs2": ("steps",), "antigan": ("cgan_steps", "finetune_steps"),
          "dm": ("ipc", "iterations")}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["quick", "standard", "full"])
    parser.add_argument("--clients", nargs="+", type=int, default=[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--with-full-dm", action="store_true")
    parser.add_argument("--only", nargs="+", choices=sorted(FITTED), help="these defenses only")
    parser.add_argument("--set", action="append", default=[], metavar="DEFENSE.PARAM=INT",
                        help="override a preset's parameter, e.g. loda.steps=50")  # fmt: skip
    args = parser.parse_args()
    overrides: dict[str, dict[str, int]] = {}
    for item in args.set:
        target, value = item.split("=", 1)
        name, param = target.split(".", 1)
        overrides.setdefault(name, {})[param] = int(value)
    torch.set_num_threads(2)
    print("| preset | defense | budget | seed · client | criterion | measured | met | fit s |")
    print("|---|---|---|---|---|---|---|---|")
    for preset in args.presets:
        config = load_leaderboard(preset)
        data, clients = load_world(config)
        for setting in config.defenses:
            (entry,) = setting.entries
            if entry["name"] not in FITTED or (
                entry["name"] == "dm" and preset == "full" and not args.with_full_dm
            ):
                continue  # DM's paper budget: hours
            if args.only and entry["name"] not in args.only:
                continue
            defense = create_defense(entry["name"], {**entry["params"], **overrides.get(entry["name"], {})})
            fields = defense.params.model_dump()
            budget = ", ".join(f"{k} {fields[k]}" for k in FITTED[entry["name"]])
            for seed in args.seeds:
                for client in args.clients:
                    net = build_model(config.models[0], _empty(), data.info, seed, "cpu")
                    with tempfile.TemporaryDirectory() as folder:
                        fit = FitData(data.info, clients[client], net, seed, torch.device("cpu"),
                                      cache=ArtifactCache(folder), public=data.public)  # fmt: skip
                        started = time.perf_counter()
                        artifact = defense.fit(fit)
                        seconds = time.perf_counter() - started
                    for c in fit_convergence([artifact]):
                        shown = f"last {c.measure:.0%}" if c.kind == "plateau" else f"{c.measure:.0%}"
                        print(f"| {preset} | {setting.display} | {budget} | {seed} · {client} "
                              f"| {c.objective} | {shown} | {'yes' if c.met else 'no'} | {seconds:.1f} |",
                              flush=True)  # fmt: skip


def _empty():
    from leakshield.defenses.base import DefensePipeline

    return DefensePipeline([])


if __name__ == "__main__":
    main()
