"""The embedded default dataset: scikit-learn's bundled 8×8 handwritten digits (no download)."""

from __future__ import annotations

from pathlib import Path

import torch
from sklearn.datasets import load_digits

from leakshield.data.registry import DATASETS, DatasetParams, RawDataset
from leakshield.data.transforms import resize_images
from leakshield.data.types import ImageSet
from leakshield.errors import ConfigError


@DATASETS.register(
    "digits",
    summary="scikit-learn's bundled 1797 handwritten digits (8×8, 10 classes), embedded, resized",
    reference="Alpaydin & Kaynak, UCI Optical Recognition of Handwritten Digits (1998)",
    params=DatasetParams,
)
def load_digits_dataset(params: DatasetParams, root: Path | None = None) -> RawDataset:
    """Digits scaled from 0..16 to [0, 1]; default size 32×32 by bilinear interpolation, 1 channel."""
    if root is not None:  # a data root given for the embedded set is a mistake, not a silent no-op
        raise ConfigError(f"dataset.root {root}: digits is embedded (scikit-learn) and reads no files; "
                          "drop the root (--data-root) or name a dataset that reads them "
                          "(leakshield list datasets)")  # fmt: skip
    bunch = load_digits()
    x = torch.from_numpy(bunch.images).float().div_(16.0).unsqueeze(1)
    x = resize_images(x, params.size or 32)
    y = torch.from_numpy(bunch.target).long()
    return RawDataset(
        train=ImageSet(x, y),
        test=None,
        num_classes=10,
        class_names=tuple(str(d) for d in range(10)),
        mirror_keeps_class=False,  # a mirrored 2 or 7 is no digit
    )
