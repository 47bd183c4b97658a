"""A small class-conditional denoising diffusion model (DDPM: Ho, Jain & Abbeel, NeurIPS 2020) for
images of a few dozen pixels, trained on the public split in minutes on a CPU.

- The forward process q(x_t | x_0) = N(√ᾱ_t·x_0, (1 − ᾱ_t)·I) on pixels scaled to [−1, 1], with the
  cosine schedule of Nichol & Dhariwal (ICML 2021, Eq. 17) over ``timesteps`` steps.
- The network ε_θ(x_t, t, y) predicts the noise (Ho et al. Eq. 14's simple loss): a two-scale
  convolutional U-Net whose blocks are shifted and scaled by an embedding of t and of the label.
- :func:`sample` runs the ancestral sampler (Ho et al. Algorithm 2) from step ``start`` down to 0; from
  pure noise it draws an image of the label, from a noised image it is SDEdit (Meng et al., ICLR 2022):
  the denoiser keeps what the image shares with the data and replaces the rest; with a guidance loss it
  is diffusion posterior sampling (Chung et al., ICLR 2023).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F
from tqdm.auto import tqdm

__all__ = ["Denoiser", "cosine_alphas_bar", "sample", "train_denoiser"]


def cosine_alphas_bar(timesteps: int) -> torch.Tensor:
    """ᾱ_t for t = 1…T (Nichol & Dhariwal Eq. 17, s = 0.008, β clipped at 0.999)."""
    s = 0.008
    t = torch.arange(timesteps + 1, dtype=torch.float64) / timesteps
    f = torch.cos((t + s) / (1 + s) * math.pi / 2) ** 2
    betas = (1 - f[1:] / f[:-1]).clamp(max=0.999)
    return torch.cumprod(1 - betas, dim=0).float()


class _Block(nn.Module):
    """Two 3×3 convolutions with group norm and SiLU, shifted and scaled by the embedding (FiLM), and a
    residual connection."""

    def __init__(self, inputs: int, outputs: int, embedding: int) -> None:
        super().__init__()
        self.first = nn.Conv2d(inputs, outputs, 3, padding=1)
        self.second = nn.Conv2d(outputs, outputs, 3, padding=1)
        self.norm1 = nn.GroupNorm(min(8, outputs), outputs)
        self.norm2 = nn.GroupNorm(min(8, outputs), outputs)
        self.film = nn.Linear(embedding, 2 * outputs)
        self.skip = nn.Conv2d(inputs, outputs, 1) if inputs != outputs else nn.Identity()

    def forward(self, x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.norm1(self.first(x)))
        scale, shift = self.film(e)[:, :, None, None].chunk(2, dim=1)
        h = F.silu(self.norm2(self.second(h)) * (1 + scale) + shift)
        return h + self.skip(x)


class Denoiser(nn.Module):
    """ε_θ(x_t, t, y): a U-Net of two scales (``width`` and 2·``width`` channels) for ``channels``-channel
    images of even side, conditioned on the step t (sinusoidal) and the label y (learned)."""

    def __init__(self, channels: int, classes: int, width: int = 32) -> None:
        super().__init__()
        self.embedding = 4 * width
        self.time = nn.Sequential(
            nn.Linear(width, self.embedding), nn.SiLU(), nn.Linear(self.embedding, self.embedding)
        )
        self.label = nn.Embedding(classes, self.embedding)
        self.width = width
        self.inp = nn.Conv2d(channels, width, 3, padding=1)
        self.down = _Block(width, width, self.embedding)
        self.pool = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.mid = _Block(2 * width, 2 * width, self.embedding)
        self.up = nn.ConvTranspose2d(2 * width, width, 4, stride=2, padding=1)
        self.out_block = _Block(2 * width, width, self.embedding)
        self.out = nn.Conv2d(width, channels, 3, padding=1)

    def _time(self, t: torch.Tensor) -> torch.Tensor:
        half = self.width // 2
        freqs = torch.exp(-math.log(10_000) * torch.arange(half, device=t.device) / max(half - 1, 1))
        angles = t.float()[:, None] * freqs[None]
        return self.time(torch.cat([angles.sin(), angles.cos()], dim=1))

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        e = self._time(t) + self.label(y)
        h0 = self.down(self.inp(x), e)
        h1 = self.mid(self.pool(h0), e)
        h = self.out_block(torch.cat([self.up(h1), h0], dim=1), e)
        return self.out(h)


def train_denoiser(
    images: torch.Tensor,
    labels: torch.Tensor,
    classes: int,
    *,
    timesteps: int,
    steps: int,
    batch: int,
    lr: float,
    width: int,
    seed: int,
    progress: bool = False,
) -> tuple[Denoiser, dict[str, float]]:
    """Fit ε_θ on ``images`` (N×C×H×W in [0, 1]) by Adam on Ho et al.'s simple loss; returns it in eval
    mode with ``loss`` (the mean of the last tenth of steps) and ``seconds``."""
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        torch.manual_seed(seed)
        model = Denoiser(images.shape[1], classes, width)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    alphas_bar = cosine_alphas_bar(timesteps)
    generator = torch.Generator().manual_seed(seed)
    x0_all, y_all = images * 2 - 1, labels.long()
    losses = []
    for _ in tqdm(range(steps), desc="diffusion prior", disable=not progress, leave=False):
        rows = torch.randint(0, len(images), (batch,), generator=generator)
        x0, y = x0_all[rows], y_all[rows]
        t = torch.randint(0, timesteps, (batch,), generator=generator)
        noise = torch.randn(x0.shape, generator=generator)
        a = alphas_bar[t][:, None, None, None]
        loss = F.mse_loss(model(a.sqrt() * x0 + (1 - a).sqrt() * noise, t, y), noise)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    tail = losses[-max(1, steps // 10) :]
    return model.eval(), {"loss": sum(tail) / len(tail), "seconds": time.perf_counter() - start}


#: the guidance's loss of a batch of denoised estimates x̂₀ (pixels in [0, 1]): a scalar to descend
Guidance = Callable[[torch.Tensor], torch.Tensor]


def sample(
    model: Denoiser,
    labels: torch.Tensor,
    timesteps: int,
    *,
    size: tuple[int, int],
    generator: torch.Generator,
    images: torch.Tensor | None = None,
    start: int | None = None,
    guidance: Guidance | None = None,
    scale: float = 0.0,
) -> torch.Tensor:
    """Ancestral sampling (Ho et al. Algorithm 2, σ_t² = β_t, the mean through x̂₀ clipped to [−1, 1]) of
    one ``size`` image per label, in
    [0, 1]: from noise at step T (``images`` None), or SDEdit from ``images`` (N×C×H×W in [0, 1])
    noised to step ``start`` (1…T). With ``guidance``, each step also moves x_t down the gradient of the
    guidance's loss at the denoised estimate x̂₀ = (x_t − √(1 − ᾱ_t)·ε_θ) / √ᾱ_t (diffusion posterior
    sampling, Chung et al., ICLR 2023, Algorithm 1), by a step normalised to ``scale`` per pixel (RMS,
    in the [−1, 1] units the model works in)."""
    alphas_bar = cosine_alphas_bar(timesteps)
    alphas = alphas_bar / torch.cat([torch.ones(1), alphas_bar[:-1]])
    y = labels.long().cpu()
    shape = (len(y), model.inp.in_channels, *size)
    first = timesteps if images is None or start is None else start
    if not 1 <= first <= timesteps:
        raise ValueError(f"start {first} outside 1…{timesteps}")
    noise = torch.randn(shape, generator=generator)
    if images is None:
        x = noise
    else:
        a = alphas_bar[first - 1]
        x = a.sqrt() * (images.cpu().float() * 2 - 1) + (1 - a).sqrt() * noise
    for i in reversed(range(first)):
        t = torch.full((len(y),), i, dtype=torch.long)
        before = alphas_bar[i - 1] if i > 0 else torch.tensor(1.0)
        steered = guidance is not None and scale > 0
        with torch.set_grad_enabled(steered):
            current = x.detach().requires_grad_(steered)
            eps = model(current, t, y)
            x0 = (current - (1 - alphas_bar[i]).sqrt() * eps) / alphas_bar[i].sqrt()
            step = None
            if steered:  # the guidance sees x̂₀ unclamped: a clamp would zero the gradient of most pixels
                (grad,) = torch.autograd.grad(guidance((x0 + 1) / 2), current)  # type: ignore[misc]
                step = scale * grad * (grad.numel() ** 0.5) / (grad.norm() + 1e-12)
        # the mean of q(x_{t-1} | x_t, x̂₀) with x̂₀ clipped to the data's range (Ho et al. Eq. 7)
        x0 = x0.detach().clamp(-1, 1)
        mean = (before.sqrt() * (1 - alphas[i]) * x0 + alphas[i].sqrt() * (1 - before) * x) / (
            1 - alphas_bar[i]
        )
        x = mean + ((1 - alphas[i]).sqrt() * torch.randn(shape, generator=generator) if i > 0 else 0)
        if step is not None:
            x = x - step
        x = x.detach()
    return ((x + 1) / 2).clamp(0, 1)
