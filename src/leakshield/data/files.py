"""Locating a dataset's files under the user's ``--data-root`` with one-line errors."""

from __future__ import annotations

from pathlib import Path

from leakshield.errors import DataFileMissingError


def locate(
    dataset: str,
    root: Path | None,
    names: list[str],
    *,
    subfolders: tuple[str, ...] = (),
    source: str,
    suffixes: tuple[str, ...] = ("",),
) -> list[Path]:
    """Find every file of ``names`` in ``root`` or one of its ``subfolders``.

    Each name may carry one of ``suffixes`` (e.g. ``.gz``). All files must sit in the same folder.
    Raises :class:`DataFileMissingError` naming the expected files and where they come from.
    """
    expected = ", ".join(names)
    if root is None:
        raise DataFileMissingError(
            f"{dataset}: no data root given (--data-root or dataset.root); expected {expected} "
            f"from {source}; leakshield never downloads data"
        )
    for folder in (root, *(root / sub for sub in subfolders)):
        found = []
        for name in names:
            hit = next((folder / (name + s) for s in suffixes if (folder / (name + s)).is_file()), None)
            if hit is None:
                break
            found.append(hit)
        else:
            return found
    where = " or ".join(str(p) for p in (root, *(root / s for s in subfolders)))
    raise DataFileMissingError(
        f"{dataset}: missing files under {where}; expected {expected} from {source}; "
        "leakshield never downloads data"
    )


def read_text_lines(path: Path) -> list[str]:
    """The lines of the text file ``path`` (one of a dataset's listings); a binary or non-UTF-8 file
    is a :class:`DataFileMissingError` naming it."""
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataFileMissingError(
            f"{path}: not UTF-8 text (byte {exc.start}); expected the dataset's text listing — is it a "
            "binary file or a damaged copy?"
        ) from None
