"""Do the client guards catch the sequence imprint? True- and false-positive rates over FL training.

For each model and seed, a federation trains by FedAvg (no guard in its pipeline, so every round's
model is the honest one); at every round each client's guards judge the honest global model
(false positives) and the model the sequence-imprint server would send instead (true positives), with
the previous round's honest model as the one it accepted before (the drift guard compares). Rates are
counts over (round, client) judgements with Clopper–Pearson 95 % intervals; the clients of one seed
and round judge one model (a guard that reads no client data gives them one verdict), so the
intervals are too narrow: the (seed, round) count beside them is the honest unit for such guards.

    python benchmarks/text_imprint_guards.py --corpus rotten_tomatoes_corpus_full.csv.bz2 \\
        --seeds 3 --rounds 10 --out docs/text_imprint_guards.md
"""

from __future__ import annotations

import argparse
import copy
import re
import time
from collections import Counter, defaultdict
from pathlib import Path

import torch

from leakshield.defenses.base import DefensePipeline
from leakshield.fl import FederatedSimulation, HonestClient
from leakshield.leaderboard.leak_rate import clopper_pearson
from leakshield.seeds import seeded_generator
from leakshield.text.imprint import imprint_model
from leakshield.text_grid.config import parse_text_config
from leakshield.text_grid.world import TextWorld

GUARDS = ("row-guard", "drift-guard", "loss-guard", "dominance-guard")


def config(corpus: str, kind: str) -> dict:
    return {
        "track": "text", "name": f"imprint-guards-{kind}", "seeds": [0],
        "corpus": {"path": corpus, "format": "rotten-tomatoes", "public_fraction": 0.2, "test_fraction": 0.2},
        "tokenizer": {"kind": "wordpiece", "vocab_size": 2000}, "max_length": 32,
        "models": [{"name": kind, "width": 64, "layers": 2, "heads": 2}],
        "fl": {"clients": 10, "local": {"algorithm": "fedavg", "optimizer": "adam", "local_lr": 0.001,
                                        "batch_size": 32}},
        "partition": "by-group", "states": ["untrained"], "victims": {"count": 1, "batches": [1]},
        "defenses": ["none"], "attacks": ["bag-of-words"],
    }  # fmt: skip


def measure(
    corpus: str, kind: str, seeds: int, rounds: int, bins: int
) -> tuple[dict[tuple[str, str], list[int]], dict[tuple[str, str], set], Counter]:
    """(guard, honest|imprint) → [refused, judged]; → the (seed, round) with a refusal; the honest
    refusals' reasons (parameter names and numbers dropped to their shape)."""
    cfg = parse_text_config(config(corpus, kind))
    world = TextWorld(cfg, torch.device("cpu"))
    spec = cfg.models[0]
    setting = cfg.defenses[0]
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    rounds_hit: dict[tuple[str, str], set] = defaultdict(set)
    reasons: Counter = Counter()
    public = world.data.public.x
    for seed in range(seeds):
        model = world.fresh_model(spec, setting, seed)
        sim = FederatedSimulation.honest(model, world.clients, cfg.fl, DefensePipeline(), world.info,
                                         public=world.data.public, seed=seed)  # fmt: skip
        previous = copy.deepcopy(model)
        for r in range(rounds):
            honest = copy.deepcopy(sim.model).eval()
            sent = {"honest": honest, "imprint": imprint_model(honest, public, bins, seed=seed)}
            for guard in GUARDS:
                pipeline = DefensePipeline.from_config([{"name": guard}])
                for c, data in enumerate(world.clients):
                    client = HonestClient(c, data, cfg.fl.local, pipeline, world.info,
                                          public=world.data.public, seed=seed, model_mode="eval")  # fmt: skip
                    for kind_sent, m in sent.items():
                        verdict = client.inspect(m, r, seeded_generator(seed, r, c), previous if r else None)
                        counts[(guard, kind_sent)][0] += int(not verdict.accepted)
                        counts[(guard, kind_sent)][1] += 1
                        if not verdict.accepted:
                            rounds_hit[(guard, kind_sent)].add((seed, r))
                            if kind_sent == "honest":
                                reasons[(guard, r, re.sub(r"[0-9.]+", "#", verdict.reason)[:140])] += 1
            previous = honest
            sim.step()
    return counts, rounds_hit, reasons


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--bins", type=int, default=4096)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    lines = [
        "| model | guard | TPR (imprint refused) | FPR (honest refused) | seed-rounds with a refusal "
        "(imprint; honest) |",
        "|---|---|---|---|---|",
    ]
    notes: list[str] = []
    began = time.perf_counter()
    for kind in ("bert", "gpt2"):
        counts, hit, reasons = measure(args.corpus, kind, args.seeds, args.rounds, args.bins)
        total = args.seeds * args.rounds
        for guard in GUARDS:
            cells = []
            for sent in ("imprint", "honest"):
                k, n = counts[(guard, sent)]
                low, high = clopper_pearson(k, n)
                cells.append(f"{k}/{n} = {k / n:.2f} [{low:.2f}, {high:.2f}]")
            rounds_text = f"{len(hit[(guard, 'imprint')])}/{total}; {len(hit[(guard, 'honest')])}/{total}"
            lines.append(f"| {kind} | {guard} | {cells[0]} | {cells[1]} | {rounds_text} |")
        for (guard, r, reason), n in sorted(reasons.items()):
            notes.append(f"- {kind}, {guard}, round {r}: {n} × {reason}")
        print("\n".join(lines), flush=True)
    lines.append(
        f"\n{args.seeds} seeds × {args.rounds} FedAvg rounds × 10 clients per model; {args.bins} bins; "
        f"{time.perf_counter() - began:.0f} s on this machine. Honest models refused:\n"
    )
    lines += notes or ["- none"]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
