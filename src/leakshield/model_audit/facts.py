"""What an audit must know about a user's model before it plans attacks: it builds, it runs on one
image of the user's data, its output has one column per class; its size, its first layer (the one the
image reaches first: the analytic attacks and the trap-weights server need a fully connected one) and
whether it normalises with BatchNorm (GradInversion's prior)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from leakshield.data.types import DatasetSplits
from leakshield.errors import ConfigError
from leakshield.experiment.config import Component
from leakshield.models import create_model
from leakshield.models.imported import exception_line


@dataclass(frozen=True)
class ModelFacts:
    """label, parameters (trainable), the first layer with parameters the image reaches (its class and
    shape in words), whether it is fully connected, whether the model holds BatchNorm that tracks
    running statistics (what GradInversion's prior matches), its output shape on one image and the
    data's image shape and classes."""

    label: str
    parameters: int
    first_layer: str
    first_linear: bool
    batchnorm: bool
    output: tuple[int, ...]
    image: tuple[int, int, int]
    classes: int

    def lines(self) -> list[str]:
        """The facts as the plan prints them."""
        c, h, w = self.image
        return [
            f"model {self.label}: {self.parameters:,} trainable parameters; output {self.output} on one "
            f"{c}×{h}×{w} image ({self.classes} classes)",
            f"first layer the image reaches: {self.first_layer}"
            + (" (fully connected)" if self.first_linear else ""),
            "BatchNorm: " + ("yes" if self.batchnorm else "no"),
        ]


def _describe(module: nn.Module) -> str:
    if isinstance(module, nn.Linear):
        return f"Linear ({module.in_features} → {module.out_features})"
    if isinstance(module, nn.Conv2d):
        k = "×".join(str(s) for s in module.kernel_size)
        return f"Conv2d ({module.in_channels} → {module.out_channels}, {k})"
    return type(module).__name__


def build_checked(spec: Component, data: DatasetSplits, seed: int = 0) -> nn.Module:
    """The model of ``spec`` built for ``data`` (one line on failure, naming the model)."""
    info = data.info
    try:
        return create_model(
            spec.name, spec.params, in_shape=info.shape, num_classes=info.num_classes, seed=seed
        )
    except ConfigError:
        raise
    except Exception as exc:  # a registered model that cannot take this shape
        raise ConfigError(
            f"model {spec.display}: building it for {info.shape} images raised {exception_line(exc)}"
        ) from None


def inspect_model(spec: Component, data: DatasetSplits) -> ModelFacts:
    """Build ``spec`` for ``data``, run one public image through it and read its facts; a model that
    does not run on the data's images or whose output does not match the classes is one line."""
    info = data.info
    model = build_checked(spec, data)
    order: list[nn.Module] = []
    hooks = [
        m.register_forward_hook(lambda module, _i, _o: order.append(module))
        for m in model.modules()
        if any(True for _ in m.parameters(recurse=False))
    ]
    source = data.public if len(data.public) else data.train
    image = info.normalize(source.x[:1].float())
    model.eval()
    try:
        with torch.no_grad():
            output = model(image)
    except Exception as exc:
        c, h, w = info.shape
        raise ConfigError(
            f"model {spec.display}: a forward pass on one {c}×{h}×{w} image of the data "
            f"raised {exception_line(exc)}"
        ) from None
    finally:
        for hook in hooks:
            hook.remove()
    if not isinstance(output, torch.Tensor) or tuple(output.shape) != (1, info.num_classes):
        shape = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        raise ConfigError(
            f"model {spec.display}: output {shape} on one image; the data has "
            f"{info.num_classes} classes, so (1, {info.num_classes}) (a factory that takes "
            "num_classes receives it)"
        )
    if not any(p.requires_grad for p in model.parameters()):
        raise ConfigError(f"model {spec.display}: no trainable parameters, so no update to share or attack")
    first = order[0] if order else None
    return ModelFacts(
        label=spec.display,
        parameters=sum(p.numel() for p in model.parameters() if p.requires_grad),
        first_layer=_describe(first) if first is not None else "none (no parameters)",
        first_linear=isinstance(first, nn.Linear),
        batchnorm=any(isinstance(m, _BatchNorm) and m.running_mean is not None for m in model.modules()),
        output=tuple(output.shape),
        image=info.shape,
        classes=info.num_classes,
    )
