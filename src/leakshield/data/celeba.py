"""CelebA's aligned faces in the official layout, labelled by identity (the k most frequent) or by
binary attributes; the official partition gives the splits."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pydantic

from leakshield.data.files import read_text_lines
from leakshield.data.imagefolder import FolderParams
from leakshield.data.pictures import cap_per_class, labelled_pictures
from leakshield.data.registry import DATASETS, RawDataset
from leakshield.errors import DataFileMissingError

LAYOUT = (
    "ROOT/img_align_celeba/*.jpg, ROOT/list_eval_partition.txt, and ROOT/identity_CelebA.txt (identity "
    "labels) or ROOT/list_attr_celeba.txt (attribute labels), as distributed; leakshield never downloads data"
)


class CelebAParams(FolderParams):
    """labels: ``identity`` (the ``identities`` most frequent identities are the classes, other images are
    dropped) or a list of attribute names of ``list_attr_celeba.txt`` (one attribute: 2 classes, k
    attributes: 2^k). identities: how many identities are the classes. crop: side of the centered square
    cut before resizing (178, the aligned images' width, as is customary; None keeps the 178×218 frame
    squashed). size defaults to 64. validation: ``train`` adds the validation partition (1) to training,
    else it is left out; partition 0 is the training split, 2 the test split."""

    labels: str | list[str] = "identity"
    identities: int = pydantic.Field(default=10, ge=2)
    crop: int | None = pydantic.Field(default=178, ge=8)
    validation: str = pydantic.Field(default="drop", pattern="^(drop|train)$")


def _file(base: Path, name: str) -> Path:
    path = base / name
    if not path.is_file():
        raise DataFileMissingError(f"celeba: missing {name} in {base}; expected {LAYOUT}")
    return path


def _pairs(path: Path) -> dict[str, str]:
    out = {}
    for number, line in enumerate(read_text_lines(path), start=1):
        if line.strip():
            fields = line.split()
            if len(fields) != 2:
                raise DataFileMissingError(f"{path}:{number}: expected '<image> <value>'")
            out[fields[0]] = fields[1]
    return out


def _attributes(path: Path, wanted: list[str]) -> tuple[dict[str, int], tuple[str, ...]]:
    lines = read_text_lines(path)
    if len(lines) < 2:
        raise DataFileMissingError(f"{path}: expected a count line and a line of attribute names")
    header = lines[1].split()
    missing = [a for a in wanted if a not in header]
    if missing:
        raise DataFileMissingError(f"celeba: unknown attributes {missing}; allowed: {', '.join(header)}")
    columns = [header.index(a) for a in wanted]
    labels = {}
    for line in lines[2:]:
        fields = line.split()
        if len(fields) == len(header) + 1:
            bits = [fields[1 + c] == "1" for c in columns]
            labels[fields[0]] = sum(int(b) << k for k, b in enumerate(bits))
    names = tuple(
        ",".join(f"{a}={int(b)}" for a, b in zip(wanted, combo, strict=True))
        for combo in (tuple(bool(v >> k & 1) for k in range(len(wanted))) for v in range(1 << len(wanted)))
    )
    return labels, names


@DATASETS.register(
    "celeba",
    summary="CelebA aligned faces (img_align_celeba/, list_eval_partition.txt, identity_CelebA.txt or "
    "list_attr_celeba.txt); labels: top-k identities or binary attributes; center crop 178, 64 px",
    reference="Liu et al., Deep Learning Face Attributes in the Wild, ICCV 2015",
    params=CelebAParams,
)
def load_celeba(params: CelebAParams, root: Path | None = None) -> RawDataset:
    """Layout: ROOT/img_align_celeba/000001.jpg …, ROOT/list_eval_partition.txt ('<image> <0|1|2>'),
    ROOT/identity_CelebA.txt ('<image> <identity>') for identity labels, ROOT/list_attr_celeba.txt (a
    count line, the 40 attribute names, then '<image> ±1 …') for attribute labels (ROOT/celeba/ works)."""
    if root is None:
        raise DataFileMissingError(f"celeba: no data root given (--data-root); expected {LAYOUT}")
    base = (
        root / "celeba" if not (root / "img_align_celeba").is_dir() and (root / "celeba").is_dir() else root
    )
    images = base / "img_align_celeba"
    if not images.is_dir():
        raise DataFileMissingError(
            f"celeba: missing the folder img_align_celeba in {base}; expected {LAYOUT}"
        )
    partition = _pairs(_file(base, "list_eval_partition.txt"))
    if params.labels == "identity":
        identity = _pairs(_file(base, "identity_CelebA.txt"))
        counts = Counter(identity.values())
        top = sorted(counts, key=lambda i: (-counts[i], int(i) if i.isdigit() else i))[: params.identities]
        order = {ident: k for k, ident in enumerate(top)}
        labels = {img: order[i] for img, i in identity.items() if i in order}
        names = tuple(f"identity {i}" for i in top)
    else:
        wanted = [params.labels] if isinstance(params.labels, str) else list(params.labels)
        labels, names = _attributes(_file(base, "list_attr_celeba.txt"), wanted)
    train_parts = {"0", "1"} if params.validation == "train" else {"0"}
    train, test = [], []
    for img in sorted(labels):
        part = partition.get(img)
        if part in train_parts:
            train.append((images / img, labels[img]))
        elif part == "2":
            test.append((images / img, labels[img]))
    missing = [p for p, _ in itertools.chain(train, test) if not p.is_file()]
    if missing:
        raise DataFileMissingError(f"celeba: {len(missing)} listed images are missing, e.g. {missing[0]}")
    if not train:
        raise DataFileMissingError(f"celeba: no labelled image of the training partition in {base}")
    size = params.size or 64
    return RawDataset(
        train=labelled_pictures(cap_per_class(train, params.max_per_class), size, params.crop),
        test=labelled_pictures(cap_per_class(test, params.max_per_class), size, params.crop)
        if test
        else None,
        num_classes=len(names),
        class_names=names,
    )
