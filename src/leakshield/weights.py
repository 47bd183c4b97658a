"""Reading users' weights files: safetensors only (never unpickled), with one line for a file that is
empty, truncated, a renamed pickle or of another architecture."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from leakshield.errors import ConfigError


def read_state(path: str | Path, what: str) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file ``path``; ``what`` names the setting in the error line."""
    path = Path(path).expanduser()
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
        detail = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise ConfigError(f"{what}: {path} is not a readable .safetensors file ({detail})") from None


def load_weights(module: nn.Module, path: str | Path, what: str) -> nn.Module:
    """``module`` with the state dict of ``path``; a file of another architecture is one line naming the
    first missing, unexpected or differently shaped tensor."""
    state = read_state(path, what)
    expected = module.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shaped = [k for k in expected if k in state and tuple(state[k].shape) != tuple(expected[k].shape)]
    if missing or unexpected or shaped:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing (e.g. {missing[0]})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected (e.g. {unexpected[0]})")
        if shaped:
            k = shaped[0]
            parts.append(f"{len(shaped)} of another shape (e.g. {k}: {tuple(state[k].shape)}, expected "
                         f"{tuple(expected[k].shape)})")  # fmt: skip
        raise ConfigError(f"{what}: {path} does not fit {type(module).__name__}: tensors " + "; ".join(parts))
    module.load_state_dict(state)
    return module
