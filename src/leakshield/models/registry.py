"""The model registry and :func:`create_model`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from leakshield.registry import Registry

MODELS: Registry[nn.Module] = Registry("model")


def _user_models(name: str):
    from leakshield.models.imported import imported_entry

    return imported_entry(name)


MODELS.add_resolver(_user_models)


def create_model(
    name: str,
    params: Mapping[str, Any] | None = None,
    *,
    in_shape: tuple[int, int, int],
    num_classes: int,
    seed: int = 0,
) -> nn.Module:
    """Build a registered model for ``in_shape`` (C, H, W) and ``num_classes``, initialized from ``seed``.

    The same name, parameters, shape and seed give bit-identical parameters; the global RNG is left as
    it was. The model remembers ``input_shape`` (model stages of defenses use it to probe widths).

    >>> create_model("lenet", in_shape=(3, 32, 32), num_classes=10)(torch.zeros(2, 3, 32, 32)).shape
    torch.Size([2, 10])
    """
    entry, implied = MODELS.resolve(name)
    validated = entry.validate({**implied, **(params or {})})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = entry.factory(validated, in_shape=tuple(in_shape), num_classes=num_classes)
    model.input_shape = tuple(in_shape)
    return model


def list_models() -> list[str]:
    return MODELS.names()
