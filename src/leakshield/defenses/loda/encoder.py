"""LODA's encoder (Wan et al., Eq. 4 and Algorithm 1): x′ = argmin_{x′ ∈ [0,1]} ‖g(x′) − g(x*)‖² −
c·‖x′ − x*‖², from a random public image, by T steps of normalized gradient descent (step τ) with a
projection onto valid images. Vectorized: every image of a chunk takes its step at once, each gradient
normalized by its own norm (the images do not interact: the extractor runs in eval mode)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from tqdm.auto import tqdm

from leakshield.data.types import DatasetInfo


def obscure(
    g: Callable[[torch.Tensor], torch.Tensor],
    private: torch.Tensor,
    start: torch.Tensor,
    info: DatasetInfo,
    *,
    c: float,
    steps: int = 500,
    lr: float = 0.1,
    progress: bool = False,
) -> torch.Tensor:
    """Obscured images (pixels in [0, 1]) of ``private`` from ``start`` (public images), one per row."""
    target = g(info.normalize(private)).detach()
    x = start.detach().clone()
    for _ in tqdm(range(steps), desc="LODA encoding", disable=not progress, leave=False):
        x.requires_grad_(True)
        feature = ((g(info.normalize(x)) - target) ** 2).sum(dim=1)
        pixel = ((x - private) ** 2).flatten(1).sum(dim=1)
        (grad,) = torch.autograd.grad((feature - c * pixel).sum(), x)
        norm = grad.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *([1] * (x.ndim - 1)))
        x = (x.detach() - lr * grad / norm).clamp(0.0, 1.0)
    return x.detach()


def eq4_objective(
    g: Callable[[torch.Tensor], torch.Tensor],
    obscured: torch.Tensor,
    private: torch.Tensor,
    info: DatasetInfo,
    c: float,
) -> float:
    """Eq. 4's objective ‖g(x′) − g(x*)‖² − c·‖x′ − x*‖², averaged over the images (lower is better)."""
    with torch.no_grad():
        feature = ((g(info.normalize(obscured)) - g(info.normalize(private))) ** 2).sum(dim=1)
        pixel = ((obscured - private) ** 2).flatten(1).sum(dim=1)
        return float((feature - c * pixel).mean())


def obscure_one_by_one(
    g: Callable[[torch.Tensor], torch.Tensor],
    private: torch.Tensor,
    start: torch.Tensor,
    info: DatasetInfo,
    **kwargs: float,
) -> torch.Tensor:
    """The same, one image at a time (Algorithm 1's loop; for checks and benchmarks)."""
    return torch.cat(
        [obscure(g, private[i : i + 1], start[i : i + 1], info, **kwargs) for i in range(len(private))]
    )


#: a pixel of x′ within this of 0 or 1 sits on the box bound of Eq. 4
BOUND_TOLERANCE = 1e-6


def stationarity_residual(
    g: Callable[[torch.Tensor], torch.Tensor],
    obscured: torch.Tensor,
    candidate: torch.Tensor,
    info: DatasetInfo,
    c: float,
    *,
    kkt: bool = False,
) -> torch.Tensor:
    """‖∇g(x′)ᵀ(g(x′) − g(x)) − c·(x′ − x)‖² per image (Eq. 6), differentiable in ``candidate`` x.

    r = ∇g(x′)ᵀ(g(x′) − g(x)) − c·(x′ − x) is half the gradient of Eq. 4's objective at x′. Eq. 6 asks
    r = 0 at every pixel, but x′ is a minimizer over the box [0, 1]: where x′ sits on a bound, the
    first-order (KKT) condition is an inequality, r ≥ 0 at 0 and r ≤ 0 at 1. ``kkt`` penalizes only
    violations of those (min(r, 0) at 0, max(r, 0) at 1) and keeps r = 0 inside."""
    x_prime = obscured.detach().clone().requires_grad_(True)
    f_prime = g(info.normalize(x_prime))
    f_candidate = g(info.normalize(candidate))
    # ∇g(x′)ᵀ v = ∂/∂x′ ⟨g(x′), v⟩ with v = g(x′) − g(x) held as a vector (a vector-Jacobian product)
    v = f_prime.detach() - f_candidate
    (jtv,) = torch.autograd.grad((f_prime * v).sum(), x_prime, create_graph=True)
    residual = jtv - c * (obscured - candidate)
    if kkt:
        at_zero = obscured <= BOUND_TOLERANCE
        at_one = obscured >= 1 - BOUND_TOLERANCE
        residual = torch.where(
            at_zero, residual.clamp(max=0), torch.where(at_one, residual.clamp(min=0), residual)
        )
    return (residual**2).flatten(1).sum(dim=1)
