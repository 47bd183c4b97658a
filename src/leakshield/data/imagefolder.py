"""A folder of class sub-folders of images, read with Pillow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from leakshield.data.registry import DATASETS, DatasetParams, RawDataset
from leakshield.data.types import ImageSet
from leakshield.errors import DataFileMissingError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}


def read_class_folders(folder: Path, classes: list[str], size: int) -> ImageSet:
    images, labels = [], []
    for label, cls in enumerate(classes):
        cls_dir = folder / cls
        files = (
            sorted(p for p in cls_dir.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
            if cls_dir.is_dir()
            else []
        )
        for path in files:
            with Image.open(path) as img:
                rgb = img.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
                images.append(np.asarray(rgb, dtype=np.uint8))
            labels.append(label)
    if not images:
        raise DataFileMissingError(
            f"imagefolder: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in the class folders of {folder}"
        )
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float().div_(255.0)
    return ImageSet(x.contiguous(), torch.tensor(labels, dtype=torch.long))


@DATASETS.register(
    "imagefolder",
    summary="ROOT/<class>/*.png|jpg (or ROOT/train/<class>, ROOT/test/<class>), RGB, resized",
    reference="the torchvision ImageFolder layout",
    params=DatasetParams,
)
def load_imagefolder(params: DatasetParams, root: Path | None = None) -> RawDataset:
    """Classes are the sorted sub-folder names; images are resized to ``size`` (default 32) with Pillow."""
    if root is None or not root.is_dir():
        raise DataFileMissingError(
            f"imagefolder: data root {root} is not a folder; expected ROOT/<class>/<image> "
            "(or ROOT/train/<class> and ROOT/test/<class>); leakshield never downloads data"
        )
    size = params.size or 32
    split = (root / "train").is_dir() and (root / "test").is_dir()
    base = root / "train" if split else root
    classes = sorted(p.name for p in base.iterdir() if p.is_dir())
    if not classes:
        raise DataFileMissingError(f"imagefolder: no class sub-folders in {base}")
    train = read_class_folders(base, classes, size)
    test = read_class_folders(root / "test", classes, size) if split else None
    return RawDataset(train=train, test=test, num_classes=len(classes), class_names=tuple(classes))
