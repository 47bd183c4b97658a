"""Gradients of a model's training loss, shared by clients, defenses and attacks: the plain minibatch
gradient, the gradient of any loss for every parameter, and per-sample gradients (DP-SGD's clipping,
ATS's scores, DCS²)."""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from leakshield.loss import training_loss


def parameter_gradients(
    model: nn.Module, loss: torch.Tensor, *, retain_graph: bool = False
) -> dict[str, torch.Tensor]:
    """∇θ ``loss`` for every named parameter of ``model``, detached; zeros for parameters the loss does
    not reach."""
    names, params = zip(*model.named_parameters(), strict=True)
    grads = torch.autograd.grad(loss, params, retain_graph=retain_graph, allow_unused=True)
    return {
        n: (g.detach() if g is not None else torch.zeros_like(p))
        for n, p, g in zip(names, params, grads, strict=True)
    }


def plain_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """∇θ of the batch's training loss (mean cross-entropy plus the model's auxiliary terms), for every
    parameter (zeros where unused)."""
    return parameter_gradients(model, training_loss(model, model(x), y))


def per_sample_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """∇θ of each sample's training loss, stacked along a leading batch dimension (``torch.func.vmap``
    of ``grad``, the computation of Opacus's functorch path; one sample after another for a model whose
    ``per_sample_by_loop`` is true, such as ``transformers``' models, whose mask code branches on the
    data, which vmap cannot batch). Model buffers are read, not updated; stochastic layers draw
    independent randomness per sample."""
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = dict(model.named_buffers())

    def sample_loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, {**p, **buffers}, (xi.unsqueeze(0),))
        return training_loss(model, logits, yi.unsqueeze(0))

    if getattr(model, "per_sample_by_loop", False):
        each = [grad(sample_loss)(params, xi, yi) for xi, yi in zip(x, y, strict=True)]
        return {name: torch.stack([g[name] for g in each]) for name in params}
    return vmap(grad(sample_loss), in_dims=(None, 0, 0), randomness="different")(params, x, y)
