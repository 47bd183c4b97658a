"""Tiny ImageNet (200 classes, 64×64) in its official layout; the validation split is the test split
(the official test images have no labels)."""

from __future__ import annotations

from pathlib import Path

from leakshield.data.files import read_text_lines
from leakshield.data.imagefolder import FolderParams
from leakshield.data.pictures import cap_per_class, is_picture, labelled_pictures
from leakshield.data.registry import DATASETS, RawDataset
from leakshield.errors import DataFileMissingError

LAYOUT = (
    "ROOT/wnids.txt, ROOT/words.txt, ROOT/train/<wnid>/images/*.JPEG, ROOT/val/images/*.JPEG and "
    "ROOT/val/val_annotations.txt (tiny-imagenet-200.zip, extracted); leakshield never downloads data"
)


def _require(path: Path, what: str) -> Path:
    if not path.exists():
        raise DataFileMissingError(f"tinyimagenet: missing {what} ({path}); expected {LAYOUT}")
    return path


def _root(root: Path | None) -> Path:
    if root is None:
        raise DataFileMissingError(f"tinyimagenet: no data root given (--data-root); expected {LAYOUT}")
    nested = root / "tiny-imagenet-200"
    return nested if not (root / "wnids.txt").exists() and nested.is_dir() else root


@DATASETS.register(
    "tinyimagenet",
    summary="Tiny ImageNet, official layout (wnids.txt, words.txt, train/<wnid>/images, val/images + "
    "val_annotations.txt); 64 px native; val is the test split",
    reference="Le & Yang, Tiny ImageNet Visual Recognition Challenge (CS231N, 2015)",
    params=FolderParams,
)
def load_tinyimagenet(params: FolderParams, root: Path | None = None) -> RawDataset:
    """Classes in ``wnids.txt`` order, named by the first synonym in ``words.txt``; pictures are read at
    ``size`` (default 64) directly, so a smaller size never holds the 64-pixel set in memory."""
    base = _root(root)
    listing = _require(base / "wnids.txt", "wnids.txt")
    wnids = [w.strip() for line in read_text_lines(listing) for w in line.split() if w.strip()]
    if not wnids:
        raise DataFileMissingError(f"{listing}: lists no classes; expected one wnid per line (n01443537…)")
    index = {w: i for i, w in enumerate(wnids)}
    names = dict.fromkeys(wnids, "")
    words = base / "words.txt"
    if words.exists():
        for line in words.read_text(errors="replace").splitlines():
            wnid, _, label = line.partition("\t")
            if wnid in names:
                names[wnid] = label.split(",")[0].strip()
    train_items = []
    for wnid in wnids:
        folder = _require(base / "train" / wnid / "images", f"the training images of {wnid}")
        train_items += [(p, index[wnid]) for p in sorted(folder.iterdir()) if is_picture(p)]
    annotations = _require(base / "val" / "val_annotations.txt", "val/val_annotations.txt")
    val_items = []
    for number, line in enumerate(read_text_lines(annotations), start=1):
        fields = line.split("\t")
        if not line.strip():
            continue
        if len(fields) < 2 or fields[1] not in index:
            raise DataFileMissingError(
                f"{annotations}:{number}: expected '<file>\\t<wnid>...' with a wnid of wnids.txt"
            )
        val_items.append(
            (_require(base / "val" / "images" / fields[0], f"val image {fields[0]}"), index[fields[1]])
        )
    size = params.size or 64
    return RawDataset(
        train=labelled_pictures(cap_per_class(train_items, params.max_per_class), size),
        test=labelled_pictures(cap_per_class(val_items, params.max_per_class), size),
        num_classes=len(wnids),
        class_names=tuple(names[w] or w for w in wnids),
    )
