"""MNIST and Fashion-MNIST from their IDX files (gzipped or not)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from leakshield.data.files import locate
from leakshield.data.registry import DATASETS, DatasetParams, RawDataset
from leakshield.data.transforms import to_float_images
from leakshield.data.types import ImageSet
from leakshield.errors import DataFileMissingError

IDX_FILES = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
]
FASHION_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (magic: two zero bytes, dtype code 0x08 = uint8, number of dims)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        data = handle.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise DataFileMissingError(f"{path}: not an unsigned-byte IDX file (bad magic number)")
    ndim = data[3]
    dims = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    offset = 4 + 4 * ndim
    count = int(np.prod(dims))
    if len(data) - offset != count:
        raise DataFileMissingError(f"{path}: truncated IDX file ({len(data) - offset} of {count} bytes)")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


def load_idx_dataset(
    name: str,
    root: Path | None,
    subfolders: tuple[str, ...],
    source: str,
    class_names: tuple[str, ...],
    mirror_keeps_class: bool = True,
) -> RawDataset:
    files = locate(name, root, IDX_FILES, subfolders=subfolders, source=source, suffixes=("", ".gz"))
    train_x, train_y, test_x, test_y = (read_idx(p) for p in files)
    return RawDataset(
        train=ImageSet(to_float_images(train_x), torch.from_numpy(train_y.astype(np.int64))),
        test=ImageSet(to_float_images(test_x), torch.from_numpy(test_y.astype(np.int64))),
        num_classes=10,
        class_names=class_names,
        mirror_keeps_class=mirror_keeps_class,
    )


@DATASETS.register(
    "mnist",
    summary="MNIST from the four IDX files (gzipped or not) under --data-root",
    reference="LeCun et al., Gradient-based learning applied to document recognition (1998)",
    params=DatasetParams,
)
def load_mnist(params: DatasetParams, root: Path | None = None) -> RawDataset:
    return load_idx_dataset(
        "mnist",
        root,
        ("MNIST/raw", "mnist", "raw"),
        "the MNIST site (train/t10k images and labels)",
        tuple(str(d) for d in range(10)),
        mirror_keeps_class=False,  # a mirrored 2 or 7 is no digit
    )


@DATASETS.register(
    "fashion-mnist",
    summary="Fashion-MNIST from the four IDX files (gzipped or not) under --data-root",
    reference="Xiao et al., Fashion-MNIST (2017)",
    params=DatasetParams,
)
def load_fashion_mnist(params: DatasetParams, root: Path | None = None) -> RawDataset:
    return load_idx_dataset(
        "fashion-mnist",
        root,
        ("FashionMNIST/raw", "fashion-mnist", "raw"),
        "the Fashion-MNIST repository (zalandoresearch/fashion-mnist, data/fashion)",
        FASHION_CLASSES,
    )
