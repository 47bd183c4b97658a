"""CIFAR-10 and CIFAR-100 from the official *binary* versions (never the pickled Python version)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from leakshield.data.files import locate
from leakshield.data.registry import DATASETS, DatasetParams, RawDataset
from leakshield.data.transforms import to_float_images
from leakshield.data.types import ImageSet
from leakshield.errors import DataFileMissingError

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
PIXELS = 3 * 32 * 32


def read_cifar_binary(paths: list[Path], label_bytes: int, label_index: int) -> ImageSet:
    """Records of ``label_bytes`` label bytes then 3072 pixel bytes (R, G, B planes, row-major)."""
    record = label_bytes + PIXELS
    images, labels = [], []
    for path in paths:
        raw = np.fromfile(path, dtype=np.uint8)
        if raw.size == 0 or raw.size % record:
            raise DataFileMissingError(f"{path}: not a CIFAR binary file of {record}-byte records")
        rows = raw.reshape(-1, record)
        labels.append(rows[:, label_index].astype(np.int64))
        images.append(rows[:, label_bytes:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return ImageSet(to_float_images(np.concatenate(images)), torch.from_numpy(np.concatenate(labels)))


@DATASETS.register(
    "cifar10",
    summary="CIFAR-10, binary version (data_batch_1..5.bin, test_batch.bin) under --data-root",
    reference="Krizhevsky, Learning multiple layers of features from tiny images (2009)",
    params=DatasetParams,
)
def load_cifar10(params: DatasetParams, root: Path | None = None) -> RawDataset:
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    files = locate(
        "cifar10",
        root,
        names,
        subfolders=("cifar-10-batches-bin",),
        source="cifar-10-binary.tar.gz (CIFAR-10 binary version), extracted",
    )
    return RawDataset(
        train=read_cifar_binary(files[:5], 1, 0),
        test=read_cifar_binary(files[5:], 1, 0),
        num_classes=10,
        class_names=CIFAR10_CLASSES,
    )


@DATASETS.register(
    "cifar100",
    summary="CIFAR-100 (fine labels), binary version (train.bin, test.bin) under --data-root",
    reference="Krizhevsky, Learning multiple layers of features from tiny images (2009)",
    params=DatasetParams,
)
def load_cifar100(params: DatasetParams, root: Path | None = None) -> RawDataset:
    files = locate(
        "cifar100",
        root,
        ["train.bin", "test.bin"],
        subfolders=("cifar-100-binary",),
        source="cifar-100-binary.tar.gz (CIFAR-100 binary version), extracted",
    )
    return RawDataset(
        train=read_cifar_binary(files[:1], 2, 1),
        test=read_cifar_binary(files[1:], 2, 1),
        num_classes=100,
    )
