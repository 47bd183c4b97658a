"""The files every command reads: YAML documents (one reader, one line per problem) and the names
that become folders (run and search names)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from leakshield.errors import ConfigError


def file_name(value: str, why: str) -> str:
    """``value`` if it is one plain file name (``why``: where it becomes a folder), else a ValueError."""
    bad = [c for c in value if c in "/\\" or ord(c) < 32 or ord(c) == 127]
    if not value.strip() or value in (".", "..") or bad:
        raise ValueError(
            f"{value!r} is not a file name ({why}): use letters, digits, '-', '_' or '.', no path "
            "separators, no control characters, not empty, '.' or '..'"
        )
    return value


#: libyaml's safe loader where PyYAML was built with it (tens of times faster on long lists)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: str | Path, what: str = "config") -> Any:
    """The YAML document of ``path`` — every command reads its files through here, so a missing file, a
    folder, a binary or non-UTF-8 file and broken YAML are each one line naming the file."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder, not a YAML {what} file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if b"\x00" in raw[:4096]:
        raise ConfigError(f"{path} is a binary file, not a YAML {what}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start}); a {what} is a YAML text file"
        ) from None
    try:
        return yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
