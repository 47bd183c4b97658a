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
2. select B of the candidates greedily: B independent ones, sparsest first, then (at most B) swaps of
   a selected direction for an unused candidate while the *sparsity matching coefficient* λ rises
   (:class:`SparsityMatch`: the fraction of
   (unit, sample) pairs where the ReLU pattern of the recovered Z = W X + b agrees with the zeros of
   ∂L/∂Z = L Q; 1 for the true Q). ``greedy: false`` keeps the first stage alone;
3. fix each direction's scale with the bias gradient, ∂L/∂b = L Q 1 (Sec. 4.3), and read Xᵀ = Q⁻¹ R.

A subset falls inside one given column's zeros with probability about 2^−(B−1), inside some column's
with about B·2^−(B−1); collecting all B columns (coupon collector) takes about 2^(B−1)·H_B subsets in
expectation (H_B the B-th harmonic number), so the cost grows exponentially with B (``samples``
bounds it). The attack stops once the directions found span all B dimensions; when the budget runs out first,
the missing directions are completed by an orthogonal complement and ``stats["directions"]`` says how
many were found (Q⁻¹ then mixes every sample with the missing ones: few images stay exact). The recovered
batch is checked against the ReLU pattern it implies (``stats["relu_agreement"]``: λ of the final
selection, 1 when exact).

