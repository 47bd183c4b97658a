"""The result store of a run directory: one SQLite row per finished cell, written atomically.

A cell's row is inserted in a single transaction after its images are on disk, so a run killed at any
moment leaves either the complete row or none; a rerun recomputes exactly the missing cells.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    finished REAL NOT NULL
);
"""


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


def _json_safe(value: Any) -> Any:
    """NaN/Inf become None so the JSON stays standard."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


class ResultStore:
    """SQLite-backed store at ``run_dir/results.sqlite``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        with self._connect() as db:
            db.executescript(SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30)
        try:
            with db:
                yield db
        finally:
            db.close()

    def finished_keys(self, include_failed: bool = True) -> set[str]:
        query = "SELECT key FROM cells" + ("" if include_failed else " WHERE status = 'ok'")
        with self._connect() as db:
            return {row[0] for row in db.execute(query)}

    def drop_failed(self) -> int:
        with self._connect() as db:
            return db.execute("DELETE FROM cells WHERE status = 'failed'").rowcount

    def put(self, record: CellRecord) -> None:
        """Insert a finished cell in one transaction (an existing key is an error: never twice)."""
        with self._connect() as db:
            db.execute(
                "INSERT INTO cells VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
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
                ),
            )

    def records(self) -> list[CellRecord]:
        with self._connect() as db:
            rows = db.execute("SELECT * FROM cells ORDER BY rowid").fetchall()
        # columns are in CellRecord's field order
        return [CellRecord(*r[:8], json.loads(r[8]), json.loads(r[9]), *r[10:]) for r in rows]


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and an atomic rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
