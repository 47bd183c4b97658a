"""SVHN, the official cropped-digits MATLAB files (Netzer et al., 2011), read with SciPy (no pickle)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from leakshield.data.files import locate
from leakshield.data.matlab import MatFileError, V73Error, read_mat_arrays
from leakshield.data.registry import DATASETS, DatasetParams, RawDataset
from leakshield.data.transforms import to_float_images
from leakshield.data.types import ImageSet
from leakshield.errors import DataFileMissingError

SOURCE = "http://ufldl.stanford.edu/housenumbers/ (format 2: cropped digits)"


class SvhnParams(DatasetParams):
    """extra: also train on ``extra_32x32.mat`` (531,131 more, easier digits)."""

    extra: bool = False


def read_svhn_mat(path: Path) -> ImageSet:
    """``X`` (32×32×3×N, uint8) and ``y`` (N×1, 1..10 with 10 for the digit 0) → images, labels 0..9."""
    try:
        mat = read_mat_arrays(path, ("X", "y"))
    except V73Error:
        raise DataFileMissingError(
            f"{path}: a MATLAB v7.3 (HDF5) file; SVHN's published files are v5 — use them, or save "
            "the arrays with MATLAB's -v7 flag"
        ) from None
    except (MatFileError, OSError) as exc:
        raise DataFileMissingError(f"{path}: not a readable SVHN .mat file ({exc})") from None
    if "X" not in mat or "y" not in mat or mat["X"].ndim != 4 or mat["X"].shape[:3] != (32, 32, 3):
        raise DataFileMissingError(
            f"{path}: expected variables X (32×32×3×N) and y (N×1), as in SVHN's files"
        )
    x = np.ascontiguousarray(mat["X"].transpose(3, 0, 1, 2))
    raw = mat["y"].reshape(-1)
    valid = np.isfinite(raw) & (raw == np.round(raw)) & (raw >= 1) & (raw <= 10)
    if not valid.all():
        bad = raw[~valid][0]
        raise DataFileMissingError(
            f"{path}: label {float(bad):g} in y; SVHN's labels are 1..10 (10 for the digit 0)"
        )
    y = raw.astype(np.int64) % 10  # label 10 is the digit 0
    if len(y) != len(x):
        raise DataFileMissingError(f"{path}: {len(x)} images but {len(y)} labels")
    return ImageSet(to_float_images(x), torch.from_numpy(y))


@DATASETS.register(
    "svhn",
    summary="SVHN cropped digits: train_32x32.mat, test_32x32.mat (optional extra_32x32.mat) under "
    "--data-root; label 10 → 0",
    reference="Netzer et al., Reading Digits in Natural Images with Unsupervised Feature Learning (2011)",
    params=SvhnParams,
)
def load_svhn(params: SvhnParams, root: Path | None = None) -> RawDataset:
    """Layout: ROOT/train_32x32.mat and ROOT/test_32x32.mat (and ROOT/extra_32x32.mat with ``extra``), or
    the same under ROOT/svhn/: MATLAB files holding X (32×32×3×N uint8) and y (N×1, 1–10)."""
    names = ["train_32x32.mat", "test_32x32.mat"] + (["extra_32x32.mat"] if params.extra else [])
    files = locate("svhn", root, names, subfolders=("svhn",), source=SOURCE)
    train = read_svhn_mat(files[0])
    if params.extra:
        extra = read_svhn_mat(files[2])
        train = ImageSet(torch.cat([train.x, extra.x]), torch.cat([train.y, extra.y]))
    return RawDataset(
        train=train,
        test=read_svhn_mat(files[1]),
        num_classes=10,
        class_names=tuple(str(d) for d in range(10)),
        mirror_keeps_class=False,  # house numbers: a mirrored digit is no digit
    )
