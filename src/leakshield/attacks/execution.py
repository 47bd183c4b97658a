"""How an attack runs, as opposed to what it computes: the path that solves many victims (one by one,
vmapped, compiled), when to try compiling, and how many worker processes share the victims. These
change speed, never the method: they are not attack parameters, enter no config fingerprint, artifact
key or cell key, and a config may set them per attack (``{name: ig, path: loop}``) or for the whole run
(``execution:``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import pydantic

from leakshield.registry import Params

#: the field names an attack entry of a config may carry besides its parameters
EXECUTION_FIELDS = ("path", "compile_after", "victim_shards")


class Execution(Params):
    """path: how independent victims of one FedSGD round on one deterministic eval-mode model are
    attacked: ``auto`` (default) measures and takes the fastest (see
    :mod:`~leakshield.attacks.passive.inversion.calibration`), ``loop`` one by one, ``vectorized`` one vmapped
    step for all (batched L-BFGS for L-BFGS), ``compiled`` that step compiled with torch.compile
    (checked against eager on the first step, eager when it fails). The BatchNorm prior and joint labels
    with Adam/SGD always run one by one. compile_after: with ``auto``, try compiling only when the eager
    estimate exceeds this many seconds (a compilation takes 10–100 s). victim_shards: attack the victims
    in that many single-threaded worker processes, each taking its path as above (CPU only; at most one
    per core; unsharded inside ``leakshield run --workers N`` or Ray workers). calibration_dir: where the
    path measurements are remembered (the run's ``--cache-dir``; default: the default cache folder)."""

    path: Literal["auto", "loop", "vectorized", "compiled"] = "auto"
    compile_after: float = pydantic.Field(default=120.0, ge=0)
    victim_shards: int = pydantic.Field(default=1, ge=1)
    calibration_dir: str | None = None


def split_execution(params: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the method's parameters, the execution settings) of an attack entry's parameters."""
    method = {k: v for k, v in (params or {}).items() if k not in EXECUTION_FIELDS}
    execution = {k: v for k, v in (params or {}).items() if k in EXECUTION_FIELDS}
    return method, execution
