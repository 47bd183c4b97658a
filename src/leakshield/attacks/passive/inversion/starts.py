"""Where an optimization attack starts: random (Gaussian or uniform in normalized space), CPL's
patterned start, constant grey, or given images (a .png or .npy file, or tensors handed over in code,
e.g. a public class-average prior)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from leakshield.data.types import DatasetInfo
from leakshield.errors import ConfigError


def initial_images(
    kind: str,
    n: int,
    info: DatasetInfo,
    gen: torch.Generator,
    *,
    images: torch.Tensor | None = None,
    image_file: str | None = None,
) -> torch.Tensor:
    """``n`` starting images in the model's normalized input space. ``kind``: ``randn``, ``uniform``,
    ``patterned`` (CPL: a random half-size patch tiled 2×2), ``constant`` (mid-grey) or ``image``
    (``images`` N×C×H×W in [0, 1], else ``image_file``)."""
    shape = info.shape
    if kind == "uniform":
        return torch.rand(n, *shape, generator=gen) * 2 - 1
    if kind == "patterned":
        c, h, w = shape
        patch = torch.rand(n, c, (h + 1) // 2, (w + 1) // 2, generator=gen)
        return info.normalize(patch.repeat(1, 1, 2, 2)[:, :, :h, :w])
    if kind == "constant":
        return info.normalize(torch.full((n, *shape), 0.5))
    if kind == "image":
        return info.normalize(start_images(n, shape, images, image_file))
    return torch.randn(n, *shape, generator=gen)


def start_images(
    n: int, shape: tuple[int, int, int], images: torch.Tensor | None, image_file: str | None
) -> torch.Tensor:
    """``n`` images of ``shape`` in [0, 1] from ``images`` or ``image_file``: resized bilinearly, channels
    averaged or repeated to fit, cycled to fill the batch."""
    if images is None:
        if image_file is None:
            raise ConfigError("init: 'image' needs init_image (a .png or .npy file) or init_images")
        images = load_image_file(Path(image_file).expanduser(), shape)
    images = images.float()
    if images.ndim == 3:
        images = images.unsqueeze(0)
    images = F.interpolate(images, size=shape[1:], mode="bilinear", align_corners=False)
    if images.shape[1] != shape[0]:
        images = images.mean(dim=1, keepdim=True).expand(-1, shape[0], -1, -1)
    return images.clamp(0, 1).repeat(math.ceil(n / len(images)), 1, 1, 1)[:n]


def load_image_file(path: Path, shape: tuple[int, int, int]) -> torch.Tensor:
    """Images in [0, 1] (N×C×H×W) from a .npy file (uint8 or float, N×H×W×C or N×C×H×W) or a picture."""
    if path.suffix == ".npy":
        array = np.load(path, allow_pickle=False)
        tensor = torch.from_numpy(np.array(array, dtype=np.float32))
        if array.dtype == np.uint8:
            tensor = tensor / 255.0
        if tensor.ndim == 3:
            tensor = tensor.unsqueeze(0)
        if tensor.shape[-1] in (1, 3) and tensor.shape[1] not in (1, 3):
            tensor = tensor.permute(0, 3, 1, 2)
        return tensor
    from PIL import Image

    with Image.open(path) as img:
        mode = "L" if shape[0] == 1 else "RGB"
        array = np.asarray(img.convert(mode), dtype=np.float32) / 255.0
    tensor = torch.from_numpy(array)
    return tensor.unsqueeze(0).unsqueeze(0) if tensor.ndim == 2 else tensor.permute(2, 0, 1).unsqueeze(0)
