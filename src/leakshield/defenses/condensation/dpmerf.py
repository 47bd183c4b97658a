"""DP-MERF (Harder et al., AISTATS 2021): a generator trained to match a differentially private mean
embedding of the labelled data in random Fourier features.

Embedding (Sec. 3): φ(x) = [cos(Wx), sin(Wx)]/√(D/2) with the D/2 rows of W drawn from N(0, I/ℓ²)
(ℓ: the median pairwise distance of the data, the usual heuristic, or given), so ‖φ(x)‖ = 1; the
labelled embedding is μ = (1/m) Σ_i φ(x_i) y_iᵀ (a D × K matrix, y one-hot). Replacing one record moves
μ by at most 2/m in Frobenius norm: μ̃ = μ + N(0, (σ·2/m)²) is (ε, δ)-DP with σ the smallest noise
multiplier whose single release meets (ε, δ) under the RDP accountant (Opacus's, the one DP-SGD uses).
Everything after the release is post-processing: the generator G(z, y) minimizes
‖(1/n) Σ_j φ(G(z_j, y_j)) y_jᵀ − μ̃‖², labels drawn in the client's class proportions (treated as
public, as the class of every minibatch image is in FL; DP-MERF releases them noisily instead).
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from leakshield.data.types import DatasetInfo, ImageSet


def noise_multiplier(epsilon: float, delta: float) -> float:
    """σ of one Gaussian release with (ε, δ) by the RDP accountant (sampling rate 1, one step)."""
    from opacus.accountants.utils import get_noise_multiplier

    with warnings.catch_warnings():  # "optimal order is the largest alpha": a single release, expected
        warnings.simplefilter("ignore", UserWarning)
        sigma = get_noise_multiplier(
            target_epsilon=epsilon, target_delta=delta, sample_rate=1.0, steps=1, epsilon_tolerance=0.005
        )
    return float(sigma)


def release_epsilon(sigma: float, delta: float) -> float:
    """ε of one Gaussian release of noise multiplier σ at δ (the RDP accountant DP-SGD uses)."""
    from leakshield.defenses.dpsgd import dp_epsilon

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return dp_epsilon(sigma, 1.0, 1, delta)


def gaussian_release(
    clean: torch.Tensor, sensitivity: float, sigma: float, gen: torch.Generator
) -> tuple[torch.Tensor, float]:
    """The Gaussian mechanism: μ̃ = μ + N(0, (σ·Δ)²) for ``clean`` μ of L2 ``sensitivity`` Δ, and the
    noise multiplier actually applied, measured on the draw (std(μ̃ − μ)/Δ ≈ σ; 0 if nothing was added)."""
    noisy = clean + torch.randn(clean.shape, generator=gen).to(clean.device) * (sigma * sensitivity)
    applied = float((noisy - clean).double().std()) / sensitivity if clean.numel() > 1 else sigma
    return noisy, applied


class FourierFeatures(nn.Module):
    """φ: images → D unit-norm random Fourier features (D even)."""

    def __init__(self, dim_in: int, features: int, lengthscale: float, gen: torch.Generator) -> None:
        super().__init__()
        self.register_buffer("W", torch.randn(dim_in, features // 2, generator=gen) / lengthscale)
        self.scale = (features // 2) ** -0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        proj = x.flatten(1) @ self.W
        return torch.cat([proj.cos(), proj.sin()], dim=1) * self.scale


def median_distance(x: torch.Tensor, gen: torch.Generator, pairs: int = 2000) -> float:
    """The median Euclidean distance between random pairs of images (the lengthscale heuristic)."""
    flat = x.flatten(1)
    i = torch.randint(len(flat), (pairs,), generator=gen).to(flat.device)
    j = torch.randint(len(flat), (pairs,), generator=gen).to(flat.device)
    return float((flat[i] - flat[j]).norm(dim=1).median().clamp_min(1e-3))


def labelled_embedding(phi: FourierFeatures, data: ImageSet, classes: int, chunk: int = 512) -> torch.Tensor:
    """μ = (1/m) Σ_i φ(x_i) y_iᵀ, computed in chunks."""
    total = None
    for start in range(0, len(data), chunk):
        x, y = data.x[start : start + chunk], data.y[start : start + chunk]
        part = phi(x).T @ nn.functional.one_hot(y, classes).to(x.dtype)
        total = part if total is None else total + part
    assert total is not None
    return total / len(data)


class FeatureGenerator(nn.Module):
    """DP-MERF's fully connected generator: (code z ⊕ one-hot y) → ``hidden`` ReLU layers with batch
    norm → pixels through a sigmoid."""

    def __init__(self, info: DatasetInfo, code: int = 5, hidden: tuple[int, ...] = (200, 500)) -> None:
        super().__init__()
        self.code, self.classes, self.shape = code, info.num_classes, info.shape
        layers: list[nn.Module] = []
        width = code + info.num_classes
        for h in hidden:
            layers += [nn.Linear(width, h), nn.BatchNorm1d(h), nn.ReLU()]
            width = h
        layers += [nn.Linear(width, int(torch.tensor(info.shape).prod())), nn.Sigmoid()]
        self.net = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        onehot = nn.functional.one_hot(y, self.classes).to(z.dtype)
        return self.net(torch.cat([z, onehot], dim=1)).view(len(z), *self.shape)