The greedy stage is leakshield's reading of the paper's greedy selection (its Fig. 2: "a greedy
selection method selects b directions"). The paper's text was not available when it was written, so its
two stages and the definition of λ are not checked against the paper's algorithm; the cost estimate is
derived here, not quoted.
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
    by the image; samples: most row subsets drawn (the budget; about 2^(B−1)·H_B are needed, H_B the
    B-th harmonic number); chunk: subsets solved at once; zero_tolerance: an entry of L q below this
    fraction of its largest is a zero; min_sparsity: fraction of a direction's entries that must be zero
    to be a candidate; greedy: the paper's greedy selection (swaps while the sparsity matching rises)."""

    layer: str | None = pydantic.Field(
        default=None, description="Linear layer on the image, with bias and a ReLU after it (default: first)"
    )
    samples: int = pydantic.Field(default=262_144, ge=1, description="most row subsets drawn")
    chunk: int = pydantic.Field(default=8192, ge=1, description="row subsets solved at once")
    zero_tolerance: float = pydantic.Field(default=1e-5, gt=0, lt=1, description="relative size of a zero")
    min_sparsity: float = pydantic.Field(default=0.15, gt=0, lt=1, description="zero fraction of a candidate")
    greedy: bool = pydantic.Field(
        default=True,
        description="select by sparsity matching, the paper's greedy stage (false: sparsest first only)",
    )


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


def sparsest_independent(directions: torch.Tensor, zeros: torch.Tensor, rank: int) -> list[int]:
    """The first greedy stage: at most ``rank`` linearly independent candidates, sparsest first."""
    chosen: list[int] = []
    for i in torch.argsort(zeros, descending=True, stable=True).tolist():
        if independent_columns(directions[[*chosen, i]].T):
            chosen.append(i)
        if len(chosen) == rank:
            break
    return chosen


def independent_columns(columns: torch.Tensor) -> bool:
    """Whether the columns are linearly independent (smallest singular value above 1e-6 of the largest)."""
    s = torch.linalg.svdvals(columns)
    return float(s[-1] / s[0]) > 1e-6


def completed(columns: torch.Tensor, rank: int) -> torch.Tensor:
    """``columns`` (rank×k) completed to rank×rank by an orthonormal basis of what they leave out."""
    if columns.shape[1] == rank:
        return columns
    q, _ = torch.linalg.qr(torch.cat([columns, torch.eye(rank, dtype=columns.dtype)], dim=1))
    return torch.cat([columns, q[:, columns.shape[1] : rank]], dim=1)


class SparsityMatch:
    """The sparsity matching coefficient λ of a selection (leakshield's reading): with its scales fixed
    by ∂L/∂b, Q = basis·diag(s) gives ∂L/∂Z = L Q and Zᵀ = Q⁻¹ R Wᵀ + b; λ is the fraction of (unit, sample)
    pairs where Z > 0 exactly where ∂L/∂Z is nonzero (zero: below ``tolerance`` of its column's
    largest entry, as in the search). The true Q gives 1; a blend for a column breaks that column's
    pattern and, through Q⁻¹, the samples it mixes."""

    def __init__(
        self,
        left: torch.Tensor,
        right: torch.Tensor,
        grad_b: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        tolerance: float,
    ) -> None:
        self.left, self.bias, self.tolerance = left, bias, tolerance
        self.coefficients = torch.linalg.lstsq(left, grad_b.unsqueeze(1), driver="gelsd").solution.squeeze(1)
        self.projected = right @ weight.T  # R Wᵀ (rank×m): Zᵀ = Q⁻¹ R Wᵀ + b without forming X

    def __call__(self, basis: torch.Tensor) -> float:
        scales = fixed_scales(basis, self.coefficients)
        active = torch.linalg.solve(basis * scales, self.projected) + self.bias > 0  # rank × m
        upstream = (self.left @ basis).abs()
        nonzero = (upstream > self.tolerance * upstream.amax(dim=0).clamp_min(1e-300)).T
        return float((active == nonzero).double().mean())


def greedy_selection(
    directions: torch.Tensor, zeros: torch.Tensor, rank: int, match: SparsityMatch | None
) -> tuple[torch.Tensor, int]:
    """SPEAR's greedy selection of ``rank`` directions among the candidates (leakshield's reading): the
    sparsest independent ones (completed to ``rank`` when too few), then, while λ rises and is below 1,
    the swap of one selected (or completing) column for an unused candidate that raises λ the most.
    Without ``match``, the first stage alone. Returns (rank×rank, one direction per column; how many
    columns are candidates rather than completion)."""
    chosen = sparsest_independent(directions, zeros, rank)
    basis = completed(directions[chosen].T, rank)
    source = chosen + [-1] * (rank - len(chosen))  # the candidate in each column (-1: completion)
    if match is None or len(directions) == 0:
        return basis, len(chosen)
    best_score = match(basis)
    for _ in range(rank):  # a swap per round; each raises λ, and ``rank`` fix every column
        if best_score >= 1.0:
            break
        best_swap = None
        for c in (i for i in range(len(directions)) if i not in source):
            for j in range(rank):
                trial = basis.clone()
                trial[:, j] = directions[c]
                if not independent_columns(trial):
                    continue
                score = match(trial)
                if score > best_score:
                    best_score, best_swap = score, (c, j)
        if best_swap is None:
            break
        c, j = best_swap
        basis[:, j], source[j] = directions[c], c
    return basis, sum(s >= 0 for s in source)


def scaled_inputs(
    left: torch.Tensor, right: torch.Tensor, basis: torch.Tensor, grad_b: torch.Tensor
) -> torch.Tensor:
    """Xᵀ = Q⁻¹ R with Q = basis·diag(s), s fixed by ∂L/∂b = L Q 1 (B×n, one sample per row)."""
    coefficients = torch.linalg.lstsq(left, grad_b.unsqueeze(1), driver="gelsd").solution.squeeze(1)
    return torch.linalg.solve(basis * fixed_scales(basis, coefficients), right)


def fixed_scales(basis: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
    """The scales s of Q = basis·diag(s) from ∂L/∂b = L Q 1 (Sec. 4.3): basis·s = L⁺ ∂L/∂b."""
    scales = torch.linalg.solve(basis, coefficients)
    return torch.where(scales.abs() < 1e-30, torch.ones_like(scales), scales)


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
        weight = module.weight.detach().double().cpu()
        bias = module.bias.detach().double().cpu()
        match = SparsityMatch(left, right, grad_b, weight, bias, self.params.zero_tolerance)
        basis, selected = greedy_selection(directions, zeros, rank, match if self.params.greedy else None)
        samples = scaled_inputs(left, right, basis, grad_b)
        agreement = match(basis)
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
