"""A folder of class sub-folders of images, read with Pillow (torchvision's ImageFolder layout), and
Medical MNIST, which ships in that layout."""

from __future__ import annotations

from pathlib import Path

import pydantic

from leakshield.data.pictures import IMAGE_SUFFIXES, cap_per_class, is_picture, labelled_pictures
from leakshield.data.registry import DATASETS, DatasetParams, RawDataset
from leakshield.data.types import ImageSet
from leakshield.errors import DataFileMissingError


class FolderParams(DatasetParams):
    """max_per_class: read at most this many images of each class (in file-name order), for quick runs
    on large folders."""

    max_per_class: int | None = pydantic.Field(default=None, ge=1)


def read_class_folders(
    folder: Path, classes: list[str], size: int, max_per_class: int | None = None
) -> ImageSet:
    """Every picture of ``folder/<class>/`` (sorted by name), labelled by the class's index."""
    items = []
    for label, cls in enumerate(classes):
        cls_dir = folder / cls
        files = sorted(p for p in cls_dir.iterdir() if is_picture(p)) if cls_dir.is_dir() else []
        items += [(path, label) for path in files]
    if not items:
        raise DataFileMissingError(
            f"imagefolder: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in the class folders of {folder}"
        )
    return labelled_pictures(cap_per_class(items, max_per_class), size)


@DATASETS.register(
    "imagefolder",
    summary="ROOT/<class>/*.png|jpg (or ROOT/train/<class> with ROOT/test/<class> or ROOT/val/<class>, "
    "e.g. ImageNet's folders), RGB, resized",
    reference="the torchvision ImageFolder layout",
    params=FolderParams,
    aliases={"medical-mnist": {"channels": 1, "size": 64}},
)
def load_imagefolder(params: FolderParams, root: Path | None = None) -> RawDataset:
    """Classes are the sorted sub-folder names; images are resized to ``size`` (default 32) with Pillow.
    With ``train/`` and ``test/`` (or ``val/``, ImageNet's class-folder validation set) those are the
    splits; otherwise ``test_fraction`` of the images is held out.

    ``medical-mnist`` (PRECODE's medical dataset, 58,954 64×64 grey images of 6 classes: AbdomenCT,
    BreastMRI, CXR, ChestCT, Hand, HeadCT) is this layout with 1 channel and 64 pixels by default."""
    if root is None or not root.is_dir():
        raise DataFileMissingError(
            f"imagefolder: data root {root} is not a folder; expected ROOT/<class>/<image> "
            "(or ROOT/train/<class> and ROOT/test/<class>); leakshield never downloads data"
        )
    size = params.size or 32
    held_out = next((root / name for name in ("test", "val") if (root / name).is_dir()), None)
    split = (root / "train").is_dir() and held_out is not None
    base = root / "train" if split else root
    classes = sorted(p.name for p in base.iterdir() if p.is_dir())
    if not classes:
        raise DataFileMissingError(f"imagefolder: no class sub-folders in {base}")
    train = read_class_folders(base, classes, size, params.max_per_class)
    test = read_class_folders(held_out, classes, size, params.max_per_class) if split and held_out else None
    return RawDataset(train=train, test=test, num_classes=len(classes), class_names=tuple(classes))
