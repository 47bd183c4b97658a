"""How float32 matrix products and convolutions run on a GPU: ``float32`` (IEEE single precision, the
default) or ``tf32`` (NVIDIA's tensor-float-32: a 10-bit mantissa inside the products, several times
faster on Ampere and newer cards). On a CPU the choice changes nothing.

The choice is process-wide (torch's backend flags) and travels to worker processes through the
environment variable :data:`ENV`, which :func:`apply_matmul_precision` reads; every cell records it in
its environment, since a reconstruction's numbers may depend on it (docs/speed-and-scale.md measures by
how much). ``float32`` also turns off TF32 in cuDNN's convolutions, which torch otherwise allows."""

from __future__ import annotations

import os
from typing import Literal

import torch

from leakshield.errors import LeakshieldError

MatmulPrecision = Literal["float32", "tf32"]
CHOICES: tuple[str, ...] = ("float32", "tf32")
ENV = "LEAKSHIELD_MATMUL_PRECISION"


def matmul_precision() -> str:
    """The choice in force for this process and the workers it starts (default ``float32``)."""
    choice = os.environ.get(ENV, "float32")
    if choice not in CHOICES:
        raise LeakshieldError(f"{ENV}={choice!r}; allowed: {', '.join(CHOICES)}")
    return choice


def set_matmul_precision(choice: str) -> None:
    """Make ``choice`` the precision of this process and of the worker processes it starts."""
    if choice not in CHOICES:
        raise LeakshieldError(f"--matmul-precision {choice!r}; allowed: {', '.join(CHOICES)}")
    os.environ[ENV] = choice
    apply_matmul_precision()


def apply_matmul_precision() -> str:
    """Set torch's CUDA matmul and cuDNN flags to the choice in force, when one was made (the
    environment variable is set: by the CLI, or inherited by a worker); returns what is in force.

    torch's ``allow_tf32`` flags are used, not its newer per-operation ``fp32_precision`` ones: they set
    those consistently, whereas setting the new ones makes a later read of ``torch.backends.cudnn.
    allow_tf32`` (which torch's compiler does for convolutions) raise "a mix of the legacy and new APIs"
    (torch 2.13)."""
    if ENV in os.environ:
        tf32 = matmul_precision() == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    return precision_in_force()


def precision_in_force() -> str:
    """What torch's flags say now: ``tf32`` (matmuls and convolutions may use TF32), ``float32`` (neither)
    or ``float32, cudnn tf32`` (torch's own default: matmuls in float32, cuDNN's convolutions in TF32)."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    if matmul == cudnn:
        return "tf32" if matmul else "float32"
    return "float32, cudnn tf32" if cudnn else "tf32, cudnn float32"
