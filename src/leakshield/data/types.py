"""Containers for image datasets: tensors in [0, 1], channels first, plus public metadata."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DatasetInfo:
    """Public facts about a dataset (an attacker may know all of them).

    ``mean``/``std`` are per-channel statistics of the training split in [0, 1] pixel space; models see
    ``(x - mean) / std``. ``data_range`` is the range of the un-normalized pixels. ``mirror_keeps_class``:
    whether a horizontal flip keeps an image's class.
    """

    name: str
    shape: tuple[int, int, int]
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    data_range: tuple[float, float] = (0.0, 1.0)
    class_names: tuple[str, ...] = ()
    #: whether a horizontally mirrored image still shows its class (objects, faces: yes; digits: no);
    #: an augmentation that flips reads it (a stated per-dataset choice)
    mirror_keeps_class: bool = True

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """Map [0, 1] pixels to the model's normalized input space."""
        mean, std = self._stats(images)
        return (images - mean) / std

    def denormalize(self, images: torch.Tensor) -> torch.Tensor:
        """Map normalized model inputs back to [0, 1] pixel space (not clamped)."""
        mean, std = self._stats(images)
        return images * std + mean

    def normalized_bounds(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-channel lower and upper bounds of valid images in normalized space (for boxing)."""
        mean, std = self._stats(like)
        lo, hi = self.data_range
        return (lo - mean) / std, (hi - mean) / std

    def _stats(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (1, -1, 1, 1)
        mean = torch.tensor(self.mean, dtype=like.dtype, device=like.device).view(shape)
        std = torch.tensor(self.std, dtype=like.dtype, device=like.device).view(shape)
        return mean, std


@dataclass(frozen=True)
class ImageSet:
    """Images ``x`` (float32, N×C×H×W, in [0, 1]) with integer labels ``y`` (N,) and optional per-sample
    ``sensitive`` flags (N,) bool, the user's marking of which samples need protection (DCS²)."""

    x: torch.Tensor
    y: torch.Tensor
    sensitive: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.x.ndim != 4 or self.y.ndim != 1 or len(self.x) != len(self.y):
            raise ValueError(f"bad ImageSet shapes: x {tuple(self.x.shape)}, y {tuple(self.y.shape)}")
        if self.sensitive is not None and self.sensitive.shape != self.y.shape:
            raise ValueError(f"sensitive flags {tuple(self.sensitive.shape)} for {len(self.y)} samples")

    def __len__(self) -> int:
        return len(self.y)

    def to(self, device: torch.device | str) -> ImageSet:
        """The same samples (and flags) on ``device``."""
        flags = self.sensitive.to(device) if self.sensitive is not None else None
        return ImageSet(self.x.to(device), self.y.to(device), flags)

    def subset(self, indices: torch.Tensor | list[int]) -> ImageSet:
        idx = torch.as_tensor(indices, dtype=torch.long)
        flags = self.sensitive[idx.to(self.sensitive.device)] if self.sensitive is not None else None
        return ImageSet(self.x[idx.to(self.x.device)], self.y[idx.to(self.y.device)], flags)


@dataclass(frozen=True)
class DatasetSplits:
    """What :func:`leakshield.data.load_dataset` returns: disjoint train / test / public splits.

    ``public`` is held out of ``train`` (disjoint) for defenses and attacks that assume public data.
    """

    train: ImageSet
    test: ImageSet
    public: ImageSet
    info: DatasetInfo
