"""APRIL's closed-form recovery of a Vision Transformer's input from one gradient (Lu et al., *APRIL:
Finding the Achilles' Heel on Privacy for Vision Transformers*, CVPR 2022, Sec. 4).

A ViT adds a learnable positional embedding E to the patch embeddings: z = [cls; P W_eᵀ + b_e] + E, so
for a batch of one the gradient of E *is* the gradient of the first block's input, A = ∂L/∂z (T×d).
Any linear map that reads z then gives a linear system in z:

* ``attention`` (the paper's route, its precondition: the first block's attention reads z itself,
  Fig. 1A): q, k, v = z W_{q,k,v}ᵀ + b, so ∂L/∂W = (∂L/∂Y)ᵀ z and ∂L/∂z = ∂L/∂Y W, hence
  Aᵀ z = Wᵀ ∂L/∂W summed over q, k, v (the fused ``qkv`` weight at once). Least squares gives z (exact
  when A has rank T ≤ d); z − E minus the embedding bias inverts the patch embedding's known weight
  (exact when d ≥ C·p²).
* ``embedding`` (the same identity one layer earlier; it needs no block design): the patch embedding
  is linear in the patches P, so ∂L/∂W_e = A_pᵀ P with A_p the patch rows of A; least squares gives P
  (exact when the patches' rows of A have rank, i.e. patches ≤ d). It holds for the standard pre-norm
  ViT, whose residual stream defeats the attention route.

Both need the update of one image: a batch of B sums B gradients, the systems no longer hold, and the
least-squares estimate (returned in every slot) is not a reconstruction of any of its images.
"""

from __future__ import annotations

import time
from typing import Literal

import pydantic
import torch
import torch.nn.functional as F
from torch import nn

from leakshield.attacks.base import ATTACKS, Attack, Reconstruction
from leakshield.attacks.passive.analytic import require_one_gradient
from leakshield.attacks.passive.labels import granted_or_inferred_labels
from leakshield.fl.types import ServerView
from leakshield.registry import Params
from leakshield.threats import OBSERVER


class AprilParams(Params):
    """route: ``attention`` (the paper's closed form through the first attention's weights; the first
    block must read the embeddings directly), ``embedding`` (through the patch embedding's gradient;
    any ViT) or ``auto`` (attention where its precondition holds, else embedding)."""

    route: Literal["auto", "attention", "embedding"] = pydantic.Field(
        default="auto", description="which linear system recovers the embeddings (see the docstring)"
    )


def vision_transformer(model: nn.Module) -> tuple[str, nn.Module]:
    """(name, module) of the first submodule with a learnable ``pos_embed`` and a convolutional
    ``patch_embed`` whose kernel equals its stride (leakshield's ``vit``; timm-style models whose
    ``patch_embed.proj`` is that convolution match too); ValueError if there is none."""
    for name, module in model.named_modules():
        embed = getattr(module, "patch_embed", None)
        embed = getattr(embed, "proj", embed)
        pos = getattr(module, "pos_embed", None)
        if (
            isinstance(pos, nn.Parameter)
            and isinstance(embed, nn.Conv2d)
            and embed.kernel_size == embed.stride
        ):
            return name, module
    raise ValueError("no Vision Transformer with a learnable positional embedding (pos_embed) in this model")


def _patch_conv(vit: nn.Module) -> tuple[str, nn.Conv2d]:
    embed = vit.patch_embed
    return ("patch_embed.proj", embed.proj) if hasattr(embed, "proj") else ("patch_embed", embed)


def _attention_first(vit: nn.Module) -> bool:
    first = vit.blocks[0] if hasattr(vit, "blocks") and len(vit.blocks) else None
    return bool(getattr(first, "attention_first", False)) and hasattr(first.attn, "qkv")


