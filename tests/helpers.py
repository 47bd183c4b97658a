"""Tiny experiment configs for the runner and CLI tests (seconds, not minutes)."""

from __future__ import annotations

import copy
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

TINY: dict[str, Any] = {
    "name": "tiny",
    "seeds": [0],
    "dataset": {"name": "digits", "channels": 1, "size": 16},
    "models": ["lenet"],
    "fl": {"clients": 2, "local": {"algorithm": "fedavg", "local_lr": 0.1, "batch_size": 32}},
    "attack": {"rounds": [0], "update": {"algorithm": "fedsgd"}},
    "victims": {"count": 2, "batch_size": 1, "seed": 0},
    "defenses": ["none"],
    "attacks": [{"name": "ig", "iterations": 20}],
    "utility": {"rounds": 1},
}


def tiny_config(**overrides: Any) -> dict[str, Any]:
    config = copy.deepcopy(TINY)
    config.update(overrides)
    return config


def write_config(path: Path, data: dict[str, Any] | str) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def client_context(seed: int = 0, *, data=None, info=None, public=None, batch=None, client_id: int = 0):
    """A client stage's context for unit tests: ``data`` is the client's dataset (default: empty),
    ``info`` the dataset facts (default: a 1×1×1 grey image, 10 classes), the generator seeded."""
    import torch

    from leakshield.data.types import DatasetInfo, ImageSet
    from leakshield.defenses import ClientContext

    if data is None:
        data = ImageSet(torch.zeros(0, 1, 1, 1), torch.zeros(0, dtype=torch.long))
    if info is None:
        info = DatasetInfo("test", (1, 1, 1), 10, (0.0,), (1.0,))
    return ClientContext(
        client_id=client_id,
        round=0,
        dataset=data,
        info=info,
        generator=torch.Generator().manual_seed(seed),
        public=public,
        batch=batch,
    )


@contextmanager
def watchdog(seconds: int = 120) -> Iterator[None]:
    """Fail instead of hanging the suite when the body runs longer than ``seconds`` (a hang detector
    for bodies that take milliseconds; not a speed assertion)."""

    def expired(signum, frame):
        raise AssertionError(f"no answer within {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
