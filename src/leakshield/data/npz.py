"""Images and labels from one NumPy ``.npz`` file (read without pickle): a fixed set of victims, such as
the 128 CIFAR-10 test images PRECODE attacks, or any small image set saved from NumPy."""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np
import pydantic
import torch

from leakshield.data.cifar import CIFAR10_CLASSES
from leakshield.data.registry import DATASETS, DatasetParams, RawDataset
from leakshield.data.transforms import to_float_images
from leakshield.data.types import ImageSet
from leakshield.errors import DataFileMissingError

#: class names a file's labels may be read with (``classes``)
CLASS_NAMES = {"cifar10": CIFAR10_CLASSES}


class NpzParams(DatasetParams):
    """file: the ``.npz`` under ``--data-root`` (or an absolute path); images (N×H×W, N×H×W×C or
    N×C×H×W with C 1 or 3; uint8 in 0–255 or floats in [0, 1]) and labels (N integers) are its
    arrays ``images_key`` and ``labels_key``. A 4-d array whose last axis is 1 or 3 is read channels
    last. num_classes: None takes the names' count (``classes``), else the largest label + 1."""

    file: str = pydantic.Field(default="images.npz", min_length=1, description="the .npz file")
    images_key: str = pydantic.Field(default="images", min_length=1, description="the images' array name")
    labels_key: str = pydantic.Field(default="labels", min_length=1, description="the labels' array name")
    num_classes: int | None = pydantic.Field(
        default=None, ge=2, description="classes (None: the names' count, else the largest label + 1)"
    )
    classes: str | None = pydantic.Field(default=None, description=f"names: one of {sorted(CLASS_NAMES)}")
    test_file: str | None = pydantic.Field(
        default=None, min_length=1, description="a second .npz, same keys, as the test split (None: drawn)"
    )

    @pydantic.field_validator("classes")
    @classmethod
    def _known(cls, value: str | None) -> str | None:
        if value is not None and value not in CLASS_NAMES:
            raise ValueError(f"classes: {value!r}; allowed: {', '.join(sorted(CLASS_NAMES))} or null")
        return value


def read_npz_images(path: Path, images_key: str = "images", labels_key: str = "labels") -> ImageSet:
    """The image set of ``path`` (float N×C×H×W in [0, 1], int64 labels); one-line errors."""
    if not path.is_file():
        raise DataFileMissingError(f"npz: {path} does not exist; give dataset.file under --data-root")
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise DataFileMissingError(f"{path}: a single array (.npy), not an .npz archive of named arrays")
        with loaded as npz:
            missing = [k for k in (images_key, labels_key) if k not in npz.files]
            if missing:
                raise DataFileMissingError(
                    f"{path}: no array {missing[0]!r}; the file holds {sorted(npz.files)}"
                )
            images, labels = npz[images_key], npz[labels_key]
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, zlib.error) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataFileMissingError(f"{path}: not a readable .npz archive ({first})") from None
    if images.ndim == 4 and images.shape[1] in (1, 3) and images.shape[-1] not in (1, 3):
        images = images.transpose(0, 2, 3, 1)  # channels first → last
    if images.ndim not in (3, 4) or (images.ndim == 4 and images.shape[-1] not in (1, 3)):
        raise DataFileMissingError(
            f"{path}: images of shape {images.shape}; expected N×H×W(×C) with C 1 or 3"
        )
    if images.size == 0:
        raise DataFileMissingError(f"{path}: no images (array {images_key!r} is empty)")
    if labels.ndim != 1 or len(labels) != len(images) or not np.issubdtype(labels.dtype, np.integer):
        raise DataFileMissingError(
            f"{path}: labels of shape {labels.shape} and type {labels.dtype}; expected {len(images)} integers"
        )
    if labels.dtype == np.uint64 and labels.max() > np.iinfo(np.int64).max:
        raise DataFileMissingError(f"{path}: label {int(labels.max())} is not a class index")
    if images.dtype == np.uint8:
        x = to_float_images(images)
    elif (
        np.issubdtype(images.dtype, np.floating)
        and images.size
        and 0.0 <= images.min() <= images.max() <= 1.0
    ):
        x = to_float_images(images, scale=1.0)
    else:
        raise DataFileMissingError(
            f"{path}: images of type {images.dtype}; expected uint8 or floats in [0, 1]"
        )
    return ImageSet(x, torch.from_numpy(labels.astype(np.int64)))


@DATASETS.register(
    "npz",
    summary="images and labels arrays of one .npz file (dataset.file under --data-root); test split drawn",
    reference="NumPy's .npz format, read with allow_pickle=False",
    params=NpzParams,
)
def load_npz(params: NpzParams, root: Path | None = None) -> RawDataset:
    path = _located(params.file, root)
    data = read_npz_images(path, params.images_key, params.labels_key)
    test = None
    if params.test_file is not None:
        test = read_npz_images(_located(params.test_file, root), params.images_key, params.labels_key)
        if test.x.shape[1:] != data.x.shape[1:]:
            raise DataFileMissingError(f"{params.test_file}: images of shape {tuple(test.x.shape[1:])}; the "
                                       f"training file's are {tuple(data.x.shape[1:])}")  # fmt: skip
    if len(data.y) < 2:
        raise DataFileMissingError(f"{path}: {len(data.y)} images; a dataset needs at least two")
    names = CLASS_NAMES[params.classes] if params.classes else ()
    num_classes = params.num_classes or (len(names) if names else int(data.y.max()) + 1)
    if num_classes < 2:
        raise DataFileMissingError(
            f"{path}: every label is 0; give num_classes (≥ 2) or labels of two classes"
        )
    if names and len(names) != num_classes:
        raise DataFileMissingError(f"{path}: {num_classes} classes but {params.classes} names {len(names)}")
    if test is not None and int(test.y.max()) >= num_classes:
        raise DataFileMissingError(f"{params.test_file}: label {int(test.y.max())} beyond the {num_classes} "
                                   "classes of the training file")  # fmt: skip
    return RawDataset(train=data, test=test, num_classes=num_classes, class_names=names)


def _located(file: str, root: Path | None) -> Path:
    """``file`` as an absolute path (relative ones under ``root``)."""
    path = Path(file).expanduser()
    if not path.is_absolute():
        if root is None:
            raise DataFileMissingError(
                f"npz: no data root given (--data-root or dataset.root) for the relative file {file}"
            )
        path = root / path
    return path
