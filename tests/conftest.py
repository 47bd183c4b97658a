"""Shared fixtures. The location of the real victim images (``../shared/data`` beside the repository,
or ``$LEAKSHIELD_SHARED_DATA``) is defined here and nowhere else."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from leakshield.data import load_dataset

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("LEAKSHIELD_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real test images; under CI its absence is a failure, locally a skip."""
    if not (SHARED_DATA / "cifar10_victims128.npz").is_file():
        message = f"real test images not found at {SHARED_DATA} (set LEAKSHIELD_SHARED_DATA)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return SHARED_DATA


@pytest.fixture(scope="session")
def rotten_tomatoes_csv(shared_data: Path) -> Path:
    """The Rotten Tomatoes corpus (critic snippets and plot summaries), bzip2-compressed CSV."""
    return shared_data / "rotten_tomatoes_corpus_full.csv.bz2"


@pytest.fixture(scope="session")
def cifar_victims(shared_data: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The PRECODE paper's 128 CIFAR-10 victims as float images N×3×32×32 in [0, 1] and labels."""
    with np.load(shared_data / "cifar10_victims128.npz", allow_pickle=False) as npz:
        images = torch.from_numpy(npz["images"]).permute(0, 3, 1, 2).float() / 255.0
        labels = torch.from_numpy(npz["labels"]).long()
    return images.contiguous(), labels


@pytest.fixture(scope="session")
def digits3():
    """The embedded digits at 32×32×3 (the acceptance setting)."""
    return load_dataset("digits", {"channels": 3, "size": 32})


@pytest.fixture(scope="module")
def digits16():
    """The embedded digits at 16 px, grey: the leaderboard's protocol."""
    return load_dataset("digits", {"channels": 1, "size": 16})


@pytest.fixture(autouse=True)
def _artifact_cache_in_tmp(tmp_path_factory, monkeypatch):
    """Fitted artifacts go to a fresh folder per test, never to the user's cache."""
    monkeypatch.setenv("LEAKSHIELD_CACHE_DIR", str(tmp_path_factory.mktemp("artifact-cache")))


@pytest.fixture(autouse=True)
def _no_timed_path_choice(monkeypatch):
    """Many-victim attacks take the vectorized path without a timed calibration: a choice made by the
    clock could differ from run to run (test_calibration tests the choice itself on fake timings)."""
    from leakshield.attacks.passive.inversion import calibration

    monkeypatch.setattr(calibration, "SMALL_JOB", 10**12)


#: the number of pytest-xdist workers sharing the machine (1 without xdist)
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


@pytest.fixture(autouse=True)
def _few_threads():
    """Two threads, or one per xdist worker when workers share the cores (``LEAKSHIELD_TEST_THREADS``
    overrides; CI reruns the determinism tests at another count)."""
    cores = max((os.cpu_count() or 1) // WORKERS, 1)
    torch.set_num_threads(int(os.environ.get("LEAKSHIELD_TEST_THREADS", min(2, cores))))


#: test files that start Ray or a Flower simulation (on Ray): under xdist they run on one worker, one
#: after the other, never two local Ray clusters at once
RAY_FILES = {
    "test_docs.py",
    "test_flower.py",
    "test_flower_detectors.py",
    "test_flower_hostile.py",
    "test_flower_secagg.py",
    "test_dp_audit_flower.py",
    "test_import_paths.py",
    "test_leakage_filter.py",
    "test_parallel.py",
}


def pytest_collection_modifyitems(config, items):
    """``LEAKSHIELD_REVERSE_TESTS=1`` runs the tests in reverse order: no test may depend on another
    having run first. Under xdist (``make test``: ``-n 2 --dist loadgroup``) a file's tests stay on one
    worker (its module fixtures are built once) and the Ray files share one."""
    if os.environ.get("LEAKSHIELD_REVERSE_TESTS") == "1":
        items.reverse()
    for item in items:
        name = item.path.name
        item.add_marker(pytest.mark.xdist_group("ray" if name in RAY_FILES else name))
