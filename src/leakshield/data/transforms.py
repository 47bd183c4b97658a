"""Shape conversions shared by the loaders: resizing and channel count."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from leakshield.errors import ConfigError


def to_float_images(array: np.ndarray, scale: float = 255.0) -> torch.Tensor:
    """uint8-like array N×H×W or N×H×W×C (channels last) → float32 tensor N×C×H×W in [0, 1]."""
    tensor = torch.from_numpy(np.array(array, copy=True)).float() / scale
    if tensor.ndim == 3:
        tensor = tensor.unsqueeze(1)
    elif tensor.ndim == 4:
        tensor = tensor.permute(0, 3, 1, 2).contiguous()
    else:
        raise ValueError(f"expected N×H×W or N×H×W×C images, got shape {array.shape}")
    return tensor


def resize_images(images: torch.Tensor, size: int | None) -> torch.Tensor:
    """Bilinear resize (align_corners=False, antialiased when shrinking) to size×size; None keeps it."""
    if size is None or tuple(images.shape[-2:]) == (size, size):
        return images
    shrinking = size < max(images.shape[-2:])
    out = F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False, antialias=shrinking)
    return out.clamp_(0.0, 1.0)


def convert_channels(images: torch.Tensor, channels: int | None) -> torch.Tensor:
    """Grey → RGB by replication, RGB → grey by ITU-R 601 luma; None keeps the native count."""
    have = images.shape[1]
    if channels is None or channels == have:
        return images
    if have == 1 and channels == 3:
        return images.expand(-1, 3, -1, -1).contiguous()
    if have == 3 and channels == 1:
        weights = torch.tensor([0.299, 0.587, 0.114], dtype=images.dtype).view(1, 3, 1, 1)
        return (images * weights).sum(dim=1, keepdim=True)
    raise ConfigError(f"channels: cannot convert {have} channels to {channels}; allowed: 1, 3")
