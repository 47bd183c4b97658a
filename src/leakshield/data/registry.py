"""The dataset registry and the one loading call, :func:`load_dataset`."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pydantic
import torch
from PIL import Image

from leakshield.data.transforms import convert_channels, resize_images
from leakshield.data.types import DatasetInfo, DatasetSplits, ImageSet
from leakshield.errors import ConfigError, DataFileMissingError, LeakshieldError
from leakshield.registry import Params, Registry


class DatasetParams(Params):
    """Parameters every dataset accepts (each field's description says what it does)."""

    channels: Literal[1, 3] | None = pydantic.Field(
        default=None, description="1 or 3 (converted), or None for the native count"
    )
    size: int | None = pydantic.Field(
        default=None, ge=8, le=512, description="square side in pixels after a bilinear resize (None: native)"
    )
    public_fraction: float = pydantic.Field(
        default=0.2,
        ge=0.0,
        lt=1.0,
        description="share of the training images held out, disjoint, as the public split",
    )
    test_fraction: float = pydantic.Field(
        default=0.2, gt=0.0, lt=1.0, description="share held out as test where the format has no test split"
    )
    split_seed: int = pydantic.Field(default=0, description="seed of those splits")
    max_train: int | None = pydantic.Field(
        default=None, ge=1, description="cap on the training images (after the public split), for quick runs"
    )


@dataclass(frozen=True)
class RawDataset:
    """What a loader returns before the common conversions: native train/test splits."""

    train: ImageSet
    test: ImageSet | None
    num_classes: int
    class_names: tuple[str, ...] = ()
    #: whether a horizontally mirrored image still shows its class (False for digits)
    mirror_keeps_class: bool = True


DATASETS: Registry[RawDataset] = Registry("dataset")


def split_off(data: ImageSet, fraction: float, seed: int) -> tuple[ImageSet, ImageSet]:
    """Split ``data`` into (rest, held_out) with ``round(fraction · N)`` held out, seeded."""
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(data), generator=gen)
    n_out = round(fraction * len(data))
    return data.subset(perm[n_out:].sort().values), data.subset(perm[:n_out].sort().values)


def load_dataset(
    name: str,
    params: Mapping[str, Any] | None = None,
    *,
    root: str | Path | None = None,
) -> DatasetSplits:
    """Load a registered dataset and return its train / test / public splits and metadata.

    Parameters are those of :class:`DatasetParams`; ``root`` is the folder holding the dataset's files
    (unused by the embedded ``digits``). Nothing is ever downloaded.

    >>> splits = load_dataset("digits", {"channels": 3, "size": 32})
    >>> splits.info.shape
    (3, 32, 32)
    """
    entry = DATASETS.get(name)
    validated = DATASETS.validate(name, params)
    assert isinstance(validated, DatasetParams)
    folder = Path(root).expanduser() if root is not None else None
    if folder is not None and folder.exists() and not folder.is_dir():
        raise DataFileMissingError(f"data root {folder} is a file, not a folder holding the {name} files")
    try:
        raw = entry.factory(validated, root=folder)
    except LeakshieldError:
        raise
    except DAMAGED as exc:  # a damaged or foreign file: one line naming it, never a traceback
        raise DataFileMissingError(
            f"{name}: a data file under {folder} is damaged or not in {name}'s format ({_describe(exc)})"
        ) from None
    for split, data in (("train", raw.train), ("test", raw.test)):
        if data is not None:
            _check_split(name, split, data, raw.num_classes)

    def convert(data: ImageSet) -> ImageSet:
        x = convert_channels(resize_images(data.x, validated.size), validated.channels)
        return ImageSet(x.contiguous(), data.y)

    train = convert(raw.train)
    if raw.test is None:
        train, test = split_off(train, validated.test_fraction, validated.split_seed)
    else:
        test = convert(raw.test)
    train, public = split_off(train, validated.public_fraction, validated.split_seed + 1)
    refuse_one_class(f"dataset {name}", "test", test.y, raw.class_names)
    if validated.max_train is not None and len(train) > validated.max_train:
        train = train.subset(list(range(validated.max_train)))
    if len(train) == 0:
        raise ConfigError(f"dataset {name}: the training split is empty")
    mean = train.x.mean(dim=(0, 2, 3))
    std = train.x.std(dim=(0, 2, 3)).clamp_min(1e-3)
    info = DatasetInfo(
        name=name,
        shape=tuple(train.x.shape[1:]),  # type: ignore[arg-type]
        num_classes=raw.num_classes,
        mean=tuple(round(float(m), 6) for m in mean),
        std=tuple(round(float(s), 6) for s in std),
        class_names=raw.class_names,
        mirror_keeps_class=raw.mirror_keeps_class,
    )
    return DatasetSplits(train=train, test=test, public=public, info=info)


#: what a loader raises on a damaged file (truncated archives, foreign formats, a decompression bomb)
DAMAGED = (OSError, EOFError, ValueError, KeyError, IndexError, TypeError, RuntimeError, zlib.error,
           struct.error, Image.DecompressionBombError, SyntaxError)  # fmt: skip


def _describe(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    where = f" {exc.filename}" if isinstance(exc, OSError) and exc.filename else ""
    return f"{type(exc).__name__}{where}{': ' + text[:200] if text else ''}"


def _check_split(name: str, split: str, data: ImageSet, num_classes: int) -> None:
    """One line for a split whose labels do not fit its images or its classes."""
    if len(data.x) != len(data.y):
        raise DataFileMissingError(
            f"{name}: the {split} split has {len(data.x)} images but {len(data.y)} labels"
        )
    if data.y.dtype.is_floating_point or data.y.dtype == torch.bool:
        raise DataFileMissingError(f"{name}: the {split} split's labels are not integers ({data.y.dtype})")
    if len(data.y) and (int(data.y.min()) < 0 or int(data.y.max()) >= num_classes):
        bad = int(data.y.min()) if int(data.y.min()) < 0 else int(data.y.max())
        raise DataFileMissingError(
            f"{name}: the {split} split has label {bad}; classes are 0..{num_classes - 1}"
        )
    if data.x.dtype.is_floating_point and not bool(torch.isfinite(data.x).all()):
        raise DataFileMissingError(f"{name}: the {split} split has NaN or infinite pixels")


def refuse_one_class(
    what: str, split: str, labels: torch.Tensor, class_names: Sequence[str] | None = None
) -> None:
    """One line for a test split whose labels are all one class (two examples or more): a model that
    always answers it scores accuracy 1.000 on it, the untrained one included, so no accuracy, ADR or
    cost could mean anything."""
    if len(labels) < 2:
        return
    found = torch.unique(labels)
    if len(found) != 1:
        return
    label = int(found[0])
    named = f" ({class_names[label]!r})" if class_names and label < len(class_names) else ""
    raise ConfigError(
        f"{what}: every one of the {len(labels)} {split} examples is class {label}{named}: a model that "
        "always answers it scores accuracy 1.000 (chance on this split is 1.000), so no accuracy could be "
        "compared; give data of two or more classes"
    )


def list_datasets() -> list[str]:
    return DATASETS.names()
