"""Soteria (Sun et al., *Soteria: Provable Defense against Privacy Leakage in Federated Learning from
Representation Perspective*, CVPR 2021).

The defended layer is the fully connected layer fed by the representation r (by default the model's last
``nn.Linear``). For every feature f the defense scores how much r_f reveals about the input,
``score_f = Σ_batch ||∂r_f/∂x||₂ / (|r_f| + δ)``, and zeroes the columns of that layer's weight gradient
for the features whose score is below the p-th percentile (the bias gradient is released unchanged).
The Jacobian rows ∂r_f/∂x are computed in chunks of features with one batched backward each
(``is_grads_batched``), not one Python-level backward per feature.
"""

from __future__ import annotations

import pydantic
import torch
from torch import nn

from leakshield.defenses.base import DEFENSES, ClientContext, Defense
from leakshield.errors import ConfigError
from leakshield.gradients import parameter_gradients
from leakshield.loss import training_loss
from leakshield.registry import Params


class SoteriaParams(Params):
    """percentile: p, the share of representation features whose weight-gradient columns are pruned
    (reference: 1 in the DLG notebook, 60 in the GS example; DCS² sweeps 20–90). delta: the δ of the
    score's denominator. layer: name of the defended ``nn.Linear`` module (default: the model's last
    Linear, the classifier fed by the features). chunk: features per batched backward. score_samples:
    score on that many randomly chosen samples of the minibatch instead of all (None, the paper's
    definition). The scores cost one input-gradient per feature and sample (576 backward passes per image
    on ConvNet-16, ≈ 1.3 s here), so FL training at scale may need the estimate; the percentile threshold
    only needs the ranking of the batch sum, which a subset estimates."""

    percentile: float = pydantic.Field(default=60.0, ge=0, le=100)
    delta: float = pydantic.Field(default=0.1, gt=0)
    layer: str | None = None
    chunk: int = pydantic.Field(default=128, ge=1)
    score_samples: int | None = pydantic.Field(default=None, ge=1)


def defended_linear(model: nn.Module, layer: str | None = None) -> tuple[str, nn.Linear]:
    """The module name and the ``nn.Linear`` Soteria defends: ``layer`` if given, else the last Linear."""
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    if layer is not None:
        found = [(n, m) for n, m in linears if n == layer]
        if not found:
            names = ", ".join(n for n, _ in linears) or "none"
            raise ConfigError(
                f"soteria.layer: no nn.Linear named {layer!r}; the model's Linear layers: {names}"
            )
        return found[0]
    if not linears:
        raise ConfigError("soteria: the model has no nn.Linear layer to defend")
    return linears[-1]


def representation_scores(r: torch.Tensor, x: torch.Tensor, delta: float, chunk: int = 128) -> torch.Tensor:
    """Σ_batch ||∂r_f/∂x_b||₂ / (|r_{b,f}| + δ) for every feature f (Soteria, Sec. 4 / reference code).

    ``r`` (B × F) must have been computed from ``x`` (which requires grad) with the graph kept. One
    batched backward per chunk of features: the grad output of feature f is one-hot at f for every sample,
    which yields each sample's own Jacobian row when samples do not interact (eval mode, no BatchNorm in
    train mode)."""
    batch, features = r.shape
    scores = torch.empty(features, device=r.device, dtype=r.dtype)
    for start in range(0, features, chunk):
        stop = min(start + chunk, features)
        eye = torch.zeros(stop - start, batch, features, device=r.device, dtype=r.dtype)
        eye[torch.arange(stop - start), :, torch.arange(start, stop)] = 1.0
        (jac,) = torch.autograd.grad(r, x, grad_outputs=eye, retain_graph=True, is_grads_batched=True)
        norms = jac.flatten(2).norm(dim=2)  # chunk × batch
        scores[start:stop] = (norms / (r[:, start:stop].detach().abs().T + delta)).sum(dim=1)
    return scores


@DEFENSES.register(
    "soteria",
    summary="prunes the classifier's weight-gradient columns of the features that reveal most of the "
    "input (smallest ||∂r/∂x||/|r|) [percentile 60]",
    reference="Sun et al., Soteria, CVPR 2021",
    params=SoteriaParams,
)
class Soteria(Defense):
    """Gradient stage: the plain minibatch gradient with the defended layer's weight-gradient columns of
    the lowest-scoring p % features set to 0. The adaptive attack ``soteria-bypass`` drops that layer
    from the matching loss (Balunović et al., ICLR 2022)."""

    params: SoteriaParams

    replaces_gradient = True

    @staticmethod
    def _forward(model: nn.Module, layer: nn.Linear, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The logits and the representation r (the flattened input of ``layer``) of one forward."""
        captured: list[torch.Tensor] = []
        handle = layer.register_forward_pre_hook(lambda _m, inputs: captured.append(inputs[0]))
        try:
            logits = model(x)
        finally:
            handle.remove()
        return logits, captured[0].flatten(1)

    def gradient(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, context: ClientContext
    ) -> dict[str, torch.Tensor]:
        p = self.params
        module_name, layer = defended_linear(model, p.layer)
        x = x.detach().requires_grad_(True)
        logits, r = self._forward(model, layer, x)
        out = parameter_gradients(model, training_loss(model, logits, y), retain_graph=True)
        if p.score_samples is not None and p.score_samples < len(x):
            # a random subset (global RNG, seeded per client step by the client) scores the batch
            chosen = torch.randperm(len(x), device=x.device)[: p.score_samples]
            x = x.detach()[chosen].requires_grad_(True)
            _, r = self._forward(model, layer, x)
        scores = representation_scores(r, x, p.delta, p.chunk)
        threshold = torch.quantile(scores, p.percentile / 100)
        pruned = scores < threshold
        weight_name = f"{module_name}.weight" if module_name else "weight"
        out[weight_name] = out[weight_name].clone()
        out[weight_name][:, pruned] = 0
        return out
