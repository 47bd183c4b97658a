"""SPEAR: exact recovery of a whole batch through a fully connected layer followed by ReLU (Dimitrov et
al., *SPEAR: Exact Gradient Inversion of Batches in Federated Learning*, NeurIPS 2024).

For Z = W X + b 1ᵀ (X: n×B, one column per sample) the weight gradient is ∂L/∂W = (∂L/∂Z) Xᵀ, of rank B
when B < n, m (Thm. 3.1). Factor it as L R (SVD, L: m×B); then ∂L/∂Z = L Q and Xᵀ = Q⁻¹ R for an unknown
invertible Q (Thm. 3.2). ReLU zeroes ∂L/∂Z wherever a unit is inactive, so each column of ∂L/∂Z = L q_i
is sparse (about half its entries are exact zeros). A direction q with L_S q = 0 for B−1 rows S lies in
a 1-dimensional kernel; when S falls inside one column's zeros, that kernel is q_i (Sec. 4.1). So:

1. sample row subsets S, take each kernel direction, keep those whose L q is sparse (a random kernel
   direction has only its B−1 forced zeros; rank-deficient subsets are skipped) and that pass the
   leverage test of :func:`confirmed` (leakshield's: a blend of samples whose ReLU patterns overlap is
   sparse too);
2. select B independent candidates, sparsest first (greedy, Sec. 4.2);
3. fix each direction's scale with the bias gradient, ∂L/∂b = L Q 1 (Sec. 4.3), and read Xᵀ = Q⁻¹ R.

A subset succeeds with probability about 2^−(B−1) per column, so the cost grows exponentially with B
(``samples`` bounds it). The attack stops once B directions are found; when the budget runs out first,
the missing directions are completed by an orthogonal complement and ``stats["directions"]`` says how
many were found (Q⁻¹ then mixes every sample with the missing ones: few images stay exact). The recovered
batch is checked against the ReLU pattern it implies (``stats["relu_agreement"]``, 1 when exact).
"""

from __future__ import annotations

import math
import time

import pydantic
import torch
from torch import nn

from leakshield.attacks.base import ATTACKS, Attack, Reconstruction
from leakshield.attacks.passive.analytic import first_linear_fed_by_image, pad_with_mean, require_one_gradient
from leakshield.attacks.passive.labels import granted_or_inferred_labels
from leakshield.fl.types import ServerView
from leakshield.registry import Params
from leakshield.threats import OBSERVER


class SpearParams(Params):
    """SPEAR's search. layer: the Linear layer (followed by ReLU) to invert, default the first one fed
    by the image; samples: most row subsets drawn (the budget; ~2^(B−1)·B·ln B are needed); chunk:
    subsets solved at once; zero_tolerance: an entry of L q below this fraction of its largest is a
    zero; min_sparsity: fraction of a direction's entries that must be zero to be a candidate."""

    layer: str | None = pydantic.Field(
        default=None, description="Linear layer on the image, with bias and a ReLU after it (default: first)"
    )
    samples: int = pydantic.Field(default=262_144, ge=1, description="most row subsets drawn")
    chunk: int = pydantic.Field(default=8192, ge=1, description="row subsets solved at once")
    zero_tolerance: float = pydantic.Field(default=1e-5, gt=0, lt=1, description="relative size of a zero")
    min_sparsity: float = pydantic.Field(default=0.15, gt=0, lt=1, description="zero fraction of a candidate")


#: a (B−1)×B row subset whose smallest singular value is below this fraction of its largest has a kernel
#: of dimension ≥ 2 (measured on float32 gradients of a 1024-unit layer: 1e-10 for such subsets, ≥ 4e-6
#: for subsets inside one column's zeros)
DEGENERATE = 1e-8


#: the largest leverage a column's zero row may have. Measured on untrained 2 × 1024 MLPs, 3 batches
#: each: a true column's largest is ≤ 0.18 on CIFAR-10 up to batch 24 and ≤ 0.51 on the digits up to 16
#: (0.76 at 24, whose ReLU patterns overlap more); a blend's accidental rows have 0.88–1.0
LEVERAGE = 0.8


def followed_by_relu(model: nn.Module, layer: str) -> bool:
    """Whether the module right after ``layer`` in its parent container is a ReLU."""
    parent_name, _, child = layer.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    names = [name for name, _ in parent.named_children()]
    if child not in names or names.index(child) + 1 == len(names):
        return False
    return isinstance(getattr(parent, names[names.index(child) + 1]), nn.ReLU)


