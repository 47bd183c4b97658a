"""The learned inverter of Wu, Chen, Guo & Weinberger, *Learning to Invert: Simple Adaptive Attacks for
Gradient Inversion in Federated Learning*, UAI 2023: a network f trained on public pairs to map the
*defended* update g̃ = D(∇ℓ(x)) to the input x, minimising E‖f(g̃) − x‖² (their Eq. 2). The defense's
distortion is in the training pairs (:mod:`.pairs`), so it is learned rather than fought; the
reconstruction is one forward pass.

The network: the sketched update and the sorted label block, standardised per feature over the
training pairs, through an MLP (two hidden layers of ``hidden`` ReLU units; the paper's is three of
1,000–3,000) to B×C×H×W pixels through a sigmoid, one image per victim sample in label order.
"""

from __future__ import annotations

import math
import time

import torch
from torch import nn

from leakshield.attacks.learned.pairs import TrainingPairs

__all__ = ["InverterMLP", "train_inverter"]


class InverterMLP(nn.Module):
    """f: features (N×F) → images (N×B×C×H×W) in [0, 1]; ``mean`` / ``scale`` standardise the input."""

    def __init__(self, features: int, shape: tuple[int, int, int, int], hidden: int) -> None:
        super().__init__()
        self.shape = shape
        out = math.prod(shape)
        self.register_buffer("mean", torch.zeros(features))
        self.register_buffer("scale", torch.ones(features))
        self.net = nn.Sequential(
            nn.Linear(features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, out),
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        z = (features - self.mean) / self.scale
        return torch.sigmoid(self.net(z)).reshape(len(features), *self.shape)


def train_inverter(
    pairs: TrainingPairs, *, hidden: int, epochs: int, batch: int, lr: float, seed: int
) -> tuple[InverterMLP, dict[str, float]]:
    """Fit f on ``pairs`` by Adam on the pixel MSE (a tenth held out: its final MSE is reported as
    ``heldout_mse``, beside ``train_mse`` and the ``train_seconds``)."""
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        torch.manual_seed(seed)
        f, train, held = _fit(pairs, hidden=hidden, epochs=epochs, batch=batch, lr=lr, seed=seed)
    with torch.no_grad():
        x, y = pairs.inputs[train], pairs.images[train]
        train_mse = float(nn.functional.mse_loss(f(x), y))
        heldout = (
            float(nn.functional.mse_loss(f(pairs.inputs[held]), pairs.images[held]))
            if len(held)
            else math.nan
        )
    return f, {"train_mse": train_mse, "heldout_mse": heldout, "train_seconds": time.perf_counter() - start}


def _fit(
    pairs: TrainingPairs, *, hidden: int, epochs: int, batch: int, lr: float, seed: int
) -> tuple[InverterMLP, torch.Tensor, torch.Tensor]:
    n = len(pairs.inputs)
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(n, generator=generator)
    held = order[: max(1, n // 10)] if n >= 10 else order[:0]
    train = order[len(held) :]
    x, y = pairs.inputs[train], pairs.images[train]
    f = InverterMLP(x.shape[1], tuple(pairs.images.shape[1:]), hidden)  # type: ignore[arg-type]
    f.mean.copy_(x.mean(dim=0))
    # a feature constant over the pairs (a label never drawn at a position) is left unscaled: dividing
    # by its zero spread would blow up any victim where it differs
    spread = x.std(dim=0) if len(x) > 1 else torch.zeros(x.shape[1])
    f.scale.copy_(torch.where(spread > 1e-6, spread, torch.ones_like(spread)))
    optimizer = torch.optim.Adam(f.parameters(), lr=lr)
    for _ in range(epochs):
        for rows in torch.randperm(len(x), generator=generator).split(batch):
            loss = nn.functional.mse_loss(f(x[rows]), y[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return f.eval(), train, held
