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
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping names one key twice (YAML would keep the last silently)."""

    def __init__(self, key: Any, first: Any, second: Any) -> None:
        super().__init__(None, None, f"key {key!r} appears twice", second)
        self.key, self.lines = key, (first.line + 1, second.line + 1)


class SafeLoader(_FAST_LOADER):  # type: ignore[misc,valid-type]
    """The safe loader, refusing a mapping that repeats a key (``defenses:`` written twice would
    silently drop the first list); merge keys (``<<``) may still be overridden, as YAML means."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark)
            except TypeError:  # an unhashable key: the constructor below says so
                continue
            if first is not key_node.start_mark:
                raise DuplicateKeyError(key, first, key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


SAFE_LOADER = SafeLoader


def parse_yaml(text: str, source: str) -> Any:
    """The YAML document ``text`` (read from ``source``, named in errors): broken YAML and a repeated
    key are each one :class:`ConfigError` line with the line numbers."""
    try:
        return yaml.load(text, Loader=SAFE_LOADER)
    except DuplicateKeyError as exc:
        first, second = exc.lines
        raise ConfigError(
            f"{source}: key {exc.key!r} appears twice in one mapping (lines {first} and {second}); "
            "YAML would keep only the last: merge them into one"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{source}: not valid YAML{where}") from None


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
    return parse_yaml(text, str(path))
