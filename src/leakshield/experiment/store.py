"""The result store of a run directory: one SQLite row per finished cell, written atomically.

A cell's row is inserted in a single transaction after its images are on disk, so a run killed at any
moment leaves either the complete row or none; a rerun recomputes exactly the missing cells.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leakshield.errors import LeakshieldError, storage_error, storage_errors

#: what to do after a full or read-only disk stopped a run
RESUME = "every cell stored before is kept: free space (or make it writable) and rerun the command to resume"

SCHEMA = """
CREATE TABLE IF NOT EXISTS cells (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    model TEXT, defense TEXT, attack TEXT, round INTEGER, seed INTEGER,
    status TEXT NOT NULL,
    metrics TEXT NOT NULL,
    victims TEXT NOT NULL,
    error TEXT,
    images TEXT,
    seconds REAL,
    finished REAL NOT NULL,
    environment TEXT,
    image_png BLOB,
    attack_name TEXT,
    threat TEXT,
    scale TEXT
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
#: columns added after the first release: (name, type), added to older stores when they are opened
ADDED_COLUMNS = (("environment", "TEXT"), ("image_png", "BLOB"), ("attack_name", "TEXT"), ("threat", "TEXT"),
                 ("scale", "TEXT"))  # fmt: skip
COLUMNS = (
    "key, kind, model, defense, attack, round, seed, status, metrics, victims, error, images, seconds, "
    "finished, environment, image_png, attack_name, threat, scale"
)
#: how many columns a row has
WIDTH = 19


#: metrics that are wall-clock measurements (a defense's client seconds per update): two runs of the same
#: cell differ in them, and nothing that must be reproducible may depend on them
MEASUREMENTS = frozenset({"client_seconds"})


def reproducible(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` without the wall-clock :data:`MEASUREMENTS`."""
    return {k: v for k, v in metrics.items() if k not in MEASUREMENTS}


@dataclass(frozen=True)
class CellRecord:
    """A stored cell: its coordinates, status (``ok`` or ``failed``), aggregate and per-victim metrics."""

    key: str
    kind: str
    model: str | None
    defense: str | None
    attack: str | None
    round: int | None
    seed: int | None
    status: str
    metrics: dict[str, Any]
    victims: list[dict[str, Any]]
    error: str | None
    images: str | None
    seconds: float
    finished: float
    #: where and how the cell was computed (versions, threads, device): float reductions depend on them
    environment: dict[str, Any] = field(default_factory=dict)
    #: the cell's image grid (PNG), from which ``report`` regenerates a missing image file
    image_png: bytes | None = None
    #: the attack's registered name (``attack`` is its display label) and the threat model the cell ran
    #: under (:meth:`leakshield.threats.Threat.as_json`); None for cells without an attack
    attack_name: str | None = None
    threat: dict[str, Any] | None = None
    #: the cell's point of the scale axes (``batch=16 clients=10``, :class:`~.axes.Scale`)
    scale: str | None = None
    #: the leaderboard's stage (1: the grid that chooses each row's strongest attack; 2: that attack rerun
    #: on fresh victims per seed, kept in a store of its own and tagged on loading — not a column)
    stage: int = 1


#: metrics that may be +∞ and are stored as such: the ε of a DP defense whose noise multiplier is 0 (no
#: privacy at all; stored as None it would read as "not measured")
UNBOUNDED = frozenset({"epsilon", "epsilon_client"})


def _json_safe(value: Any, key: str | None = None) -> Any:
    """NaN/Inf become None so the JSON stays standard — except the +∞ of an :data:`UNBOUNDED` metric,
    written as JSON's ``Infinity`` (Python's reader takes it back)."""
    if isinstance(value, float) and not math.isfinite(value):
        return value if key in UNBOUNDED and value == math.inf else None
    if isinstance(value, dict):
        return {k: _json_safe(v, k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


class CorruptStoreError(LeakshieldError):
    """The result store cannot be read; the message says how to recover."""


class ForeignStoreError(LeakshieldError):
    """The result store's file is an SQLite database of another program."""


class StoreMismatchError(LeakshieldError):
    """The result store holds cells of another config than its run directory's."""


class ResultStore:
    """SQLite-backed store at ``run_dir/results.sqlite``. Opening a damaged file raises
    :class:`CorruptStoreError` (never a traceback, never silently); :func:`repair_store` salvages it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            with self._connect() as db:
                verdict = db.execute("PRAGMA quick_check").fetchone()[0]
                if verdict != "ok":
                    raise sqlite3.DatabaseError(verdict)
                self._refuse_foreign(db)  # before anything is written to it
                db.executescript(SCHEMA)
                present = {row[1] for row in db.execute("PRAGMA table_info(cells)")}
                for name, kind in ADDED_COLUMNS:
                    if name not in present:
                        db.execute(f"ALTER TABLE cells ADD COLUMN {name} {kind}")
                db.execute("SELECT key, status FROM cells").fetchall()
        except (sqlite3.DatabaseError, ValueError) as exc:  # ValueError: damaged text (not UTF-8)
            problem = storage_error(exc, self.path, RESUME)  # None: damaged (by SQLite's result code)
            if problem is not None:  # a full or read-only disk, not a damaged store: --repair would not help
                raise problem from None
            problems = str(exc).splitlines() or ["unreadable"]  # quick_check lists one problem a line
            more = f" and {len(problems) - 1} more problems" if len(problems) > 1 else ""
            raise self._damaged(f"{problems[0]}{more}") from None

    def _refuse_foreign(self, db: sqlite3.Connection) -> None:
        """Raise :class:`ForeignStoreError` for an SQLite file of something else (tables but no ``cells``,
        or a ``cells`` table without the first release's columns), without writing to it."""
        tables = sorted(row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        if not tables:
            return  # a new store
        columns = {row[1] for row in db.execute("PRAGMA table_info(cells)")}
        first_release = set(COLUMNS.split(", ")) - {name for name, _ in ADDED_COLUMNS}
        if "cells" not in tables or not first_release <= columns:
            shown = ", ".join(tables[:5]) + (f" and {len(tables) - 5} more" if len(tables) > 5 else "")
            raise ForeignStoreError(
                f"{self.path} is an SQLite database of something else (its tables: {shown}), not a "
                "leakshield result store; it was left untouched: move it, or give another run directory"
            )

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30)
        try:
            with db:
                yield db
        finally:
            db.close()

    def _read(self, query: str) -> list[tuple]:
        """The rows of ``query``; a page or a text damaged past the integrity check is a
        :class:`CorruptStoreError` (one line, naming ``--repair``), never a traceback."""
        try:
            with self._connect() as db:
                return db.execute(query).fetchall()
        except (sqlite3.DatabaseError, ValueError) as exc:
            raise self._damaged(_unreadable_row(exc)) from None

    def _damaged(self, detail: str) -> CorruptStoreError:
        return CorruptStoreError(
            f"{self.path} is damaged ({detail}); rerun with --repair to move it aside, keep every "
            "readable finished cell and recompute the rest"
        )

    def fingerprint(self) -> str | None:
        """The fingerprint of the config whose cells this store holds (None: a store written before
        stores recorded it)."""
        rows = self._read("SELECT value FROM meta WHERE key = 'fingerprint'")
        return rows[0][0] if rows else None

    def claim(self, fingerprint: str) -> None:
        """Record that this store holds cells of the config ``fingerprint``; a store of another config
        is refused (:class:`StoreMismatchError`), never mixed."""
        with self._connect() as db:
            db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('fingerprint', ?)", (fingerprint,))
        self.check(fingerprint)

    def check(self, fingerprint: str) -> None:
        """Raise :class:`StoreMismatchError` if the store records another config's fingerprint."""
        held = self.fingerprint()
        if held is not None and held != fingerprint:
            raise StoreMismatchError(
                f"{self.path} holds cells of another config (fingerprint {held} ≠ {fingerprint} of the run "
                "directory's config.json); it was copied or replaced: restore the matching store or rerun"
            )

    def finished_keys(self, include_failed: bool = True) -> set[str]:
        query = "SELECT key FROM cells" + ("" if include_failed else " WHERE status = 'ok'")
        return {row[0] for row in self._read(query)}

    def drop_failed(self) -> int:
        with self._connect() as db:
            return db.execute("DELETE FROM cells WHERE status = 'failed'").rowcount

    def put(self, record: CellRecord) -> None:
        """Insert a finished cell in one transaction (an existing key is an error: never twice); a full
        or read-only disk is one :class:`StorageError` line, every cell stored before kept."""
        with storage_errors(self.path, RESUME):
            self._insert(record)

    def _insert(self, record: CellRecord) -> None:
        with self._connect() as db:
            db.execute(
                f"INSERT INTO cells ({COLUMNS}) VALUES ({','.join('?' * WIDTH)})",
                (
                    record.key,
                    record.kind,
                    record.model,
                    record.defense,
                    record.attack,
                    record.round,
                    record.seed,
                    record.status,
                    json.dumps(_json_safe(record.metrics)),
                    json.dumps(_json_safe(record.victims)),
                    record.error,
                    record.images,
                    record.seconds,
                    record.finished or time.time(),
                    json.dumps(record.environment),
                    record.image_png,
                    record.attack_name,
                    None if record.threat is None else json.dumps(record.threat),
                    record.scale,
                ),
            )

    def records(self) -> list[CellRecord]:
        rows = self._read(f"SELECT {COLUMNS} FROM cells ORDER BY rowid")
        try:
            return [_record(r) for r in rows]
        except (ValueError, TypeError) as exc:  # a cell's JSON cut short by a damaged page
            raise self._damaged(_unreadable_row(exc)) from None


def _unreadable_row(exc: BaseException) -> str:
    return f"a cell row is unreadable: {type(exc).__name__}: {' '.join(str(exc).split())[:120]}"


def _record(r: tuple) -> CellRecord:
    """A stored row (columns in CellRecord's field order) → the record; ValueError if it is damaged."""
    return CellRecord(
        *r[:8],
        json.loads(r[8]),
        json.loads(r[9]),
        *r[10:14],
        json.loads(r[14] or "{}"),
        r[15],
        r[16],
        json.loads(r[17]) if r[17] else None,
        r[18],
    )


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and an atomic rename: ``path`` is the old file or
    the new one, never a part; a full, read-only or misnamed target is one :class:`StorageError` line,
    the temporary file removed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with storage_errors(path, "the file was left as it was"):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise


def repair_store(path: Path) -> tuple[int, Path]:
    """Move a damaged store aside (``results.sqlite.corrupt-<time>``) and start a new one holding every
    cell row that can still be read from it, row by row. Returns (rows kept, where the old file went)."""
    path = Path(path)
    aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
    os.replace(path, aside)
    rows = []
    try:
        old = sqlite3.connect(f"file:{aside}?mode=ro", uri=True)
        try:
            last = _last_rowid(old)
            for rowid in range(1, last + 1):
                try:
                    row = old.execute("SELECT * FROM cells WHERE rowid = ?", (rowid,)).fetchone()
                except (sqlite3.DatabaseError, ValueError):  # ValueError: text that is not UTF-8
                    continue
                if row is not None and len(row) in (14, 16, WIDTH):
                    rows.append(tuple(row) + (None,) * (WIDTH - len(row)))
        finally:
            old.close()
    except sqlite3.DatabaseError:
        rows = []
    store = ResultStore(path)
    kept = 0
    with store._connect() as db:
        for row in rows:
            try:
                _record(row)  # every field decodes, or the row is not kept
                db.execute(f"INSERT OR IGNORE INTO cells ({COLUMNS}) VALUES ({','.join('?' * WIDTH)})", row)
                kept += 1
            except (ValueError, TypeError, sqlite3.DatabaseError):
                continue
    return kept, aside


def _last_rowid(db: sqlite3.Connection) -> int:
    """The largest rowid of ``cells``, or a probe of the first ids when the table's index is damaged."""
    try:
        value = db.execute("SELECT max(rowid) FROM cells").fetchone()[0]
        return int(value or 0)
    except sqlite3.DatabaseError:
        return 100_000
