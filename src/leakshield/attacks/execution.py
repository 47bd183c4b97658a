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
EXECUTION_FIELDS = (
    "path",
    "compile_after",
    "victim_shards",
    "lbfgs_bookkeeping",
    "memory_limit_gib",
    "cuda_graphs",
)


class Execution(Params):
    """path: how independent victims of one FedSGD round on one deterministic eval-mode model are
    attacked: ``auto`` (default) measures and takes the fastest (see
    :mod:`~leakshield.attacks.passive.inversion.calibration`), ``loop`` one by one, ``vectorized`` one vmapped
    step for all (batched L-BFGS for L-BFGS), ``compiled`` that step compiled with torch.compile
    (checked against eager on the first step, eager when it fails). The BatchNorm prior and joint labels
    with Adam/SGD always run one by one. compile_after: with ``auto``, try compiling only when the eager
    estimate exceeds this many seconds (default: 120 on a CPU, where a compilation takes 10–100 s; 5 on a
    GPU, where it took 6–13 s on an H200). victim_shards: attack the victims
    in that many single-threaded worker processes, each taking its path as above (CPU only; at most one
    per core; unsharded inside ``leakshield run --workers N`` or Ray workers). calibration_dir: where the
    path measurements are remembered (the run's ``--cache-dir``; default: the default cache folder).
    lbfgs_bookkeeping: where batched L-BFGS keeps its per-victim state: ``device`` (beside the
    evaluations, the default) or ``host`` (the CPU, so that a GPU holds only the evaluations; on an H200
    it ran about as fast as on the device, 170 against 166 evaluation rounds per second with CUDA
    graphs: docs/speed-and-scale.md).
    memory_limit_gib: attack as if the device had at most this much memory (chunks sized to half of
    what is free under it; None: the device's own free memory), to plan for a smaller card.
    cuda_graphs: on a CUDA device, replay a compiled step as one CUDA graph (torch.compile's
    ``reduce-overhead`` mode; default true): small models' steps are many short kernels whose launches,
    not their arithmetic, set the pace there. Ignored on a CPU and on the other paths."""

    path: Literal["auto", "loop", "vectorized", "compiled"] = "auto"
    compile_after: float | None = pydantic.Field(default=None, ge=0)
    victim_shards: int = pydantic.Field(default=1, ge=1)
    calibration_dir: str | None = None
    lbfgs_bookkeeping: Literal["device", "host"] = "device"
    memory_limit_gib: float | None = pydantic.Field(default=None, gt=0)
    cuda_graphs: bool = True


def split_execution(params: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the method's parameters, the execution settings) of an attack entry's parameters."""
    method = {k: v for k, v in (params or {}).items() if k not in EXECUTION_FIELDS}
    execution = {k: v for k, v in (params or {}).items() if k in EXECUTION_FIELDS}
    return method, execution