def low_rank_factors(
    grad_w: torch.Tensor, rank: int, generator: torch.Generator, oversample: int = 10
) -> tuple[torch.Tensor, torch.Tensor]:
    """L (m×rank), R (rank×n) with ∂L/∂W ≈ L R: the leading singular triplets (L = U·S, R = Vᵀ), by a
    randomized range finder with two power iterations (Halko et al. 2011), exact for a rank-``rank``
    matrix and far cheaper than a full SVD of a wide layer."""
    width = min(rank + oversample, *grad_w.shape)
    probe = torch.randn(grad_w.shape[1], width, generator=generator, dtype=grad_w.dtype)
    basis, _ = torch.linalg.qr(grad_w @ probe)
    for _ in range(2):
        basis, _ = torch.linalg.qr(grad_w @ (grad_w.T @ basis))
    u, s, vh = torch.linalg.svd(basis.T @ grad_w, full_matrices=False)
    return (basis @ u[:, :rank]) * s[:rank], vh[:rank]


def kernel_directions(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For a stack of (B−1)×B matrices: each one's unit kernel direction and its smallest nonzero
    singular value relative to its largest (≈0 when the rows are rank-deficient)."""
    _, s, vh = torch.linalg.svd(rows)
    return vh[:, -1, :], s[:, -1] / s[:, 0].clamp_min(1e-300)


def confirmed(left: torch.Tensor, zero_rows: torch.Tensor) -> bool:
    """Whether a sparse direction is a column of ∂L/∂Z rather than a blend of columns whose ReLU
    patterns overlap. A blend vanishes on the columns' common zeros, where L has a kernel of dimension
    ≥ 2, plus a few accidental rows that pin it down: each such row is essential to its zero rows'
    rank B−1 (leverage ≈ 1). A column's zero rows share that rank among hundreds of rows (leverage
    (B−1)/|zeros| on average); the bound is :data:`LEVERAGE`. Measured on CIFAR-10: a blend of two
    columns (1 accidental row among 323 zeros, batch 16) and one of three (2 rows with leverage 0.88 and
    0.90 among 166, batch 8) passed the sparsity test; this rejects both."""
    rows = left[zero_rows]
    norms = rows.norm(dim=1, keepdim=True)
    alive = norms.squeeze(1) > 1e-9 * left.norm(dim=1).max()  # units off for every sample say nothing
    rows = rows[alive] / norms[alive]  # the leverage of directions, not of sizes
    if len(rows) < left.shape[1] - 1:
        return False
    u, _, _ = torch.linalg.svd(rows, full_matrices=False)
    leverage = (u[:, : left.shape[1] - 1] ** 2).sum(dim=1)  # the rank B−1 the direction leaves
    return bool(leverage.max() < LEVERAGE)


def numerical_rank(directions: torch.Tensor) -> int:
    """How many of ``directions`` (k×B) are linearly independent (singular values above 1e-6 of the
    largest): a blend of columns already found adds none, so the search goes on past it."""
    s = torch.linalg.svdvals(directions)
    return int((s > 1e-6 * s[0]).sum())


def sparse_candidates(
    left: torch.Tensor, params: SpearParams, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Sample subsets until the confirmed sparse directions span all ``rank`` dimensions or the budget is
    spent: (unit directions k×B, their zero counts, subsets drawn)."""
    m, rank = left.shape
    need_zeros = max(rank, params.min_sparsity * m)
    found: list[torch.Tensor] = []
    zeros_found: list[int] = []
    drawn = 0
    independent = 0
    while drawn < params.samples and independent < rank:
        count = min(params.chunk, params.samples - drawn)
        subsets = torch.rand(count, m, generator=generator).topk(rank - 1, dim=1).indices
        drawn += count
        directions, conditioning = kernel_directions(left[subsets])
        images = left @ directions.T  # m × count: the candidate columns of ∂L/∂Z
        is_zero = images.abs() <= params.zero_tolerance * images.abs().amax(dim=0).clamp_min(1e-300)
        zeros = is_zero.sum(dim=0)
        keep = (zeros >= need_zeros) & (conditioning > DEGENERATE)
        for i in torch.nonzero(keep).flatten().tolist():
            q = directions[i] * torch.sign(directions[i][directions[i].abs().argmax()])
            if any(abs(float(q @ f)) > 1 - 1e-4 for f in found):
                continue
            if confirmed(left, torch.nonzero(is_zero[:, i]).flatten()):
                found.append(q)
                zeros_found.append(int(zeros[i]))
                independent = numerical_rank(torch.stack(found))
                if independent == rank:
                    break
    if not found:
        return left.new_zeros(0, rank), left.new_zeros(0), drawn
    return torch.stack(found), torch.tensor(zeros_found, dtype=left.dtype), drawn


def select_independent(directions: torch.Tensor, zeros: torch.Tensor, rank: int) -> tuple[torch.Tensor, int]:
    """Greedy selection (sparsest first) of at most ``rank`` linearly independent directions, completed
    to ``rank`` by an orthonormal basis of what they leave out: (rank×rank, one direction per column;
    how many were selected rather than completed)."""
    chosen: list[torch.Tensor] = []
    for i in torch.argsort(zeros, descending=True).tolist():
        trial = torch.stack([*chosen, directions[i]], dim=1)
        s = torch.linalg.svdvals(trial)
        if float(s[-1] / s[0]) > 1e-6:
            chosen.append(directions[i])
        if len(chosen) == rank:
            break
    basis = torch.stack(chosen, dim=1) if chosen else directions.new_zeros(rank, 0)
    if basis.shape[1] < rank:
        q, _ = torch.linalg.qr(torch.cat([basis, torch.eye(rank, dtype=basis.dtype)], dim=1))
        basis = torch.cat([basis, q[:, basis.shape[1] : rank]], dim=1)
    return basis, len(chosen)


