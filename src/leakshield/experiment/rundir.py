"""A run directory: its stored config (fingerprinted) and result store, and the rules for reusing it."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import yaml

from leakshield.errors import LeakshieldError, RunDirectoryError
from leakshield.experiment.config import ExperimentConfig, parse_config
from leakshield.experiment.lock import LOCK_FILE
from leakshield.experiment.store import atomic_write_bytes

CONFIG_FILE = "config.json"
STORE_FILE = "results.sqlite"
ARTIFACTS_FILE = "artifacts.json"


def check_run_dir(config: ExperimentConfig, out: Path) -> bool:
    """Whether ``out`` already holds a run of ``config`` (False: it does not exist or is empty).

    Raises :class:`RunDirectoryError`, touching nothing, if it holds a different config or is not a run.
    """
    marker = out / CONFIG_FILE
    if marker.exists():
        try:
            stored = json.loads(marker.read_text())
        except (OSError, ValueError):
            raise RunDirectoryError(f"{out}: unreadable {CONFIG_FILE}; not a leakshield run") from None
        if not isinstance(stored, dict):
            raise RunDirectoryError(f"{out}: {CONFIG_FILE} is not a run's record; not a leakshield run")
        if stored.get("fingerprint") != config.fingerprint():
            raise RunDirectoryError(
                f"{out} holds a run of a different config ({stored.get('name', '?')}, fingerprint "
                f"{stored.get('fingerprint')} ≠ {config.fingerprint()}); choose another --out or delete it"
            )
        return True
    if out.exists() and not out.is_dir():
        raise RunDirectoryError(f"{out} is a file, not a run directory; choose another --out")
    if not out.exists():
        _check_creatable(out)
    if out.exists() and any(p.name != LOCK_FILE for p in out.iterdir()):
        raise RunDirectoryError(
            f"{out} exists, is not empty and is not a leakshield run; choose another --out"
        )
    return False


def _check_creatable(out: Path) -> None:
    """Refuse an --out that cannot be created: under a file, or in a folder this process cannot write
    (probed with a temporary folder that is removed at once, so nothing is left behind)."""
    ancestor = out.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise RunDirectoryError(f"{out}: {ancestor} is a file, so the run directory cannot be created there")
    try:
        probe = tempfile.mkdtemp(prefix=".leakshield-probe-", dir=ancestor)
    except OSError as exc:
        raise RunDirectoryError(f"{out}: cannot create it in {ancestor} ({exc.strerror or exc})") from None
    os.rmdir(probe)


def prepare_run_dir(config: ExperimentConfig, out: Path) -> None:
    """Create ``out`` for ``config`` (writing its config files), or accept a run of the same config; its
    stored config is refreshed, so a changed report layout (not part of the fingerprint) takes effect."""
    check_run_dir(config, out)
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "name": config.name,
        "fingerprint": config.fingerprint(),
        "config": config.model_dump(mode="json"),
    }
    atomic_write_bytes(out / "config.yaml", yaml.safe_dump(payload["config"], sort_keys=False).encode())
    atomic_write_bytes(out / CONFIG_FILE, json.dumps(payload, indent=2).encode())


def load_run_config(run_dir: Path) -> ExperimentConfig:
    """The config stored in a run directory."""
    marker = Path(run_dir) / CONFIG_FILE
    if not marker.is_file():
        raise RunDirectoryError(f"{run_dir}: no {CONFIG_FILE}; not a leakshield run directory")
    try:
        stored = json.loads(marker.read_text())
        return parse_config(stored["config"], source=str(marker))
    except (OSError, ValueError, KeyError, TypeError, LeakshieldError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise RunDirectoryError(
            f"{marker}: damaged or not a run's record ({type(exc).__name__}: {reason})"
        ) from None
