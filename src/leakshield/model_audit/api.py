"""``leakshield.audit``: the audit of ``leakshield audit`` from Python, on a model class or factory and
data held in memory, a folder or a file.

>>> report = leakshield.audit(SmallNet, train=(x, y), test=(x_test, y_test), budget=0.02)  # doctest: +SKIP
>>> report.to_html()[:15], report.to_pdf("audit.pdf")                                      # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import importlib
import io
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from torch import nn

from leakshield.data.types import ImageSet
from leakshield.errors import ConfigError
from leakshield.experiment.store import atomic_write_bytes
from leakshield.fl.config import FLConfig
from leakshield.model_audit.config import AuditConfig, parse_audit_config, with_absolute_root
from leakshield.model_audit.membership_risk import run_membership
from leakshield.model_audit.pdf import find_chromium
from leakshield.model_audit.report import AuditReport, build_report
from leakshield.model_audit.run import (
    CONFIG_FILE,
    DATA,
    AuditPlan,
    audit_records,
    check_audit_folder,
    check_resumable,
    check_workers,
    make_plan,
    print_estimate,
    run_plan,
)
from leakshield.models.imported import IMPORT_PREFIX, register_local

#: what ``train`` and ``test`` may be
Data = ImageSet | tuple[Any, Any] | str | Path | dict[str, Any]


def model_spec(model: Any) -> dict[str, Any]:
    """The config entry of ``model``: a registered name, ``module:name``, a mapping as a config writes
    it, or a class / factory (named by its import path when it is importable from a module, else handed
    over in this process)."""
    if isinstance(model, nn.Module):
        raise ConfigError(
            "model: pass the model's class or a function that builds it (the audit builds "
            "one per seed), not an instance"
        )
    if isinstance(model, dict):
        return dict(model)
    if isinstance(model, str):
        path = model.removeprefix(IMPORT_PREFIX)
        return {"import": path} if ":" in path else {"name": model}
    if not callable(model):
        raise ConfigError(
            f"model: {type(model).__name__}; give an nn.Module class, a factory, a registered "
            "name or 'module:name'"
        )
    module, qualname = getattr(model, "__module__", ""), getattr(model, "__qualname__", "")
    if (
        module
        and module != "__main__"
        and "<locals>" not in qualname
        and _importable(module, qualname, model)
    ):
        return {"import": f"{module}:{qualname}"}
    return {"name": register_local(model), "label": getattr(model, "__name__", "model")}


def _importable(module: str, qualname: str, model: Callable[..., Any]) -> bool:
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return False
    return found is model


def data_section(train: Data, test: Data | None, folder: Path) -> dict[str, Any]:
    """The config's ``data`` for ``train`` (and ``test``): a mapping as it is, a folder (``imagefolder``,
    its own test split), an ``.npz`` file (``test``: another one), or arrays written to ``folder`` as
    ``.npz`` files named by their content (other arrays, another file: the audit's key changes)."""
    if isinstance(train, dict | str | Path) and test is not None and not _is_npz(train):
        raise ConfigError(
            "test: a data mapping or a folder names its own test split (a folder's test/ or "
            "the held-out share); give test with arrays or with an .npz file"
        )
    if isinstance(train, dict):
        return dict(train)
    if isinstance(train, str | Path):
        path = Path(train).expanduser().resolve()
        if not _is_npz(train):
            return {"name": "imagefolder", "root": str(path)}
        out = {"name": "npz", "root": str(path.parent), "file": path.name}
        if test is not None:
            if not _is_npz(test):
                raise ConfigError(
                    "test: with an .npz file for train, give the test split as an .npz file too"
                )
            out["test_file"] = str(Path(str(test)).expanduser().resolve())
        return out
    if isinstance(test, str | Path):
        raise ConfigError("test: with arrays for train, give the test split as arrays too")
    out = {"name": "npz", "root": str(folder), "file": _write_npz(train, folder, "train")}
    if test is not None:
        out["test_file"] = _write_npz(test, folder, "test")
    return out


def _is_npz(data: Any) -> bool:
    return isinstance(data, str | Path) and Path(data).suffix == ".npz"


def _write_npz(data: Data, folder: Path, where: str) -> str:
    """Write ``data`` (an ImageSet or an (images, labels) pair) to ``folder/<where>-<digest>.npz``; the
    file's name."""
    if isinstance(data, ImageSet):
        x, y = data.x, data.y
    elif isinstance(data, tuple) and len(data) == 2:
        x, y = data
    else:
        raise ConfigError(
            f"{where}: expected an ImageSet or an (images, labels) pair (or, for train, a folder, an .npz "
            f"file or a data mapping); got {type(data).__name__}"
        )
    images = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    labels = y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    whole = labels.size and np.issubdtype(labels.dtype, np.number) and np.all(np.mod(labels, 1) == 0)
    if labels.ndim != 1 or not whole or labels.min() < 0:
        raise ConfigError(
            f"{where}: labels of shape {labels.shape} and type {labels.dtype}; expected one "
            "class index (0, 1, …) per image"
        )
    labels = labels.astype(np.int64)
    digest = hashlib.sha256(repr((images.shape, images.dtype.str)).encode())
    digest.update(np.ascontiguousarray(images).tobytes())
    digest.update(labels.tobytes())
    name = f"{where}-{digest.hexdigest()[:12]}.npz"
    if not (folder / name).is_file():
        buffer = io.BytesIO()
        np.savez(buffer, images=images, labels=labels)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(folder / name, buffer.getvalue())
    return name


def audit(
    model: Any,
    train: Data,
    test: Data | None = None,
    *,
    federation: FLConfig | dict[str, Any] | None = None,
    threats: Sequence[str] | None = None,
    budget: float = 0.02,
    defenses: Sequence[Any] = (),
    out: str | Path | None = None,
    name: str = "audit",
    workers: int = 1,
    device: str = "auto",
    progress: bool = True,
    cache_dir: str | Path | None = None,
    estimate: bool = False,
    pdf: bool = False,
    **settings: Any,
) -> AuditReport:
    """Audit ``model`` (a class or factory; see :func:`model_spec`) trained on ``train`` and measured on
    ``test`` in ``federation`` (an :class:`~leakshield.fl.config.FLConfig` or its mapping), for the
    ``threats`` (default all: ``honest-server``, ``malicious-server``, ``malicious-client``) with an
    accuracy ``budget`` in [0, 1]; ``defenses``: what the federation runs now. ``settings``: any other
    field of the audit config (``rounds``, ``seeds``, ``candidates``, ``victims``, ``effort``…). Runs into
    ``out`` (default ``runs/<name>``; a rerun resumes), writes ``audit.html`` (and ``audit.pdf`` with
    ``pdf``) and the config as ``audit.yaml`` (what ``leakshield audit`` reruns), and returns the report.
    ``estimate``: print the time estimate first (its probes take seconds to a minute)."""
    folder = Path(out) if out is not None else Path("runs") / name
    check_audit_folder(folder)  # before the data is written into it
    data: dict[str, Any] = {
        "name": name,
        "model": model_spec(model),
        "data": data_section(train, test, folder / DATA),
        "budget": budget,
        "defenses": list(defenses),
        **settings,
    }
    if federation is not None:
        data["federation"] = (
            federation.model_dump(mode="json") if isinstance(federation, FLConfig) else federation
        )
    if threats is not None:
        data["threats"] = list(threats)
    config = with_absolute_root(parse_audit_config(data, source="leakshield.audit"), Path.cwd())
    plan = make_plan(config)
    if progress:
        sys.stdout.write("\n".join(plan.lines()) + "\n")
    if estimate:
        check_resumable(plan, folder)
        check_workers(plan, workers)
        print_estimate(plan, folder, workers=workers, device=device, cache_dir=cache_dir)
    return run_audit(
        plan, folder, pdf=pdf, workers=workers, device=device, progress=progress, cache_dir=cache_dir
    )


def run_audit(plan: AuditPlan, out: Path, *, pdf: bool = False, **options: Any) -> AuditReport:
    """Run ``plan`` into ``out`` (resuming; ``options``: those of :func:`run_plan`), write its report
    (``audit.html``; ``audit.pdf`` too with ``pdf``) and return it."""
    check_resumable(plan, out)
    if pdf:
        find_chromium()  # a missing browser is said now, not after the run
    out.mkdir(parents=True, exist_ok=True)
    config: AuditConfig = plan.config
    atomic_write_bytes(
        out / CONFIG_FILE, yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False).encode()
    )
    counts = run_plan(plan, out, **options)
    membership = None
    if plan.membership is not None:
        membership, computed, kept = run_membership(
            plan.membership, out, device=options.get("device", "auto"), progress=options.get("progress", True)
        )
        counts = {**counts, "membership_computed": computed, "membership_stored": kept}
    records = audit_records(out, config)
    report = build_report(config, plan.facts, plan.attacks, records, out, membership, plan.left_out)
    report.counts = counts
    report.files = report.write(pdf=pdf)
    return report
