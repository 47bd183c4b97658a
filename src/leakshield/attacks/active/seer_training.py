"""SEER's training (Garov et al., *Hiding in Plain Sight: Disguising Data Stealing Attacks in Federated
Learning*, ICLR 2024; facts from the authors' code, ``insait-institute/SEER``): the server trains the
model it will send jointly with a secret disaggregator and reconstructor, so that the sum of a batch's
(or an aggregate's) gradients, read at a secret subset of entries, decodes to the one sample that has a
chosen property.

One training step (end to end through the model's gradient, as the authors' ``train.py``):

1. draw ``aggregate_size`` public images, shift each by up to ``shift`` pixels (an augmentation the
   small public splits here need: without it the model memorizes them) and tweak their brightness
   (the authors' ``distr.tweak``) so that exactly one — the positive — is above the property's
   threshold and the others below it;
2. compute the summed gradient g = Σᵢ ∇θ ℓ(xᵢ, yᵢ) with ``create_graph`` (second order);
3. decode x̂ = R(D(g[S])) (S: the secret entries, D: a linear disaggregator, R: the reconstructor);
4. step θ, D and R together on ‖x̂ − x_positive‖².

The threshold is the public split's (1 − 1/``aggregate_size``) quantile of the property (the ``thresh``
mode the authors use under secure aggregation): in a natural aggregate of that many samples, one is
above it on average. Digits have a black background, so brightness is tweaked multiplicatively (pixels
scaled, then clipped to [0, 1]) instead of the authors' additive shift of normalized CIFAR images.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from tqdm.auto import tqdm

from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.loss import training_loss

#: the share of the threshold by which a tweaked positive clears it at most (drawn uniformly)
POSITIVE_MARGIN = 0.3
#: a tweaked negative sits this far below (bright) or above (dark) the threshold
NEGATIVE_MARGIN = 0.02


def property_scores(images: torch.Tensor, prop: str) -> torch.Tensor:
    """Each image's property score, larger meaning more of it: mean pixel value (``bright``) or its
    negative (``dark``); ``images`` in [0, 1], N×C×H×W."""
    mean = images.flatten(1).mean(dim=1)
    return mean if prop == "bright" else -mean


def scaled_to_mean(images: torch.Tensor, targets: torch.Tensor, iterations: int = 30) -> torch.Tensor:
    """Each image's pixels scaled by the factor k ∈ [0, 16] for which clip(k·x, 0, 1) has mean
    ``targets`` (bisection; the mean grows with k), or as close as the clip allows."""
    low = torch.zeros(len(images), dtype=images.dtype, device=images.device)
    high = torch.full_like(low, 16.0)
    for _ in range(iterations):
        mid = (low + high) / 2
        mean = (images * mid.view(-1, 1, 1, 1)).clamp(0, 1).flatten(1).mean(dim=1)
        below = mean < targets
        low, high = torch.where(below, mid, low), torch.where(below, high, mid)
    return (images * ((low + high) / 2).view(-1, 1, 1, 1)).clamp(0, 1)


def tweak_batch(
    images: torch.Tensor, threshold: float, prop: str, generator: torch.Generator
) -> torch.Tensor:
    """``images`` with the first made the positive (its score above ``threshold`` by a random share of
    it, up to :data:`POSITIVE_MARGIN`) and every other one at or below the threshold (scaled to just
    under it when it was above): the batches SEER trains on, with exactly one sample of the property."""
    limit = max(abs(threshold), 1e-3)  # the threshold as a mean brightness (dark: scores are −mean)
    means = images.flatten(1).mean(dim=1)
    margin = torch.rand((), generator=generator).item() * POSITIVE_MARGIN
    if prop == "bright":
        positive, over = limit * (1 + margin), means[1:] > limit
        negative = limit * (1 - NEGATIVE_MARGIN)
    else:
        positive, over = limit * (1 - margin), means[1:] < limit
        negative = limit * (1 + NEGATIVE_MARGIN)
    targets = means.clone()
    targets[0] = positive
    targets[1:] = torch.where(over, torch.full_like(means[1:], negative), means[1:])
    changed = torch.cat([torch.ones(1, dtype=torch.bool), over])
    out = images.clone()
    out[changed] = scaled_to_mean(images[changed], targets[changed])
    return out


def shifted(images: torch.Tensor, pixels: int, generator: torch.Generator) -> torch.Tensor:
    """Each image rolled by its own random (dy, dx) ∈ [−``pixels``, ``pixels``]² (0: unchanged)."""
    if pixels == 0:
        return images
    moves = torch.randint(-pixels, pixels + 1, (len(images), 2), generator=generator).tolist()
    rolled = [torch.roll(x, shifts=(dy, dx), dims=(1, 2)) for x, (dy, dx) in zip(images, moves, strict=True)]
    return torch.stack(rolled)


class Disaggregator(nn.Module):
    """SEER's secret decoder: the gradient entries ``entries`` (flat indices into the concatenated
    parameters) → a linear disaggregator without bias (linear, so a sum of gradients maps to the sum of
    their codes) → a two-layer reconstructor with a sigmoid (pixel space)."""

    def __init__(self, entries: torch.Tensor, latent: int, hidden: int, shape: Sequence[int]) -> None:
        super().__init__()
        self.register_buffer("entries", entries.long())
        self.shape = tuple(shape)
        pixels = int(torch.tensor(self.shape).prod())
        self.disaggregate = nn.Linear(len(entries), latent, bias=False)
        self.reconstruct = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, pixels))

    def forward(self, flat_gradient: torch.Tensor) -> torch.Tensor:
        code = self.disaggregate(flat_gradient[..., self.entries])
        return torch.sigmoid(self.reconstruct(code)).view(-1, *self.shape)


def summed_gradient(model: nn.Module, info: DatasetInfo, x: torch.Tensor, y: torch.Tensor,
                    create_graph: bool) -> torch.Tensor:  # fmt: skip
    """Σᵢ ∇θ ℓ(xᵢ, yᵢ) over the batch (the client's mean loss times the batch size), flattened in the
    order of ``model.parameters()``; ``x`` in pixel space."""
    params = [p for p in model.parameters() if p.requires_grad]
    loss = training_loss(model, model(info.normalize(x)), y) * len(x)
    grads = torch.autograd.grad(loss, params, create_graph=create_graph)
    return torch.cat([g.flatten() for g in grads])


@dataclass(frozen=True)
class SeerSchedule:
    """steps: training steps; lr: Adam's step size for the model and the decoder; aggregate_size: the
    samples per step (one positive); prop: ``bright`` or ``dark``; shift: the augmentation's largest
    translation in pixels."""

    steps: int
    lr: float
    aggregate_size: int
    prop: str
    shift: int = 1


def property_threshold(public: ImageSet, prop: str, aggregate_size: int) -> float:
    """The (1 − 1/``aggregate_size``) quantile of the public split's property scores."""
    scores = property_scores(public.x.float(), prop)
    if aggregate_size == 1:
        return float(scores.min())
    return float(torch.quantile(scores, 1 - 1 / aggregate_size))


def train_seer(
    model: nn.Module,
    decoder: Disaggregator,
    public: ImageSet,
    info: DatasetInfo,
    schedule: SeerSchedule,
    threshold: float,
    seed: int,
    progress: bool = False,
) -> list[float]:
    """Train ``model`` and ``decoder`` in place (see the module docstring); returns the loss every 100
    steps."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam([*model.parameters(), *decoder.parameters()], lr=schedule.lr)
    device = next(model.parameters()).device
    n, size = len(public), min(schedule.aggregate_size, len(public))
    model.train()
    losses: list[float] = []
    for step in tqdm(range(schedule.steps), desc="SEER (model + secret decoder)", disable=not progress,
                     leave=False):  # fmt: skip
        chosen = torch.randperm(n, generator=generator)[:size]
        x = shifted(public.x[chosen].float(), schedule.shift, generator)
        x = tweak_batch(x, threshold, schedule.prop, generator).to(device)
        y = public.y[chosen].to(device)
        decoded = decoder(summed_gradient(model, info, x, y, create_graph=True))
        loss = (decoded[0] - x[0]).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 100 == 0 or step == schedule.steps - 1:
            losses.append(loss.item())
    return losses
