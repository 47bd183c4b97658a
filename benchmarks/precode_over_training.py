"""What changes in PRECODE's bottleneck as its model trains: its noise against its signal, and how much
two bottleneck draws change the gradient a client shares, at the rounds configs/precode-training.yaml
attacks (the same models, federation and its 8 victims; a round is an epoch there).

For each model with PRECODE and each round: the posterior's mean σ and mean |μ| over the victims (the
bottleneck samples z = μ + σ·ε, Eq. 3), and the cosine between the victim's FedSGD gradient under two
bottleneck draws: the lower it is, the less the attacker's own draw can match the victim's. These are
measured beside the attack's results, not shown to cause them. One thread, as each worker of a run.

    python benchmarks/precode_over_training.py                      # DMLP and LeNet, rounds 0, 1, 50
    python benchmarks/precode_over_training.py --rounds 0 50 --models lenet-tanh
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from leakshield.defenses.precode import PrecodeBottleneck
from leakshield.experiment.config import load_config
from leakshield.experiment.world import ExperimentContext
from leakshield.fl.observation import server_view_of

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "precode-training.yaml"


def _flat(update: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([v.flatten() for v in update.values()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, nargs="+", default=[0, 1, 50])
    parser.add_argument("--models", nargs="+", default=["dmlp", "lenet-tanh"])
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # as each worker of `leakshield run --workers N`
    config = load_config(CONFIG)
    context = ExperimentContext(config, torch.device("cpu"))
    defense = next(d for d in config.defenses if d.display == "PRECODE")
    print(
        "| model | round | mean σ | mean abs(μ) | two draws' gradients: cosine, mean [min, max]; per victim |"
    )
    print("|---|---|---|---|---|")
    for model in (m for m in config.models if m.display in args.models):
        for rounds in sorted(args.rounds):
            trained = context.models.at_round(model, defense, config.seeds[0], rounds)
            net = trained.model.eval()
            bottleneck = next(m for m in net.modules() if isinstance(m, PrecodeBottleneck))
            sigmas, mus, cosines = [], [], []
            for victim in context.victims:
                with torch.no_grad():
                    net(context.info.normalize(victim.x))  # the model sees normalized pixels
                sigmas.append(bottleneck.last_sigma.mean().item())
                mus.append(bottleneck.last_mu.abs().mean().item())
                draws = [
                    _flat(server_view_of(net, victim, context.info, labels_known=True, seed=s).update.delta)
                    for s in (0, 1)
                ]
                cosines.append(torch.nn.functional.cosine_similarity(*draws, dim=0).item())
            sigma, mu, mean = (sum(v) / len(v) for v in (sigmas, mus, cosines))
            each = " ".join(f"{c:.2f}" for c in cosines)
            spread = f"{mean:.3f} [{min(cosines):.3f}, {max(cosines):.3f}]; {each}"
            print(f"| {model.display} | {rounds} | {sigma:.3f} | {mu:.3f} | {spread} |")


if __name__ == "__main__":
    main()
