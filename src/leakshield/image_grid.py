"""Image grids (PNG) of truth / defended input / reconstruction, made with Pillow."""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image


def image_grid(rows: Sequence[torch.Tensor], *, scale: int = 2, gap: int = 2) -> Image.Image:
    """Tile batches (each N×C×H×W in [0, 1], same N and shape) as rows of a grid on a white background.

    Each image is magnified ``scale`` times (nearest neighbour) so small images stay readable.
    """
    if not rows:
        raise ValueError("no rows to draw")
    n, c, h, w = rows[0].shape
    hs, ws = h * scale, w * scale
    canvas = np.full((len(rows) * (hs + gap) + gap, n * (ws + gap) + gap, 3), 255, dtype=np.uint8)
    for r, batch in enumerate(rows):
        if batch.shape != rows[0].shape:
            raise ValueError(f"row {r} has shape {tuple(batch.shape)}, expected {tuple(rows[0].shape)}")
        pixels = (batch.detach().float().clamp(0, 1).cpu() * 255).round().to(torch.uint8)
        pixels = pixels.expand(-1, 3, -1, -1) if c == 1 else pixels
        pixels = pixels.repeat_interleave(scale, dim=2).repeat_interleave(scale, dim=3)
        for i in range(n):
            top, left = gap + r * (hs + gap), gap + i * (ws + gap)
            canvas[top : top + hs, left : left + ws] = pixels[i].permute(1, 2, 0).numpy()
    return Image.fromarray(canvas)


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
