"""The parts of FedLeak's released code (Fan et al., USENIX Security 2025; the Zenodo release, read in
its ``generator.py``, ``utils.py`` and ``layers/norm.py``) that the pixel port lacked: the image
generator it optimizes instead of pixels, its double optimizer step, and the median filter on its output.

* :class:`FedLeakGenerator` — a randomly initialized, untrained progressive generator (a deep image
  prior): a fixed Gaussian code per image (128 dims) → a 4×4 transposed convolution → per resolution
  4, 8, 16, … a block of two spectrally normalized 3×3 convolutions, each followed by BatchNorm (batch
  statistics: the generator stays in train mode) and LeakyReLU(0.1), with a nearest-neighbour ×2
  upsampling before every block after the first → a 1×1 convolution → sigmoid. The width is 256 up to
  32 px, halved at 64 px and quartered from 128 px on (the release builds 32, 64, 128 and 256 px; other
  sizes are leakshield's: from 4 px up, a non-power-of-two size generated at the next power of two and
  area-resized, and any channel count).
* :func:`released_search` — each step takes the signed gradient of the objective with respect to the
  searched tensors (the generator's parameters, or the pixels) and makes one optimizer step to a
  look-ahead point; there the signed gradient is taken again, the tensors are put back, and a second
  step of the same optimizer is made along (1 − λ)·sign g(here) + λ·sign g(look-ahead). The optimizer's
  moments thus see two gradients per step (AdamW's step count rises by two); the schedule advances once.
* :func:`median_filter` — a k×k median over a reflect-padded window (stride 1, the same size out);
  the release filters its final images once with k = 5.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from leakshield.attacks.passive.inversion.loops import Restart, lr_scheduler
from leakshield.attacks.passive.inversion.params import GradientInversionParams

#: x (normalized images) → (objective incl. priors, gradient distance)
ImageObjective = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class SpectralConv2d(nn.Conv2d):
    """A convolution whose weight is divided by its largest singular value, estimated by one power
    iteration per forward pass (the estimate's vector kept and updated in train mode), as the release's
    BigGAN-style ``SNConv2d``; the gradient flows through the weight, not the power iteration."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, padding: int = 0) -> None:
        super().__init__(in_channels, out_channels, kernel_size, padding=padding)
        self.register_buffer("u", torch.randn(1, out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight.flatten(1)
        with torch.no_grad():
            v = F.normalize(self.u @ w, dim=1, eps=1e-12)
            u = F.normalize(v @ w.t(), dim=1, eps=1e-12)
            if self.training:
                self.u.copy_(u)
        sigma = (v @ w.t() @ u.t()).squeeze()
        return F.conv2d(x, self.weight / sigma, self.bias, self.stride, self.padding)


def _block(cin: int, cout: int) -> nn.Sequential:
    """Two spectrally normalized 3×3 convolutions, each followed by BatchNorm and LeakyReLU(0.1)."""
    return nn.Sequential(
        SpectralConv2d(cin, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.LeakyReLU(0.1, inplace=False),
        SpectralConv2d(cout, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.LeakyReLU(0.1, inplace=False),
    )


def stage_width(resolution: int, width: int) -> int:
    """The release's channels at a resolution: the full width up to 32 px, half at 64, a quarter beyond."""
    if resolution <= 32:
        return width
    return width // 2 if resolution == 64 else width // 4


class FedLeakGenerator(nn.Module):
    """The release's image generator (module docstring): codes N×``latent`` → images N×C×H×W in (0, 1)."""

    def __init__(self, shape: Sequence[int], *, width: int = 256, latent: int = 128) -> None:
        super().__init__()
        channels, height, wide = (int(s) for s in shape)
        if min(height, wide) < 1 or width < 4:
            raise ValueError(f"a generator needs an image size ≥ 1 and a width ≥ 4, not {shape}, {width}")
        self.shape, self.latent = (channels, height, wide), latent
        self.resolution = max(4, 2 ** math.ceil(math.log2(max(height, wide))))
        self.stem = nn.Sequential(
            nn.ConvTranspose2d(latent, width, 4, 1, 0),
            nn.BatchNorm2d(width),
            nn.LeakyReLU(0.1, inplace=False),
        )
        blocks, res, cin = [], 4, width
        while res <= self.resolution:
            cout = stage_width(res, width)
            blocks.append(_block(cin, cout))
            res, cin = res * 2, cout
        self.blocks = nn.ModuleList(blocks)
        self.to_image = nn.Conv2d(cin, channels, 1)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        out = self.blocks[0](self.stem(codes.view(-1, self.latent, 1, 1)))
        for block in self.blocks[1:]:
            out = block(F.interpolate(out, scale_factor=2, mode="nearest"))
        out = torch.sigmoid(self.to_image(out))
        if out.shape[-2:] != self.shape[1:]:
            out = F.interpolate(out, size=self.shape[1:], mode="area")  # leakshield's: sizes not 2^k
        return out


def median_filter(images: torch.Tensor, size: int) -> torch.Tensor:
    """Each pixel replaced by the median of the size×size window around it (reflect padding; stride 1;
    ``size`` ≤ 1 returns the images unchanged)."""
    if size <= 1:
        return images
    if size % 2 == 0:
        raise ValueError(f"median_filter: an odd window, not {size}")
    pad = size // 2
    mode = "reflect" if pad < min(images.shape[-2:]) else "replicate"
    padded = F.pad(images, (pad, pad, pad, pad), mode=mode)
    windows = padded.unfold(2, size, 1).unfold(3, size, 1)
    return windows.reshape(*windows.shape[:4], -1).median(dim=-1).values


def make_optimizer(tensors: list[torch.Tensor], p: GradientInversionParams) -> torch.optim.Optimizer:
    """AdamW (the release's: decoupled weight decay ``weight_decay``), Adam or SGD with momentum."""
    name, decay = p.optimizer, float(getattr(p, "weight_decay", 0.0))
    if name == "adamw":
        return torch.optim.AdamW(tensors, lr=p.lr, weight_decay=decay)
    if name == "adam":
        return torch.optim.Adam(tensors, lr=p.lr)
    return torch.optim.SGD(tensors, lr=p.lr, momentum=p.momentum)


def _signed_gradients(
    objective: ImageObjective, render: Callable[[], torch.Tensor], tensors: list[torch.Tensor]
) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
    """The signs of the objective's gradients w.r.t. ``tensors`` at ``render()``; the objective, the
    gradient distance and the images there (detached)."""
    x = render()
    loss, distance = objective(x)
    grads = torch.autograd.grad(loss, tensors)
    return [g.sign() for g in grads], loss.detach(), distance.detach(), x.detach()


def released_search(
    p: GradientInversionParams,
    tensors: list[torch.Tensor],
    render: Callable[[], torch.Tensor],
    objective: ImageObjective,
    *,
    regularization: float,
    box: Callable[[], None] | None = None,
) -> Restart:
    """One restart of the release's loop (module docstring) over ``tensors`` (leaves that require grad),
    ``render()`` mapping them to normalized images; ``box`` (pixels) clamps after every step. Returns the
    rendered images with the lowest objective seen (the engine's rule; the release keeps its last) and
    their gradient distance."""
    opt = make_optimizer(tensors, p)
    schedule = lr_scheduler(opt, p)
    best_loss, best = math.inf, Restart(render().detach().clone(), None, math.inf)

    def remember(loss: torch.Tensor, distance: torch.Tensor, images: torch.Tensor) -> None:
        nonlocal best_loss, best
        value, score = torch.stack((loss, distance.to(loss.dtype))).tolist()
        if math.isfinite(value) and value < best_loss:
            best_loss, best = value, Restart(images.clone(), None, score)

    for _ in range(p.iterations):
        here, loss, distance, images = _signed_gradients(objective, render, tensors)
        remember(loss, distance, images)
        if not math.isfinite(float(loss)):
            break
        step = here
        if regularization:
            saved = [t.detach().clone() for t in tensors]
            for t, g in zip(tensors, here, strict=True):
                t.grad = g
            opt.step()  # the first step: to the look-ahead point (the optimizer's moments move)
            ahead = _signed_gradients(objective, render, tensors)[0]
            with torch.no_grad():
                for t, s in zip(tensors, saved, strict=True):
                    t.copy_(s)
            step = [(1 - regularization) * h + regularization * a for h, a in zip(here, ahead, strict=True)]
        for t, g in zip(tensors, step, strict=True):
            t.grad = g
        opt.step()  # the second step, from the point it started at
        if schedule is not None:
            schedule.step()
        if box is not None:
            box()
        if best.score < p.tolerance:
            break
    _, loss, distance, images = _signed_gradients(objective, render, tensors)
    remember(loss, distance, images)
    return best
