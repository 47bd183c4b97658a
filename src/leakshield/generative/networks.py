"""DCGAN-style conditional generator and discriminator (Radford et al., ICLR 2016; Mirza & Osindero,
2014), laid out as in Anti-GAN's appendix (Luo & Zhang, TKDD 2025, Tables 4 and 5) and sized for any
square image of 8 pixels or more.

Generator (Table 4): z ∈ R^100 concatenated with a 10-d label embedding → ConvTranspose 4×4 to 4×4 maps
→ (ConvTranspose 4×4 stride 2, BatchNorm, ReLU) doubling the side → ConvTranspose to the image channels →
tanh. The paper's 32×32 widths are 256-128-64 (``width`` 64); the side grows 4 → 8 → 16 → 32, and other
sizes take one doubling more or less, a side that is not a power of two being cropped at the centre.

Discriminator (Table 5): the input maps (images, or Anti-GAN's feature maps C(x)) concatenated with a
label embedding broadcast to as many maps → (Conv 4×4 stride 2, InstanceNorm, LeakyReLU 0.2) with widths
128-256-512 while the side is at least 8 → a final convolution over the remaining side → one logit.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn


class ConditionalGenerator(nn.Module):
    """G(z | y): latent (N, ``latent_dim``) and labels (N,) → images (N, C, size, size) in [0, 1] pixels
    (the tanh output t mapped by (t + 1) / 2). ``width``: channels of the last hidden layer (the paper's
    64); the layers before it double it."""

    def __init__(
        self,
        channels: int,
        size: int,
        num_classes: int,
        *,
        latent_dim: int = 100,
        embed_dim: int = 10,
        width: int = 64,
    ) -> None:
        super().__init__()
        if size < 8:
            raise ValueError(f"generator: images of at least 8×8 pixels, got {size}")
        self.latent_dim, self.size, self.channels, self.num_classes = latent_dim, size, channels, num_classes
        ups = max(1, math.ceil(math.log2(size / 4)))
        widths = [width * 2 ** (ups - 1 - i) for i in range(ups)]
        self.embed = nn.Embedding(num_classes, embed_dim)
        layers: list[nn.Module] = [
            nn.ConvTranspose2d(latent_dim + embed_dim, widths[0], 4, 1, 0, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(),
        ]
        for cin, cout in itertools.pairwise(widths):
            layers += [nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
        layers += [nn.ConvTranspose2d(widths[-1], channels, 4, 2, 1), nn.Tanh()]
        self.net = nn.Sequential(*layers)
        self.out_size = 4 * 2**ups

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = torch.cat([z, self.embed(y)], dim=1)[:, :, None, None]
        out = self.net(h)
        if self.out_size != self.size:
            top = (self.out_size - self.size) // 2
            out = out[:, :, top : top + self.size, top : top + self.size]
        return (out + 1) / 2

    def latent(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """n standard-normal latent vectors on the generator's device."""
        device = self.embed.weight.device
        gen_device = generator.device if generator is not None else device
        return torch.randn(n, self.latent_dim, generator=generator, device=gen_device).to(device)


class ConditionalDiscriminator(nn.Module):
    """D(x | y): maps (N, ``in_channels``, size, size) and labels (N,) → real/fake logits (N,). The label
    is embedded into ``label_channels`` maps (default: as many as the input has, Table 5's 64 + 64)."""

    def __init__(
        self,
        in_channels: int,
        size: int,
        num_classes: int,
        *,
        label_channels: int | None = None,
        widths: tuple[int, ...] = (128, 256, 512),
    ) -> None:
        super().__init__()
        if size < 4:
            raise ValueError(f"discriminator: maps of at least 4×4, got {size}")
        self.size = size
        label_channels = label_channels or in_channels
        self.embed = nn.Embedding(num_classes, label_channels)
        layers: list[nn.Module] = []
        cin, side, i = in_channels + label_channels, size, 0
        while side >= 8:
            cout = widths[min(i, len(widths) - 1)]
            layers += [nn.Conv2d(cin, cout, 4, 2, 1), nn.InstanceNorm2d(cout, affine=True), nn.LeakyReLU(0.2)]
            cin, side, i = cout, side // 2, i + 1
        layers.append(nn.Conv2d(cin, 1, side, 1, 0))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        labels = self.embed(y)[:, :, None, None].expand(-1, -1, x.shape[2], x.shape[3])
        return self.net(torch.cat([x, labels], dim=1)).flatten()
