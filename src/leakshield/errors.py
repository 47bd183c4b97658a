"""Errors that leakshield reports to a user as one clear line (exit status 2 on the CLI)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class LeakshieldError(Exception):
    """A problem with the user's input: a bad name, value, file or config.

    The message is complete on its own: the CLI prints it as one line, without a traceback.
    """


class UnknownNameError(LeakshieldError, KeyError):
    """A registry lookup failed; the message lists the close matches and the allowed names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DataFileMissingError(LeakshieldError, FileNotFoundError):
    """A dataset loader did not find the files it reads; nothing is ever downloaded."""


class ConfigError(LeakshieldError, ValueError):
    """An experiment or component configuration is invalid."""


class RunDirectoryError(LeakshieldError):
    """A run directory cannot be used (holds a different config, or is not a run)."""


class StorageError(LeakshieldError):
    """Writing failed for lack of space, permission or a valid name; what was stored before is kept."""


#: errno → what it means for a file being written (or read: a name too long, a folder not readable)
_CAUSES = {
    28: "the disk is full",  # ENOSPC
    122: "the disk quota is exceeded",  # EDQUOT
    30: "the file system is read-only",  # EROFS
    13: "permission denied",  # EACCES
    1: "operation not permitted",  # EPERM
    36: "a file name is too long for the file system",  # ENAMETOOLONG
}
#: SQLite's primary result codes → the cause (``sqlite3.Error.sqlite_errorcode`` & 0xFF)
_SQLITE_CAUSES = {
    13: "the disk is full",  # SQLITE_FULL
    8: "the file or its folder is read-only",  # SQLITE_READONLY
    10: "a disk I/O error (a full or failing disk)",  # SQLITE_IOERR
    14: "it cannot be opened (a folder in its place, or its folder missing or not writable)",  # CANTOPEN
}


def storage_error(
    exc: BaseException, path: object = None, resume: str = "", verb: str = "write"
) -> StorageError | None:
    """``exc`` (an OSError, or an SQLite error of a full, read-only or unopenable file) as one line —
    ``cannot <verb> <path>: <cause>; <resume>`` — or None for any other error (a damaged store among
    them: its advice differs)."""
    import sqlite3

    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, OSError) and exc.errno in _CAUSES:
        where = path if path is not None else (exc.filename or "a file")
        cause = _CAUSES[exc.errno]
    elif isinstance(exc, sqlite3.Error) and _sqlite_code(exc) in _SQLITE_CAUSES:
        where = path if path is not None else "the result store"
        cause = _SQLITE_CAUSES[_sqlite_code(exc)]
    else:
        return None
    return StorageError(f"cannot {verb} {where}: {cause}{'; ' + resume if resume else ''}")


def _sqlite_code(exc: BaseException) -> int:
    """SQLite's primary result code of ``exc`` (0 where it carries none)."""
    return (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF


@contextlib.contextmanager
def storage_errors(path: object, resume: str = "") -> Iterator[None]:
    """Within it, a full, read-only or misnamed target (:func:`storage_error`) is raised as one
    :class:`StorageError` line naming ``path``; any other error passes unchanged."""
    import sqlite3

    try:
        yield
    except (OSError, sqlite3.Error) as exc:
        problem = storage_error(exc, path, resume)
        if problem is None:
            raise
        raise problem from None


def is_storage_problem(exc: BaseException) -> bool:
    """Whether ``exc`` is a full, read-only or misnamed target: it stops a grid (a rerun resumes), where
    another failure is stored with its cell."""
    return storage_error(exc) is not None