def scaled_inputs(
    left: torch.Tensor, right: torch.Tensor, basis: torch.Tensor, grad_b: torch.Tensor
) -> torch.Tensor:
    """Xᵀ = Q⁻¹ R with Q = basis·diag(s), s fixed by ∂L/∂b = L Q 1 (B×n, one sample per row)."""
    coefficients = torch.linalg.lstsq(left, grad_b.unsqueeze(1), driver="gelsd").solution.squeeze(1)
    scales = torch.linalg.solve(basis, coefficients)
    scales = torch.where(scales.abs() < 1e-30, torch.ones_like(scales), scales)
    return torch.linalg.solve(basis * scales, right)


def relu_agreement(
    weight: torch.Tensor, bias: torch.Tensor, inputs: torch.Tensor, upstream: torch.Tensor, tolerance: float
) -> float:
    """Fraction of (unit, sample) pairs where the recovered pre-activation's sign (> 0) matches a
    nonzero gradient column (the ReLU pattern SPEAR's directions imply; zero: below ``tolerance`` of
    the column's largest entry, as in the search)."""
    active = (inputs @ weight.T + bias) > 0  # B × m
    scale = upstream.abs().amax(dim=0, keepdim=True).clamp_min(1e-300)
    nonzero = (upstream.abs() > tolerance * scale).T  # B × m
    return float((active == nonzero).double().mean())


@ATTACKS.register(
    "spear",
    summary="exact batch recovery through a ReLU layer from its weight gradient's low rank and sparsity",
    reference="Dimitrov et al., SPEAR, NeurIPS 2024 (Sec. 3–4, Alg. 1)",
    params=SpearParams,
    threat=OBSERVER,
)
class SpearAttack(Attack):
    """Needs a FedSGD gradient of a model whose first fully connected layer reads the image and feeds a
    ReLU (mlp), and a batch smaller than that layer's width and input size."""

    params: SpearParams
    probe_budget = "samples"

    def _layer(self, model: nn.Module, shape: tuple[int, int, int]) -> str:
        layer = self.params.layer or first_linear_fed_by_image(model, shape)
        module = model.get_submodule(layer)
        if not isinstance(module, nn.Linear):
            raise ValueError(f"{layer} is not a fully connected layer")
        if module.in_features != (size := math.prod(shape)):
            raise ValueError(f"{layer} does not read the image ({module.in_features} inputs, not {size})")
        if module.bias is None:
            raise ValueError(f"SPEAR fixes the scales with the bias gradient: {layer} has no bias")
        if not followed_by_relu(model, layer):
            raise ValueError(f"SPEAR needs a ReLU right after {layer} (the sparsity it reads)")
        return layer

    def check_model(self, model: nn.Module, shape: tuple[int, int, int]) -> None:
        """Refuse a model without an image-fed Linear + ReLU."""
        self._layer(model, shape)

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        start = time.perf_counter()
        require_one_gradient(view, "SPEAR")
        info = view.data_info
        layer = self._layer(view.model, info.shape)
        module = view.model.get_submodule(layer)
        gradient = view.update.gradient()
        grad_w = gradient[f"{layer}.weight"].double().cpu()
        grad_b = gradient[f"{layer}.bias"].double().cpu()
        if not bool(grad_b.any()):
            raise ValueError(f"every bias gradient of {layer} is zero: nothing to invert")
        rank = min(view.batch_size, *grad_w.shape)
        generator = torch.Generator().manual_seed(seed)
        left, right = low_rank_factors(grad_w, rank, generator)
        if rank == 1:
            directions, zeros, drawn = left.new_ones(1, 1), left.new_ones(1), 0
        else:
            directions, zeros, drawn = sparse_candidates(left, self.params, generator)
        basis, selected = select_independent(directions, zeros, rank)
        samples = scaled_inputs(left, right, basis, grad_b)
        weight = module.weight.detach().double().cpu()
        bias = module.bias.detach().double().cpu()
        agreement = relu_agreement(weight, bias, samples, left @ basis, self.params.zero_tolerance)
        inputs = samples.float().view(rank, *info.shape)
        inputs = pad_with_mean(inputs, view.batch_size)  # a batch wider than the layer
        stats = {
            "directions": float(selected),
            "subsets": float(drawn),
            "relu_agreement": agreement,
            "seconds": time.perf_counter() - start,
        }
        return Reconstruction(
            images=info.denormalize(inputs).clamp(0, 1),
            labels=granted_or_inferred_labels(view).cpu(),
            stats=stats,
            normalized=inputs,
        )
