"""A strict reader of numeric arrays in MATLAB level-5 ``.mat`` files (SVHN's format), in NumPy.

SciPy's reader crashed the process (a segmentation fault) on a damaged file found by the fuzz test, so
the loaders read through this one instead: every tag, size and dimension is checked against the bytes
that are there, and anything inconsistent is a :class:`ValueError` naming what is wrong. Supported:
both byte orders, compressed and plain variables, numeric classes (the storage type may be narrower
than the class, as MATLAB writes it); MATLAB v7.3 files are HDF5 and are refused by name.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

#: miINT8 … miUINT64 → NumPy type (1–13; 8, 10, 11 are unused in level 5)
STORAGE = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 9: "f8", 12: "i8", 13: "u8"}
#: mxDOUBLE_CLASS … mxUINT64_CLASS → NumPy type of the array
CLASSES = {6: "f8", 7: "f4", 8: "i1", 9: "u1", 10: "i2", 11: "u2", 12: "i4", 13: "u4", 14: "i8", 15: "u8"}
MI_MATRIX, MI_COMPRESSED = 14, 15
#: a decompressed variable larger than this is refused (SVHN's extra set is about 1.6 GB)
MAX_VARIABLE_BYTES = 8 << 30


class MatFileError(ValueError):
    """The file is not a readable MATLAB level-5 file of numeric arrays."""


class V73Error(MatFileError):
    """A MATLAB v7.3 (HDF5) file."""


def read_mat_arrays(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The numeric arrays called ``names`` in the level-5 MAT file ``path`` (those present)."""
    data = path.read_bytes()
    if len(data) < 128 or not data.startswith(b"MATLAB"):
        raise MatFileError("no MATLAB level-5 header")
    order = {b"IM": "<", b"MI": ">"}.get(data[126:128])
    if order is None:
        raise MatFileError("unknown byte order in the header")
    version = struct.unpack(order + "H", data[124:126])[0]
    if version == 0x0200:
        raise V73Error("a MATLAB v7.3 (HDF5) file")
    if version != 0x0100:
        raise MatFileError(f"header version {version:#06x}, not level 5 (0x0100)")
    found: dict[str, np.ndarray] = {}
    for kind, body in _elements(data, 128, len(data), order):
        if kind == MI_COMPRESSED:
            body = _inflate(body)
            inner = list(_elements(body, 0, len(body), order))
            if len(inner) != 1:
                raise MatFileError("a compressed element must hold exactly one variable")
            kind, body = inner[0]
        if kind != MI_MATRIX:
            continue
        name, array = _matrix(body, order)
        if name in names:
            found[name] = array
    return found


def _elements(data: bytes, start: int, end: int, order: str):
    """(type, body) of each data element in ``data[start:end]``, in the small or the normal format."""
    at = start
    while at < end:
        if end - at < 8:
            raise MatFileError(f"a truncated tag at byte {at}")
        word, size = struct.unpack(order + "II", data[at : at + 8])
        if word >> 16:  # small data element: size and type in the first word, data in the second
            kind, size = word & 0xFFFF, word >> 16
            if size > 4:
                raise MatFileError(f"a small element of {size} bytes at byte {at}")
            yield kind, data[at + 4 : at + 4 + size]
            at += 8
            continue
        body_end = at + 8 + size
        if body_end > end:
            raise MatFileError(f"an element of {size} bytes at byte {at} runs past the end")
        yield word, data[at + 8 : body_end]
        at = body_end if word == MI_COMPRESSED else body_end + (-size % 8)


def _inflate(body: bytes) -> bytes:
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(body, MAX_VARIABLE_BYTES)
    except zlib.error as exc:
        raise MatFileError(f"a damaged compressed variable ({exc})") from None
    if inflater.unconsumed_tail:
        raise MatFileError(f"a compressed variable over {MAX_VARIABLE_BYTES:,} bytes")
    return out


def _matrix(body: bytes, order: str) -> tuple[str, np.ndarray]:
    """The name and the array of one miMATRIX element (numeric, real)."""
    parts = list(_elements(body, 0, len(body), order))
    if len(parts) < 3:
        raise MatFileError("a variable without flags, dimensions and name")
    (flag_kind, flags), (dim_kind, dims_raw), (_, name_raw) = parts[:3]
    if flag_kind != 6 or len(flags) != 8 or dim_kind != 5 or len(dims_raw) % 4:
        raise MatFileError("a variable with malformed flags or dimensions")
    name = name_raw.decode("ascii", errors="replace")
    cls = struct.unpack(order + "I", flags[:4])[0] & 0xFF
    complex_ = bool(struct.unpack(order + "I", flags[:4])[0] & 0x800)
    dims = np.frombuffer(dims_raw, dtype=order + "i4").tolist()
    if cls not in CLASSES:  # cells, structs, chars, sparse: not needed, not read
        return name, np.empty(0)
    if complex_ or len(parts) != 4 or any(d < 0 for d in dims):
        raise MatFileError(f"variable {name}: not a real numeric array")
    kind, raw = parts[3]
    if kind not in STORAGE:
        raise MatFileError(f"variable {name}: unknown storage type {kind}")
    values = np.frombuffer(raw, dtype=order + STORAGE[kind])
    count = int(np.prod(dims, dtype=np.int64)) if dims else 0
    if values.size != count:
        raise MatFileError(f"variable {name}: {values.size} values for dimensions {dims}")
    return name, values.astype(CLASSES[cls]).reshape(dims, order="F")
