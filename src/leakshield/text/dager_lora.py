"""DAGER on a LoRA update (Petrov et al., *DAGER*, NeurIPS 2024, Sec. 5, "LoRA"; their code checks the
span of the adapters' A-gradients): for an adapted weight W + s·B·A with inputs x_i, the update's

    ∂L/∂A = s · Σ_i (Bᵀ δ_i) x_iᵀ      (r × d_in)

has its rows in the span of the inputs x_i, whatever B is, so the first block's adapters play the part
of the full model's first attention weights (:mod:`leakshield.text.dager`): a (token, position) pair was
in the batch iff its first-layer state LN(e_v + p_t) lies in that span, and — with feed-forward adapters
— a sequence iff its post-attention states lie in the span of the first feed-forward adapter's
A-gradient.

Conditions, each tested:
- **B ≠ 0.** peft starts B at zero, so the first update of fresh adapters has ∂L/∂A = 0: nothing is read
  (the B-gradient's rows span A·x_i in r dimensions, too few for a clean check; not attempted).
- **b·n below the rank the adapters can carry.** ∂L/∂A has rank ≤ min(r, b·n); BERT's query, key and
  value adapters are stacked, so their A-gradients together span up to min(3r, b·n) dimensions; GPT-2's
  fused ``c_attn`` has one A (r); the feed-forward adapter, one A (r). The check reads batches of fewer
  than min(bound − 1, d − ``width_margin``) distinct states. At that rank or more, judged at 10⁻⁷ of the
  largest singular value, the span may be a strict part of the inputs' span and the attack returns
  nothing rather than guesses (``capped``). An update past the bound whose weakest directions fall
  under that cut is not capped: it is read on a strict part of the span, where true states miss; no
  false token passed there in the tests. The width margin: a random unit state's squared distance to a
  k-dimensional span in d dimensions is χ²_(d−k)/d; over the vocabulary × 32 positions, the expected
  number of false states under the token tolerance 0.05 is about 0.002 at d − k = 10, 0.1 at 8, 5 at 6
  (d = 64), hence 10. So a low rank defends against this check at batch sizes and lengths past it — the
  claim the LoRA benchmark measures.
- **One gradient step (FedSGD).** With the embeddings frozen the first-layer states are the same at
  every local step, so in exact arithmetic a FedAvg update of plain-SGD steps would still have its
  A-rows in their span (Adam's per-entry scaling breaks even that); but a FedAvg message is a float32
  parameter difference, whose rounding buries the weak true directions. The test on two reviews after 5
  SGD steps asserts no false token; what is read there is not claimed.
- **The update holds A-gradients.** FedRand (:mod:`leakshield.text.fedrand`) withholds A or B per module
  and round; the check reads whichever first-block A-gradients were sent, and nothing when none was.
- **Batches of more than one sequence need feed-forward adapters** (``targets: attention+ffn``) for the
  sequence step; with attention adapters alone a batch of one is read off the token step (one token per
  position).

**Tolerances** (``python benchmarks/lora_tolerances.py --corpus FILE``: BERT width 64, 2 blocks,
pretrained 2 epochs on the public split, attention adapters after 5 FedAvg rounds, 20 reviews of batch 1,
seed 0): ∂L/∂A = C·X with C the stacked Bᵀδ_i, whose columns differ in size by orders of magnitude, so
the weakest true directions sit near float32's rounding floor. Hence two cuts. Whether the bound is
reached is judged at 10⁻⁷ of the largest singular value (``DETECT_TOLERANCE``), above the rounding: a
cut at 10⁻⁸ counted rounding directions, capped 18 of 20 updates at rank 8 (5 at 10⁻⁷), and whether
it did depended on the thread count. The basis is read at ``rank_tolerance`` (10⁻⁸): it keeps the
weakest true directions and some rounding ones, at most the bound less one in all. The sweep's numbers
are in ``docs/lora.md``; the defaults (10⁻⁸, token tolerance 0.05) are where it read most reviews with
no false token. Recovery rests on measured margins between true and false states, not on exact
arithmetic.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import torch

from leakshield.errors import LeakshieldError
from leakshield.text.dager import (
    DagerResult,
    pick_sequences,
    search_sequences,
    sequence_ids,
    token_candidates,
)
from leakshield.text.lora import AdapterClassifier, lora_names
from leakshield.text.span import InputSpan, input_span
from leakshield.text.tokenizer import PAD

#: directions short of the width d at which the check declines (module docstring, "Conditions")
WIDTH_MARGIN = 10
#: the rank cut that judges whether the bound is reached: above float32's rounding floor
DETECT_TOLERANCE = 1e-7


def adapter_gradient(
    model: AdapterClassifier, gradient: Mapping[str, torch.Tensor], part: str
) -> tuple[torch.Tensor, int, float] | None:
    """The first block's A-gradients of ``part`` (``attention`` or ``ffn``) that the update holds (FedRand
    withholds some), each scaled to a largest singular value of 1 and stacked (rows in the input space,
    float64), with the rank bound they can carry (rows, at most d) and the largest factor a part was
    scaled by (an entry's noise grows by at most it); None: no A-gradient there, or one is
    zero (B = 0)."""
    names = [lora_names(name)[0] for name, _ in model.adapters(0, part)]
    names = [n for n in names if n in gradient]
    if not names:
        return None
    parts, scale = [], 0.0
    for a_name in names:
        matrix = gradient[a_name].detach().double()
        norm = float(torch.linalg.matrix_norm(matrix, ord=2))
        if norm == 0.0:
            return None
        parts.append(matrix / norm)
        scale = max(scale, 1.0 / norm)
    stacked = torch.cat(parts)
    return stacked, min(stacked.shape), scale


def adapter_span(
    matrix: torch.Tensor, bound: int, rank_tolerance: float, noise_std: float | None, margin: int
) -> tuple[InputSpan, bool]:
    """The rows' span and whether the bound was reached (then no directions are kept). The bound: the
    rank reaches ``bound`` − 1 (more states than the adapters carry) or the width less ``margin`` (a span
    that nearly fills the space lies near every state, false ones too, at the adapters' tolerance).

    Two cuts (module docstring, "Tolerances"): whether the bound is reached is judged at
    :data:`DETECT_TOLERANCE` (above float32's rounding floor, so rounding directions never fake it); the
    basis is read at ``rank_tolerance`` (at the floor, keeping the weakest true directions), at most
    the bound less one of its strongest directions."""
    limit = min(bound - 1, matrix.shape[1] - margin)
    detected = input_span(matrix, DETECT_TOLERANCE, 1, noise_std)
    if detected.full_rank >= limit:
        return InputSpan(detected.basis[:, :0], detected.full_rank, 0.0), True
    span = input_span(matrix, rank_tolerance, 1, noise_std)
    if span.rank >= limit:  # rounding directions beyond the bound: the strongest limit − 1 kept, no gap
        span = InputSpan(span.basis[:, : limit - 1].contiguous(), span.full_rank, 0.0)
    return span, False


def first_span(
    model: AdapterClassifier,
    gradient: Mapping[str, torch.Tensor],
    rank_tolerance: float,
    noise_std: float | None,
    margin: int,
) -> tuple[InputSpan, bool] | None:
    """The first block's input span read off the attention adapters' A-gradients, and whether the
    bound was reached (:func:`adapter_span`); None: no A-gradient, or a zero one (B = 0)."""
    first = adapter_gradient(model, gradient, "attention")
    if first is None:
        return None
    noise = None if noise_std is None else noise_std * first[2]
    return adapter_span(first[0], first[1], rank_tolerance, noise, margin)


def lora_dager_attack(
    model: AdapterClassifier,
    gradient: Mapping[str, torch.Tensor],
    batch: int = 1,
    *,
    token_tolerance: float = 5e-2,
    sequence_tolerance: float = 1.5e-4,
    rank_tolerance: float = 1e-8,
    max_prefixes: int = 256,
    max_candidates: int = 256,
    max_combinations: int = 20_000,
    width_margin: int = WIDTH_MARGIN,
    noise_std: float | None = None,
    seed: int = 0,
) -> DagerResult:
    """Recover ``batch`` sequences from a LoRA ``gradient`` (adapter name → one batch's mean loss
    gradient, or −Δθ / (lr·steps) of a FedAvg update) of ``model``; parameters as in
    :func:`~leakshield.text.dager.dager_attack`, with the tolerances measured for adapters (module
    docstring, "Tolerances"). An empty result (all ``[PAD]``, no candidates) when
    B = 0 or the rank bound is reached (``capped``)."""
    if not isinstance(model, AdapterClassifier):
        raise LeakshieldError("DAGER on LoRA needs a model with LoRA adapters (an AdapterClassifier)")
    blocks = len(model.backbone.h if model.kind == "gpt2" else model.backbone.encoder.layer)
    if blocks < 2:
        raise LeakshieldError("DAGER needs a model of two blocks or more")
    if batch > 1 and model.targets != "attention+ffn":
        raise LeakshieldError(
            f"DAGER on LoRA at batch {batch} orders tokens into sequences by the feed-forward adapters: "
            "use targets attention+ffn (attention adapters alone read a batch of one)"
        )
    empty = DagerResult(torch.full((batch, 1), PAD, dtype=torch.long), [], 0, False)
    read = first_span(model, gradient, rank_tolerance, noise_std, width_margin)
    if read is None:
        return empty
    span, capped = read
    if span.rank == 0:
        return DagerResult(empty.ids, [], 0, capped)
    exact = copy.deepcopy(model).double().eval()
    candidates = token_candidates(exact, span, token_tolerance, model.max_length, max_candidates)
    # a batch of one is its token step: one token per position (the feed-forward check, when it reads
    # anything, only confirms it; it carries r − 1 context states at most, so longer reviews need this)
    single = DagerResult(torch.tensor([[c[0] for c in candidates] or [PAD]]), candidates, span.rank, False)
    if batch == 1 and model.targets == "attention":
        return single
    context_matrix = adapter_gradient(model, gradient, "ffn")
    if context_matrix is None:
        return single if batch == 1 else DagerResult(empty.ids, candidates, span.rank, False)
    context_noise = None if noise_std is None else noise_std * context_matrix[2]
    context, capped = adapter_span(
        context_matrix[0], context_matrix[1], rank_tolerance, context_noise, width_margin
    )
    if context.rank == 0:
        return single if batch == 1 else DagerResult(empty.ids, candidates, span.rank, capped)
    tolerance = sequence_tolerance
    if noise_std is None:
        tolerance = max(tolerance, min(context.gap, 10 * sequence_tolerance))
    found = search_sequences(exact, context, candidates, tolerance, max_prefixes=max_prefixes,
                             max_combinations=max_combinations, seed=seed)  # fmt: skip
    picked = pick_sequences(found, batch)
    if batch == 1 and not picked:
        return single
    return DagerResult(sequence_ids(picked, batch), candidates, span.rank, False)


def leaked_lora_length(
    model: AdapterClassifier,
    gradient: Mapping[str, torch.Tensor],
    *,
    token_tolerance: float = 5e-2,
    rank_tolerance: float = 1e-8,
    noise_std: float | None = None,
) -> int | None:
    """A LoRA update's longest sequence length: with the embeddings frozen no position row leaks it, but
    the positions whose first-layer states pass DAGER's token check do (None: nothing read, B = 0 or
    beyond the bound)."""
    read = first_span(model, gradient, rank_tolerance, noise_std, WIDTH_MARGIN)
    if read is None or read[0].rank == 0:
        return None
    span = read[0]
    exact = copy.deepcopy(model).double().eval()
    return len(token_candidates(exact, span, token_tolerance, model.max_length, 1)) or None
