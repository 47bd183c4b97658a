"""The span argument behind DAGER (Petrov et al., *DAGER: Exact Gradient Inversion for Large Language
Models*, NeurIPS 2024, Sec. 3): a linear layer's weight gradient is ∂L/∂W = Σ_i δ_i x_iᵀ over the inputs
x_i it saw, so its row space is spanned by those inputs. For a self-attention layer the inputs are the
token states; at the first layer a state is LN(e_v + p_t), a function of the token v and its position t
alone, so a (token, position) pair was in the batch iff its state lies in the span (Theorem 3.1: exact
while the batch holds fewer distinct states than the hidden size, b·n < d, and the weights are in general
position — random ones are).

Everything is float64: the span is read
from the gradient's singular vectors, and a state's distance to it is ‖u − B Bᵀ u‖ for the unit vector u
(DAGER's ``check_if_in_span``, L2 norm).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from leakshield.errors import LeakshieldError
from leakshield.text.models import TextClassifier


@dataclass(frozen=True)
class InputSpan:
    """An orthonormal basis (d × rank) of a layer's input span; ``full_rank``: the gradient's numerical
    rank before the cap at ``d − margin`` (above it the span is truncated and the check loses tokens);
    ``gap``: the first singular value left out over the last kept (0: none left out), the size of the
    rounding a float32 gradient leaves in the basis (measured: true states lay within 0.02–0.13 × it)."""

    basis: torch.Tensor
    full_rank: int
    gap: float = 0.0

    @property
    def rank(self) -> int:
        return self.basis.shape[1]

    @property
    def capped(self) -> bool:
        return self.full_rank > self.rank


def attention_gradient(
    model: TextClassifier, gradient: Mapping[str, torch.Tensor]
) -> tuple[torch.Tensor, float]:
    """The first attention layer's query, key and value weight gradients, each scaled to a largest
    singular value of 1 and stacked ((3·d) × d, float64): every row lies in the span of the layer's
    inputs. DAGER reads the query alone; here no single one suffices: a decoder's first query sees
    nothing (its softmax runs over one key), so GPT-2's query gradient misses position 0, and the
    three differ in conditioning by orders of magnitude (a BERT's value gradient fell to 10⁻⁶ of its
    largest direction by the second), hence the scaling. Also returned: the largest factor a part was
    scaled by (an entry's noise grows by at most it)."""
    if model.kind == "bert":
        prefix = "backbone.encoder.layer.0.attention.self."
        names = [prefix + part + ".weight" for part in ("query", "key", "value")]
    else:
        names = ["backbone.h.0.attn.c_attn.weight"]  # GPT-2's Conv1D: inputs × (3·d)
    missing = [n for n in names if n not in gradient]
    if missing:
        raise LeakshieldError(f"DAGER needs the attention weights' gradients: {missing[0]} is missing")
    if model.kind == "bert":
        parts = [gradient[n].detach().double() for n in names]
    else:
        parts = list(gradient[names[0]].detach().double().T.chunk(3))
    norms = [float(torch.linalg.matrix_norm(p, ord=2)) for p in parts]
    if min(norms) == 0.0:
        raise LeakshieldError("an attention gradient is zero: no span to read")
    return torch.cat([p / n for p, n in zip(parts, norms, strict=True)]), 1.0 / min(norms)


def input_span(
    matrix: torch.Tensor, rank_tolerance: float, margin: int, noise_std: float | None = None
) -> InputSpan:
    """The span of ``matrix``'s rows: the right singular vectors whose singular value exceeds
    ``rank_tolerance`` × the largest (and, under known Gaussian noise of ``noise_std`` per entry, the
    noise matrix's largest singular value, σ(√rows + √d)). A rank of d − 1 or more means the rows fill
    the space (the b·n bound is broken): the span is then cut to its d − ``margin`` strongest
    directions."""
    _, values, vh = torch.linalg.svd(matrix, full_matrices=False)
    if not len(values) or float(values[0]) == 0.0:
        raise LeakshieldError("the attention gradient is zero: no span to read")
    floor = rank_tolerance * float(values[0])
    if noise_std is not None:
        floor = max(floor, noise_std * (matrix.shape[0] ** 0.5 + matrix.shape[1] ** 0.5))
    full = int((values > floor).sum())
    rank = full if full < matrix.shape[1] - 1 else max(0, matrix.shape[1] - margin)
    gap = float(values[rank] / values[rank - 1]) if 0 < rank < len(values) else 0.0
    return InputSpan(vh[:rank].T.contiguous(), full, gap)


def span_distance(span: InputSpan, states: torch.Tensor) -> torch.Tensor:
    """‖u − B Bᵀ u‖ for each state's unit vector u (over the last dimension): 0 in the span, up to 1."""
    unit = states.double()
    unit = unit / unit.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    basis = span.basis.to(unit.device)
    return (unit - (unit @ basis) @ basis.T).norm(dim=-1)


@torch.no_grad()
def first_layer_states(model: TextClassifier, position: int) -> torch.Tensor:
    """Every token's input to the first attention layer at ``position`` (vocabulary × d): BERT's
    LayerNorm(e_v + p_t + type₀), GPT-2's first ln_1(e_v + p_t)."""
    words = model.word_embeddings.weight
    spot = model.position_embeddings.weight[position]
    if model.kind == "bert":
        embeddings = model.backbone.embeddings
        return embeddings.LayerNorm(words + spot + embeddings.token_type_embeddings.weight[0])
    return model.backbone.h[0].ln_1(words + spot)


def _first_feed_forward(model: TextClassifier) -> tuple[str, torch.nn.Module]:
    if model.kind == "bert":
        return "backbone.encoder.layer.0.intermediate.dense.weight", model.backbone.encoder.layer[
            0
        ].intermediate.dense
    return "backbone.h.0.mlp.c_fc.weight", model.backbone.h[0].mlp.c_fc


def context_gradient(model: TextClassifier, gradient: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The first block's feed-forward input weight gradient (4d × d, float64): its rows span the block's
    post-attention states, which depend on the context (the whole sequence, or for a decoder its prefix).
    DAGER checks sequences against the second attention layer; with two blocks that layer is the last,
    where a classifier's single read position collapses the key and value gradients to rank one per
    head, so the check moves to this layer, the first one after attention mixed the tokens."""
    name, _ = _first_feed_forward(model)
    if name not in gradient:
        raise LeakshieldError(f"DAGER needs the feed-forward weights' gradients: {name} is missing")
    matrix = gradient[name].detach().double()
    return matrix if model.kind == "bert" else matrix.T


class _StopForwardError(Exception):
    """Raised by the hook once the module's input is read: the rest of the forward pass is not needed."""


@torch.no_grad()
def module_inputs(
    model: TextClassifier, module: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """What ``module`` of ``model`` receives as its first input (positional or ``hidden_states``) for
    token ids with attention ``mask``; the forward pass stops there."""
    seen: list[torch.Tensor] = []

    def read(_module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        seen.append(args[0] if args else kwargs["hidden_states"])
        raise _StopForwardError

    hook = module.register_forward_pre_hook(read, with_kwargs=True)
    device = model.word_embeddings.weight.device
    try:
        model.backbone(input_ids=ids.to(device), attention_mask=mask.to(device).long())
    except _StopForwardError:
        pass
    finally:
        hook.remove()
    return seen[0]


def context_states(model: TextClassifier, ids: torch.Tensor) -> torch.Tensor:
    """The first block's feed-forward inputs (N × L × d) for token ids (N × L, no padding); the forward
    pass stops there."""
    _, layer = _first_feed_forward(model)
    return module_inputs(model, layer, ids, torch.ones_like(ids))
