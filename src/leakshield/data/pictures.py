"""Reading picture files (PNG, JPEG, ...) with Pillow into [0, 1] tensors: one place for the square
center crop, the resize and the one-line error that names an unreadable file."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from leakshield.data.types import ImageSet
from leakshield.errors import DataFileMissingError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}


def is_picture(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES


def read_picture(path: Path, size: int, crop: int | None = None) -> np.ndarray:
    """One RGB picture as uint8 H×W×3: optionally center-cropped to a ``crop``-pixel square, then resized
    to ``size``×``size`` (bilinear, Pillow's antialiasing when shrinking)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                rgb = img.convert("RGB")
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise DataFileMissingError(
            f"{path}: over {Image.MAX_IMAGE_PIXELS:,} pixels, refused as a possible decompression bomb"
        ) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:  # SyntaxError: a broken PNG
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise DataFileMissingError(f"{path}: not a readable image ({reason})") from None
    if crop is not None:
        w, h = rgb.size
        side = min(crop, w, h)
        left, top = (w - side) // 2, (h - side) // 2
        rgb = rgb.crop((left, top, left + side, top + side))
    if rgb.size != (size, size):
        rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
    return np.asarray(rgb, dtype=np.uint8)


def read_pictures(paths: Sequence[Path], size: int, crop: int | None = None) -> torch.Tensor:
    """Pictures → float N×3×size×size in [0, 1]."""
    if not paths:
        return torch.zeros(0, 3, size, size)
    stacked = np.stack([read_picture(p, size, crop) for p in paths])
    return torch.from_numpy(stacked).permute(0, 3, 1, 2).float().div_(255.0).contiguous()


def cap_per_class(items: Sequence[tuple[Path, int]], cap: int | None) -> list[tuple[Path, int]]:
    """The first ``cap`` items of every label (in the given order); all of them when ``cap`` is None."""
    if cap is None:
        return list(items)
    counts: dict[int, int] = {}
    kept = []
    for path, label in items:
        if counts.get(label, 0) < cap:
            counts[label] = counts.get(label, 0) + 1
            kept.append((path, label))
    return kept


def labelled_pictures(items: Sequence[tuple[Path, int]], size: int, crop: int | None = None) -> ImageSet:
    """``(path, label)`` pairs → an :class:`~leakshield.data.types.ImageSet`."""
    x = read_pictures([p for p, _ in items], size, crop)
    return ImageSet(x, torch.tensor([label for _, label in items], dtype=torch.long))
