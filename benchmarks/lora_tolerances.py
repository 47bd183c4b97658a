"""The tolerances of DAGER on LoRA (``leakshield.text.dager_lora``): per adapter rank, rank cut and token
tolerance, how many of the victims' reviews the token step reads exactly (one passing token per
position, the true one, none past its end), how many false tokens pass in all (at any position),
and how many updates the bound caps.

    python benchmarks/lora_tolerances.py --corpus FILE [--victims 20]

Setting: BERT (width 64, 2 blocks) pretrained 2 epochs on the public split, rank-r attention adapters
after 5 FedAvg rounds over 10 clients (the world of ``benchmarks/text_lora.yaml``, seed 0), one FedSGD
gradient of one review per victim.
"""

from __future__ import annotations

import argparse
import copy

import torch

from leakshield.experiment.config import DefenseSetting
from leakshield.text.dager_lora import WIDTH_MARGIN, adapter_gradient, adapter_span
from leakshield.text.span import first_layer_states, span_distance
from leakshield.text.tokenizer import PAD
from leakshield.text_grid.config import parse_text_config
from leakshield.text_grid.world import TextWorld

RANKS = (8, 16, 32)
RANK_CUTS = (1e-7, 1e-8, 1e-9)
TOLERANCES = (0.01, 0.03, 0.05, 0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--victims", type=int, default=20)
    args = parser.parse_args()
    raw = {
        "track": "text",
        "corpus": {"path": args.corpus, "public_fraction": 0.2, "test_fraction": 0.2},
        "tokenizer": {"vocab_size": 2000},
        "max_length": 32,
        "models": [
            {
                "name": "bert",
                "width": 64,
                "layers": 2,
                "heads": 2,
                "pretrain": {"epochs": 2},
                "lora": {"rank": r},
            }
            for r in RANKS
        ],
        "fl": {"clients": 10, "local": {"algorithm": "fedavg", "optimizer": "adam", "local_lr": 1e-3}},
        "partition": "by-group",
        "training": {"rounds": 5},
        "victims": {"count": args.victims, "batches": [1]},
        "attacks": ["dager"],
    }
    config = parse_text_config(raw)
    world = TextWorld(config, torch.device("cpu"))
    setting = DefenseSetting(name="none")
    print("| rank | rank cut | tolerance | exact | false tokens | capped |\n|---|---|---|---|---|---|")
    for spec in config.models:
        model = world.state(spec, setting, "trained", 0).model
        states = [first_layer_states(copy.deepcopy(model).double(), p) for p in range(config.max_length)]
        grads = [world.update(model, setting, v, 0)[0] for v in world.victims[1]]
        for cut in RANK_CUTS:
            counts = {t: [0, 0, 0] for t in TOLERANCES}
            for victim, gradient in zip(world.victims[1], grads, strict=True):
                matrix, bound, _ = adapter_gradient(model, gradient, "attention")
                span, capped = adapter_span(
                    matrix, bound, cut, None, WIDTH_MARGIN
                )  # detection: DETECT_TOLERANCE
                ids = victim.batch.x[0]
                n = int((ids != PAD).sum())
                for tolerance, count in counts.items():
                    if capped:
                        count[2] += 1
                        continue
                    exact, false = True, 0
                    for position in range(config.max_length):  # past the review: any pass is false
                        passed = set(
                            (span_distance(span, states[position]) < tolerance).nonzero().flatten().tolist()
                        )
                        passed.discard(PAD)
                        truth = {int(ids[position])} if position < n else set()
                        exact &= passed == truth
                        false += len(passed - truth)
                    count[0] += exact
                    count[1] += false
            rank = spec.lora.rank
            for tolerance, (exact, false, capped) in counts.items():
                print(f"| {rank} | {cut:g} | {tolerance:g} | {exact}/{args.victims} | {false} | {capped} |")


if __name__ == "__main__":
    main()
