"""What a round's releases tell about a sampled client's words (text) or images (digits), per observer.

The text model's embedding gradient is non-zero exactly on the rows of the words a client used (every
local step touches only them), so the word set is read off the rows that carry signal — the leak of
Melis et al. (S&P 2019), which TAG and LAMP start from. Without noise the rows that carry any signal
are the set (:func:`~leakshield.text.bag_of_words.rows_with_signal`). Under Gaussian noise the
attacker takes the k rows of largest norm, k the client's true number of words: an oracle size, the
same the no-information guess gets (a χ² test at 1 % false rows, the noise-aware reader of the
leaderboard, read almost nothing at z = 0.1 where the top-k rows still held most words).

Observers (the threat model is part of each number):

* ``server`` — the honest-but-curious server reads each sampled client's update as it arrived: clipped
  (central DP adds its noise only to the sum, so the server sees no noise) or, under local DP, clipped
  and noised;
* ``observer of the global models`` — another participant, or anyone the models are published to:
  consecutive global models give Δ̄ (the momentum is known), the noisy mean of the round's clients; its
  word rows are the union of the sampled clients' words, scored against each one of them.

Scores are F1 of the read set against the client's true word set (specials excluded). The no-information
reference is the F1 of guessing, without any update, the client's number of words (an oracle size,
which favours the guess) among the public split's most frequent ones.

Images: the model's first layer is fully connected, so each hidden unit i gives x̂_i = ΔW_i/Δb_i, the
analytic attack of Phong et al. (IEEE TIFS 2018): exact for one image, a mix of the images that
activated unit i over a client's local steps (clipping scales ΔW_i and Δb_i alike and changes
nothing). Each of the client's images is scored by the PSNR of its best match among the units'
reconstructions (clamped to [0, 1]; under a known noise only units whose Δb_i exceeds 3 noise stds); the
no-information reference scores as many public images as the observer has candidates, so both have the
same chances to pick a lucky match.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from leakshield.crossdevice.federation import Released
from leakshield.crossdevice.population import SPECIAL_IDS, Population
from leakshield.text.bag_of_words import rows_with_signal

OBSERVERS = ("server", "global-model observer")


def f1(found: set[int], truth: set[int]) -> float:
    """F1 of a found set against the true one (1 when both are empty)."""
    if not found and not truth:
        return 1.0
    hit = len(found & truth)
    return 2 * hit / (len(found) + len(truth))


def prior_guess(public_counts: torch.Tensor, size: int) -> set[int]:
    """The ``size`` most frequent public tokens (specials excluded): the guess without any update."""
    counts = public_counts.clone()
    counts[:SPECIAL_IDS] = -1
    return {int(t) for t in counts.argsort(descending=True)[:size]}


def read_words(embedding_update: torch.Tensor, noise_std: float, size: int) -> set[int]:
    """The words an update's embedding rows show: the non-zero rows without noise; with noise, the
    ``size`` rows of largest norm (specials excluded)."""
    if noise_std == 0:
        return {int(t) for t in rows_with_signal(embedding_update) if t >= SPECIAL_IDS}
    norms = embedding_update.double().pow(2).sum(1)
    norms[:SPECIAL_IDS] = -1
    return {int(t) for t in norms.argsort(descending=True)[:size]}


@dataclass(frozen=True)
class Leak:
    """The mean ``score`` (``metric``: word F1 or PSNR in dB) over the captured clients for one
    observer, and the no-information score beside it."""

    observer: str
    round: int
    clients: int
    score: float
    reference: float
    metric: str


def leakage(population: Population, released: Released) -> list[Leak]:
    """Each observer's score on one captured round: words for text, images otherwise."""
    if population.kind == "text":
        return word_leakage(population, released)
    return image_leakage(population, released)


def word_leakage(population: Population, released: Released) -> list[Leak]:
    """F1 of the word sets each observer reads from one captured round (empty if nobody came)."""
    if population.kind != "text" or population.public_counts is None:
        raise ValueError("word_leakage: a text population (with its public token counts)")
    if not len(released.clients):
        return []
    truths = population.token_sets(released.clients)
    reference = sum(f1(prior_guess(population.public_counts, len(t)), t) for t in truths) / len(truths)
    server = [
        f1(read_words(released.updates["embedding"][i], released.update_noise_std, len(truth)), truth)
        for i, truth in enumerate(truths)
    ]
    aggregate = released.aggregate["embedding"]
    models = [f1(read_words(aggregate, released.aggregate_noise_std, len(t)), t) for t in truths]
    n = len(truths)
    return [
        Leak("server", released.round, n, sum(server) / n, reference, "word F1"),
        Leak("global-model observer", released.round, n, sum(models) / n, reference, "word F1"),
    ]


def unit_images(update: dict[str, torch.Tensor], noise_std: float = 0.0) -> torch.Tensor:
    """ΔW_i/Δb_i (units × features, clamped to [0, 1]) of every hidden unit whose bias moved: by more
    than 3 noise stds under a known noise (Δb_i near 0 divides noise by nearly nothing), else the unit
    whose bias moved most."""
    weight, bias = update["hidden.weight"].double(), update["hidden.bias"].double()
    moved = bias.abs() > max(1e-12, 3 * noise_std)
    if noise_std > 0 and not moved.any():
        moved = bias.abs() == bias.abs().max()
    return (weight[moved] / bias[moved].unsqueeze(1)).clamp(0, 1).float()


def best_psnr(images: torch.Tensor, candidates: torch.Tensor) -> float:
    """Mean over ``images`` of the PSNR (peak 1) of each one's nearest candidate; 0 without any."""
    if not len(candidates):
        return 0.0
    mse = torch.cdist(images.double(), candidates.double()).pow(2) / images.shape[1]
    return float((-10 * torch.log10(mse.min(1).values.clamp(min=1e-10))).mean())


def image_leakage(population: Population, released: Released) -> list[Leak]:
    """PSNR of the analytic attack's best match per client image, per observer (module docstring)."""
    if population.kind != "image" or population.public_x is None:
        raise ValueError("image_leakage: an image population (with its public images)")
    if not len(released.clients):
        return []
    models_images = unit_images(released.aggregate, released.aggregate_noise_std)
    scores: dict[str, list[float]] = {"server": [], "models": [], "server ref": [], "models ref": []}
    for i, k in enumerate(released.clients.tolist()):
        mine = population.x[k][population.valid[k]].float().cpu()
        candidates = unit_images({n: t[i] for n, t in released.updates.items()}, released.update_noise_std)
        g = torch.Generator().manual_seed(1_000_003 * released.round + k)
        for key, found in (("server", candidates), ("models", models_images)):
            guess = population.public_x[
                torch.randperm(len(population.public_x), generator=g)[: max(len(found), 1)]
            ]
            scores[f"{key} ref"].append(best_psnr(mine, guess))
            scores[key].append(best_psnr(mine, found if len(found) else guess))  # nothing read: it guesses
    n = len(released.clients)
    mean = {key: sum(v) / n for key, v in scores.items()}
    return [
        Leak("server", released.round, n, mean["server"], mean["server ref"], "PSNR"),
        Leak("global-model observer", released.round, n, mean["models"], mean["models ref"], "PSNR"),
    ]