def _lstsq(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.linalg.lstsq(a, b, driver="gelsd").solution


@ATTACKS.register(
    "april",
    summary="closed-form recovery of a ViT's input through its positional embedding's gradient (batch 1)",
    reference="Lu et al., APRIL, CVPR 2022 (Sec. 4, closed-form attack)",
    params=AprilParams,
    threat=OBSERVER,
)
class AprilAttack(Attack):
    """Exact on one image's FedSGD gradient of a ViT whose token width is at least its token count
    (attention route) or patch count (embedding route); beyond batch 1 its estimate is no image."""

    params: AprilParams

    def check_model(self, model: nn.Module, shape: tuple[int, int, int]) -> None:
        """Refuse a model without a learnable positional embedding, or too narrow for the system."""
        self._target(model, shape)

    def _target(self, model: nn.Module, shape: tuple[int, int, int]) -> tuple[str, nn.Module, str]:
        """(qualified name, module, route) of the ViT APRIL attacks, checked (ValueError, the reason)."""
        prefix, vit = vision_transformer(model)
        if not vit.pos_embed.requires_grad:
            raise ValueError("the positional embedding is frozen: APRIL reads its gradient, never sent")
        route = self._route(vit)
        width, tokens = vit.pos_embed.shape[-1], vit.pos_embed.shape[-2]
        _, conv = _patch_conv(vit)
        patch_size = conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1]
        rows = tokens if route == "attention" else tokens - self._leading(vit, shape)
        if width < rows:
            raise ValueError(f"APRIL's {route} route needs token width ≥ {rows}, the model has {width}")
        if route == "attention" and width < patch_size:
            raise ValueError(f"inverting the patch embedding needs token width ≥ {patch_size}, not {width}")
        return prefix, vit, route

    def _route(self, vit: nn.Module) -> str:
        route = self.params.route
        if route == "auto":
            return "attention" if _attention_first(vit) else "embedding"
        if route == "attention" and not _attention_first(vit):
            raise ValueError(
                "the attention route needs a first block whose attention reads the embeddings "
                "directly (vit-april); use route: embedding"
            )
        return route

    @staticmethod
    def _leading(vit: nn.Module, shape: tuple[int, int, int]) -> int:
        """Tokens before the patches (the class token)."""
        _, conv = _patch_conv(vit)
        patches = (shape[1] // conv.stride[0]) * (shape[2] // conv.stride[1])
        return vit.pos_embed.shape[-2] - patches

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        start = time.perf_counter()
        require_one_gradient(view, "APRIL")
        info = view.data_info
        prefix, vit, route = self._target(view.model, info.shape)
        name = (prefix + ".") if prefix else ""
        gradient = view.update.gradient()
        conv_name, conv = _patch_conv(vit)
        read = f"{name}blocks.0.attn.qkv.weight" if route == "attention" else f"{name}{conv_name}.weight"
        needed = {f"{name}pos_embed", f"{name}{conv_name}.weight", read}
        missing = sorted(key for key in needed if key not in gradient)
        if missing:
            raise ValueError(f"the update carries no gradient of {', '.join(missing)}")
        leading = self._leading(vit, info.shape)
        position_grad = gradient[f"{name}pos_embed"].double().reshape(vit.pos_embed.shape[-2:]).cpu()
        if route == "attention":
            qkv = vit.blocks[0].attn.qkv
            weight = qkv.weight.detach().double().cpu()
            qkv_grad = gradient[read].double().cpu()
            tokens = _lstsq(position_grad.T, weight.T @ qkv_grad)  # Aᵀ z = Wᵀ ∂L/∂W
            embedded = tokens - vit.pos_embed.detach().double().cpu().reshape(tokens.shape)
            embedded = embedded[leading:]
            if conv.bias is not None:
                embedded = embedded - conv.bias.detach().double().cpu()
            kernel = conv.weight.detach().double().cpu().flatten(1)  # d × C·p²
            patches = _lstsq(kernel, embedded.T).T  # P W_eᵀ = embedded
        else:
            kernel_grad = gradient[read].double().cpu().flatten(1)
            patches = _lstsq(position_grad[leading:].T, kernel_grad)  # A_pᵀ P = ∂L/∂W_e
        image = F.fold(
            patches.T.unsqueeze(0).float(), info.shape[1:], kernel_size=conv.kernel_size, stride=conv.stride
        )
        inputs = image.expand(view.batch_size, -1, -1, -1).contiguous()
        images = info.denormalize(inputs).clamp(0, 1)
        stats = {"seconds": time.perf_counter() - start, "attention_route": float(route == "attention")}
        return Reconstruction(
            images=images, labels=granted_or_inferred_labels(view).cpu(), stats=stats, normalized=inputs
        )
