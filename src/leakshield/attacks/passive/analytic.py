"""Analytic recovery of a fully connected layer's input from its weight and bias gradients
(Phong et al. 2017; Geiping et al. 2020, Prop. D.1; Balunović et al. 2022 against PRECODE).

For y = Wx + b and a batch of one, ∂L/∂W_l = (∂L/∂y_l)·xᵀ and ∂L/∂b_l = ∂L/∂y_l, so every row with a
nonzero bias gradient gives x = ∇W_l / ∇b_l exactly. For a larger batch a row isolates one sample when
only that sample reaches it (ReLU cuts the others); such rows still give exact inputs, mixed rows give
blends. The attack takes the first fully connected layer whose input is the (flattened) image.
"""

from __future__ import annotations

import time

import pydantic
import torch
import torch.nn.functional as F
from torch import nn

from leakshield.attacks.base import ATTACKS, Attack, Reconstruction
from leakshield.attacks.passive.labels import granted_or_inferred_labels
from leakshield.fl.types import ServerView
from leakshield.registry import Params
from leakshield.threats import OBSERVER


class AnalyticParams(Params):
    """layer: name of the Linear layer to invert (default: the first one fed by the image).
    min_bias_grad: rows whose |∇b| is below this fraction of the largest are ignored (numerical noise).
    duplicate_cosine: candidate inputs closer than this cosine similarity count as one sample."""

    layer: str | None = None
    min_bias_grad: float = pydantic.Field(default=1e-6, ge=0)
    duplicate_cosine: float = pydantic.Field(default=0.999, gt=0, le=1)


def first_linear_fed_by_image(model: nn.Module, shape: tuple[int, int, int]) -> str:
    """Name of the first nn.Linear whose input is exactly the flattened input image (a probe forward).
    The probe and any layer that samples during it draw from a fork of the random streams: the caller's
    stream is left as it was."""
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        probe = torch.rand(2, *shape, device=device)
        seen = _linear_inputs(model, probe)
    for name, inputs in seen.items():
        if inputs.shape == (2, probe[0].numel()) and torch.allclose(inputs, probe.flatten(1)):
            return name
    raise ValueError("no fully connected layer of this model receives the image itself")


def _linear_inputs(model: nn.Module, probe: torch.Tensor) -> dict[str, torch.Tensor]:
    """The input each nn.Linear of ``model`` receives on ``probe`` (its first call)."""
    seen: dict[str, torch.Tensor] = {}

    def recorder(name: str):
        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            seen.setdefault(name, inputs[0].detach())

        return hook

    handles = [
        m.register_forward_hook(recorder(n)) for n, m in model.named_modules() if isinstance(m, nn.Linear)
    ]
    try:
        with torch.no_grad():
            model(probe)
    finally:
        for h in handles:
            h.remove()
    return seen


def pad_with_mean(inputs: torch.Tensor, batch_size: int) -> torch.Tensor:
    """``inputs`` completed to ``batch_size`` rows by their mean (an attack that recovered fewer
    inputs than the batch holds)."""
    if len(inputs) >= batch_size:
        return inputs
    return torch.cat(
        [inputs, inputs.mean(0, keepdim=True).expand(batch_size - len(inputs), *inputs.shape[1:])]
    )


def require_one_gradient(view: ServerView, attack: str) -> None:
    """Raise unless the update is one gradient (FedSGD, or FedAvg with one local step): the closed-form
    attacks read its structure, which several local steps blend."""
    if view.update.protocol.algorithm != "fedsgd" and view.update.protocol.local_steps != 1:
        raise ValueError(f"{attack} needs a FedSGD gradient (or a one-step FedAvg update)")


@ATTACKS.register(
    "analytic",
    summary="exact recovery of the input of the first fully connected layer from ∇W / ∇b",
    reference="Phong et al. 2017; Geiping et al., NeurIPS 2020 (Prop. D.1); Balunović et al., ICLR 2022",
    params=AnalyticParams,
    threat=OBSERVER,
)
class AnalyticFCInversion(Attack):
    """Recovers images fed straight into a Linear layer (MLPs, PRECODE placed after one); FedSGD only."""

    params: AnalyticParams

    def check_model(self, model: nn.Module, shape: tuple[int, int, int]) -> None:
        """Refuse, before a run, a model without the layer it inverts: the named ``layer`` must be a
        fully connected one, or (no name) some fully connected layer must read the image itself."""
        if self.params.layer is None:
            try:
                first_linear_fed_by_image(model, shape)
            except ValueError:
                raise ValueError(
                    "it inverts a fully connected layer fed by the image (e.g. mlp's first), and no fully "
                    "connected layer of this model reads the image; name another with 'layer'"
                ) from None
        else:
            layer = dict(model.named_modules()).get(self.params.layer)
            pixels = shape[0] * shape[1] * shape[2]
            if not isinstance(layer, nn.Linear) or layer.in_features != pixels or layer.bias is None:
                raise ValueError(
                    f"layer {self.params.layer!r} is not a fully connected layer with a bias reading the "
                    f"{pixels} pixels of an image (what it inverts)"
                )

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        start = time.perf_counter()
        require_one_gradient(view, "the analytic attack")
        info = view.data_info
        layer = self.params.layer or first_linear_fed_by_image(view.model, info.shape)
        gradient = view.update.gradient()
        grad_w, grad_b = gradient[f"{layer}.weight"].double(), gradient[f"{layer}.bias"].double()
        candidates = self._candidates(grad_w, grad_b, view.batch_size)
        inputs = candidates.float().view(-1, *info.shape).cpu()
        inputs = pad_with_mean(inputs, view.batch_size)  # fewer isolated rows than samples
        images = info.denormalize(inputs).clamp(0, 1)
        labels = granted_or_inferred_labels(view)
        stats = {"rows_used": float(len(candidates)), "seconds": time.perf_counter() - start}
        return Reconstruction(images=images, labels=labels.cpu(), stats=stats, normalized=inputs)

    def _candidates(self, grad_w: torch.Tensor, grad_b: torch.Tensor, n: int) -> torch.Tensor:
        strength = grad_b.abs()
        keep = strength > self.params.min_bias_grad * strength.max().clamp_min(1e-30)
        order = torch.argsort(strength, descending=True)
        chosen: list[torch.Tensor] = []
        for row in order[keep[order]]:
            x = grad_w[row] / grad_b[row]
            if all(F.cosine_similarity(x, c, dim=0) < self.params.duplicate_cosine for c in chosen):
                chosen.append(x)
            if len(chosen) == n:
                break
        if not chosen:
            raise ValueError("every bias gradient of the layer is zero: nothing to invert")
        return torch.stack(chosen)
