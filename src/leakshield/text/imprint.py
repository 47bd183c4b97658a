"""A malicious server's imprint block for transformers, placed before the first attention layer.

The server sends a classifier whose first transformer block is preceded by a block that sees each token
state h_t (the embedding layer's output: GPT-2's e_v + p_t, BERT's LayerNorm(e_v + p_t + type₀)) beside
a statistic of its whole sequence, the mean m of the sequence's states, z_t = [h_t ; m]:

    u = ReLU(W z_t + b),  W's k rows all one random query q, b_i = −τ_i at k thresholds τ_0 < … < τ_{k−1}
    (quantiles of q·z over the server's public text), and the block returns h_t + (r − r̄), r = s·v·Σ_i u_i

with r̄ the same value detached from the graph, and z_t read from the states detached: the forward pass
returns h_t exactly (the client's model computes what the honest one does), the backward pass carries
the signal to the bins alone (every other parameter's gradient is the honest one). It is a cumulative layout
(Fowl et al., *Robbing the Fed*, ICLR 2022, its image version in :mod:`leakshield.attacks.active.imprint`)
whose every active bin receives the same signal δ_t = s·vᵀg_t (g_t: the loss gradient at the block's
output; v a random unit direction, since every LayerNorm after it ignores a shift along the all-ones
vector). Consecutive bins' gradient differences give back each token alone in its bin as
z_t = (∇W_i − ∇W_{i+1}) / (∇b_i − ∇b_{i+1}); h_t names its token and position (the only (token,
position) whose state it equals), and m — one float vector shared by every token of a sequence — says
which sequence it came from. That is the separation Decepticons (Fowl et al., ICLR 2023) buys with a
rewritten first attention layer; an architecture-changing server gets it directly. Recovery is
scale-free; ``s`` sets the bins' gradients against what the defenses add (noise, rounding, pruning).

Distinct tokens that share a bin come back as a mixture that equals no (token, position) state: they
are dropped, and their positions read ``[UNK]``. The same (token, position) in two sequences (``[CLS]``
at 0) sharing a bin matches its state with a mixed mean: a one-token group whose token another group
holds, dropped too. ``[PAD]`` positions carry no gradient and never appear.

**Noise and rounding.** A row is a difference of two cumulative bins divided by |∇b_i − ∇b_{i+1}|, so
noise on the update (and rounding, which the difference does not cancel: each bin holds the sum of all
tokens above it) reaches it magnified; a fixed relative tolerance then drops every row. Each row's
expected error (:func:`row_errors`: noise read off the empty bins, rounding from the protocol's format)
lets a row name its nearest state when that state is within a few errors and clearly nearer than the
second nearest. Measured on the leaderboard's text model (BERT, width 64, 4096 bins): at scale s = 1 a
noise of σ 10⁻² leaves nothing (recall 0.03 of one review, 0.04 of 8); at s = 10⁶ — a server scales its
bins against the noise it expects, the forward pass unchanged — 8 reviews come back whole, no false
token; fp16 rounding: one review whole at s = 1 (0.97) and 10⁶, a batch of 8 not (recall 0.23–0.26).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from leakshield.errors import LeakshieldError
from leakshield.imprint_bins import bin_rows, noise_level
from leakshield.seeds import seeded_generator
from leakshield.text.models import TextClassifier
from leakshield.text.span import module_inputs
from leakshield.text.tokenizer import CLS, PAD, SEP, UNK

#: the imprint block's query parameters end their names so in a prepared model
QUERY_WEIGHT, QUERY_BIAS = "imprint.query.weight", "imprint.query.bias"
#: public sequences whose states place the thresholds, at most
PUBLIC_SEQUENCES = 2000
#: a noisy row names its nearest state within this many of its expected errors …
NOISE_REACH = 4.0
#: … when that state is under this share of the distance to the second nearest (measured on the
#: leaderboard's text model under noise σ 10⁻² at scale 10⁴, one review: tokens alone in their bins at
#: 0.15–0.58, rows of noise alone at 0.99–1.00)
NEAREST_RATIO = 0.8


def beside_mean(states: torch.Tensor) -> torch.Tensor:
    """z = [h ; m]: each state beside its sequence's mean state (N × L × 2d)."""
    return torch.cat([states, states.mean(dim=1, keepdim=True).expand_as(states)], dim=-1)


class SequenceImprint(nn.Module):
    """The block of the module docstring on states N × L × d; ``query``: Linear(2d → k), ``spread``:
    Linear(k → d, no bias) with every column s·v."""

    def __init__(self, width: int, query: torch.Tensor, thresholds: torch.Tensor, spread: torch.Tensor):
        super().__init__()
        bins = len(thresholds)
        self.query = nn.Linear(2 * width, bins)
        self.relu = nn.ReLU()
        self.spread = nn.Linear(bins, width, bias=False)
        with torch.no_grad():
            self.query.weight.copy_(query.expand(bins, -1))
            self.query.bias.copy_(-thresholds)
            self.spread.weight.copy_(spread[:, None].expand(-1, bins))

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        signal = self.spread(self.relu(self.query(beside_mean(states.detach()))))
        return states + (signal - signal.detach())  # the states exactly; the gradient flows to the bins


class ImprintedBlock(nn.Module):
    """The model's first transformer ``block`` behind ``imprint`` (every other argument passed on)."""

    def __init__(self, imprint: SequenceImprint, block: nn.Module) -> None:
        super().__init__()
        self.imprint, self.block = imprint, block

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        return self.block(self.imprint(hidden_states), *args, **kwargs)


def _blocks(model: TextClassifier) -> nn.ModuleList:
    return model.backbone.encoder.layer if model.kind == "bert" else model.backbone.h


def first_block_inputs(model: TextClassifier, ids: torch.Tensor) -> torch.Tensor:
    """The states (N × L × d) the first transformer block receives for token ids N × L."""
    return module_inputs(model, _blocks(model)[0], ids, ids != PAD)


def imprint_model(
    model: TextClassifier, public_ids: torch.Tensor, bins: int, *, scale: float = 1.0, seed: int = 0
) -> TextClassifier:
    """A copy of ``model`` with the imprint block before its first transformer block: ``bins``
    thresholds at the quantiles of q·z over the real tokens of (up to 2000) public sequences; the query
    q and the direction v drawn from ``seed``; ``scale`` is s."""
    if bins < 2:
        raise LeakshieldError(f"imprint bins {bins}: need at least 2")
    if not len(public_ids):
        raise LeakshieldError("the imprint block's thresholds need public text; the public split is empty")
    width = model.word_embeddings.embedding_dim
    gen = seeded_generator(seed, 0x1E7)
    query = torch.randn(2 * width, generator=gen, dtype=torch.float64)
    direction = torch.randn(width, generator=gen, dtype=torch.float64)
    sample = public_ids[torch.randperm(len(public_ids), generator=gen)[:PUBLIC_SEQUENCES]]
    states = first_block_inputs(model, sample).double()
    measured = beside_mean(states)[sample.to(states.device) != PAD]  # real tokens only
    values = (measured @ query.to(measured.device)).cpu()
    levels = torch.arange(bins, dtype=torch.float64) / bins
    thresholds = torch.quantile(values, levels.clamp(1e-6, 1 - 1e-6))
    thresholds[0] = values.min() - 10 * (values.std() + 1)  # the first bin catches every token
    spread = scale * direction / direction.norm()
    imprint = SequenceImprint(width, query.float(), thresholds.float(), spread.float())
    prepared = copy.deepcopy(model)
    blocks = _blocks(prepared)
    device = model.word_embeddings.weight.device
    blocks[0] = ImprintedBlock(imprint.to(device), blocks[0])
    return prepared


def honest_view(model: TextClassifier) -> TextClassifier:
    """The model without its imprint block (a copy): what the server knows the states of."""
    plain = copy.deepcopy(model)
    blocks = _blocks(plain)
    if isinstance(blocks[0], ImprintedBlock):
        blocks[0] = blocks[0].block
    return plain


def bin_gradients(
    model: TextClassifier, gradient: Mapping[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The query's weight and bias gradients (rows in threshold order) from a prepared model's update."""
    names = [n for n, _ in model.named_parameters() if n.endswith(QUERY_WEIGHT)]
    if not names or names[0] not in gradient:
        raise LeakshieldError("the text imprint attack needs the model it prepared (no imprint block in it)")
    return gradient[names[0]], gradient[names[0].removesuffix("weight") + "bias"]


@dataclass(frozen=True)
class ImprintResult:
    """``ids``: the sequences (batch × max_length, ``[UNK]`` at positions not recovered, ``[PAD]``
    after); ``tokens``: bins' rows whose state is a (token, position)'s; ``filled``: tokens completed
    from the sequences' mean states (:func:`fill_gaps`); ``rows``: bins' rows read; ``groups``: sequences
    told apart by their mean state (lone tokens with a mixed mean left out)."""

    ids: torch.Tensor
    tokens: int
    filled: int
    rows: int
    groups: int


@torch.no_grad()
def state_table(model: TextClassifier) -> torch.Tensor:
    """Every (token, position) state: vocabulary × max_length × d (each token repeated over all
    positions, no padding)."""
    plain = honest_view(model)
    vocab = plain.word_embeddings.num_embeddings
    ids = torch.arange(vocab)[:, None].expand(vocab, plain.max_length)
    return torch.cat([first_block_inputs(plain, chunk) for chunk in ids.split(256)]).double()


def read_sequences(
    model: TextClassifier,
    rows: torch.Tensor,
    batch: int,
    *,
    tolerance: float = 1e-3,
    errors: torch.Tensor | None = None,
) -> ImprintResult:
    """Sequences from the recovered rows z = [h ; m] (float64, one per row): h names its (token,
    position) where the nearest state lies within ``tolerance`` × ‖h‖ (else the row is a mixture and
    dropped); rows whose m agree within ``tolerance`` × ‖m‖ are one sequence. The ``batch`` largest
    groups are returned, in the order of their sequences' mean states' first coordinate.

    ``errors``: each row's expected error on h (and on m) from noise on the bins' gradients. A noisy row
    also names the nearest state when that state is within :data:`NOISE_REACH` errors and under
    :data:`NEAREST_RATIO` × the distance to the second nearest (a row of noise alone has no state much
    nearer than the others); m's agree within the two rows' errors besides ``tolerance``."""
    table = state_table(model).to(rows.device)
    _, length, width = table.shape
    flat = table.reshape(-1, width)
    h, m = rows[:, :width], rows[:, width:]
    closest = [
        torch.cdist(part, flat).topk(2, dim=1, largest=False) for part in h.split(128)
    ]  # 128 at a time
    distance = torch.cat([c.values[:, 0] for c in closest])
    nearest = torch.cat([c.indices[:, 0] for c in closest])
    good = distance <= tolerance * h.norm(dim=1).clamp_min(1e-12)
    error = torch.zeros(len(rows), dtype=rows.dtype, device=rows.device) if errors is None else errors
    if errors is not None:
        second = torch.cat([c.values[:, 1] for c in closest])
        good |= (distance <= NOISE_REACH * error) & (distance <= NEAREST_RATIO * second)
    tokens, positions = nearest // length, nearest % length
    means: list[torch.Tensor] = []
    spreads: list[float] = []
    members: list[dict[int, int]] = []
    for row in good.nonzero().flatten().tolist():
        reach = [tolerance * float(mean.norm()) + NOISE_REACH * (float(error[row]) + spread)
                 for mean, spread in zip(means, spreads, strict=True)]  # fmt: skip
        found = next((g for g, mean in enumerate(means) if float((m[row] - mean).norm()) <= reach[g]), None)
        if found is None:
            means.append(m[row])
            spreads.append(float(error[row]))
            members.append({})
            found = len(means) - 1
        members[found].setdefault(int(positions[row]), int(tokens[row]))
    held = [set(group.items()) for group in members]
    real = [
        g
        for g, group in enumerate(members)  # a lone token another group holds: a mixed mean
        if len(group) > 1 or not any(held[g] <= held[o] for o in range(len(members)) if o != g)
    ]
    order = sorted(real, key=lambda g: -len(members[g]))[:batch]
    order.sort(key=lambda g: float(means[g][0]))
    ids = torch.full((batch, length), PAD, dtype=torch.long)
    filled = 0
    for k, g in enumerate(order):
        placed = members[g]
        filled += fill_gaps(placed, length * means[g], table, tolerance)
        end = max(placed) + 1
        ids[k, :end] = UNK
        for position, token in placed.items():
            ids[k, position] = token
        if ids[k, 0] == UNK:
            ids[k, 0] = CLS
    for k in range(len(order), batch):  # sequences of which nothing came back
        ids[k, :2] = torch.tensor([CLS, SEP])
    return ImprintResult(ids, int(good.sum()), filled, len(rows), len(real))


def fill_gaps(placed: dict[int, int], total: torch.Tensor, table: torch.Tensor, tolerance: float) -> int:
    """Complete a sequence's (position → token) in place from its states' sum ``total`` (L·m, every
    position's state, ``[PAD]`` ones too): for each length n from the last position found on, the
    states missing below n must add up to what the known ones leave; one or two missing positions are
    solved by lookup in ``table`` (vocabulary × L × d) within ``tolerance`` × ‖residual‖. The sequence is
    taken padded to the table's L (as a client's batch is, to the model's length). Returns how many tokens
    it added (0: nothing placed to start from, no length fits, or more than two gaps)."""
    vocab, length, _ = table.shape
    if not placed:
        return 0
    known = sum(table[token, position] for position, token in placed.items())
    for n in range(max(placed) + 1, length + 1):
        missing = [p for p in range(n) if p not in placed]
        if len(missing) > 2:
            break
        pads = table[PAD, n:].sum(dim=0) if n < length else torch.zeros_like(total)
        residual = total - known - pads
        limit = tolerance * max(float(residual.norm()), float(table[:, 0].norm(dim=1).mean()))
        if not missing:
            if float(residual.norm()) <= limit:
                return 0
            continue
        if len(missing) == 1:
            gap = (table[:, missing[0]] - residual).norm(dim=1)
            if float(gap.min()) <= limit:
                placed[missing[0]] = int(gap.argmin())
                return 1
            continue
        first, second = table[:, missing[0]], table[:, missing[1]]
        gap = torch.cdist(residual - first, second)  # vocab × vocab: first token's row, second's column
        best = int(gap.argmin())
        if float(gap.flatten()[best]) <= limit:
            placed[missing[0]], placed[missing[1]] = best // vocab, best % vocab
            return 2
    return 0


def sequence_imprint(
    model: TextClassifier,
    gradient: Mapping[str, torch.Tensor],
    batch: int,
    *,
    tolerance: float = 1e-3,
    rounding: float | None = None,
) -> ImprintResult:
    """The ``batch`` sequences read off the imprint block's gradient in ``gradient`` (the update of the
    model :func:`imprint_model` prepared): every bin pair's row, then :func:`read_sequences` with each
    row's expected error (:func:`row_errors`; None on an exact update)."""
    grad_w, grad_b = bin_gradients(model, gradient)
    rows, hits = bin_rows(grad_w, grad_b, len(grad_b))
    errors = row_errors(grad_w, grad_b, hits, rows, rounding)
    return read_sequences(model, rows, batch, tolerance=tolerance, errors=errors)


def row_errors(
    grad_w: torch.Tensor, grad_b: torch.Tensor, hits: torch.Tensor, rows: torch.Tensor, rounding: float | None
) -> torch.Tensor | None:
    """Each recovered row's expected error on h (σ on both differences: σ·√(width + ‖h‖²)): noise the bins
    themselves show
    (:func:`~leakshield.imprint_bins.noise_level`, no knowledge of the defense needed) and, with the
    protocol's relative ``rounding`` of released values (fp16: 2⁻¹¹), the rounding of the two cumulative
    bins it is the difference of — which the difference does not cancel — both over |∇b_i − ∇b_{i+1}|.
    None where neither is present."""
    noise = noise_level(grad_b)
    if noise <= 0 and rounding is None:
        return None
    grad_w, grad_b = grad_w.double(), grad_b.double()
    after = torch.clamp(hits + 1, max=len(grad_b) - 1)
    pair = lambda v: v[hits].abs() + torch.where(hits + 1 < len(grad_b), v[after].abs(), 0)  # noqa: E731
    strength = (grad_b[hits] - torch.where(hits + 1 < len(grad_b), grad_b[after], 0)).abs().clamp_min(1e-300)
    width = rows.shape[1] // 2
    # z = Δw / Δb: noise on Δw (width entries of h) and on Δb (carried by ‖h‖), in quadrature
    error = noise * (width + rows[:, :width].norm(dim=1) ** 2) ** 0.5
    if rounding is not None:
        w_part = pair(grad_w[:, :width].norm(dim=1))
        b_part = pair(grad_b) * rows[:, :width].norm(dim=1)
        error = error + rounding * (w_part + b_part)
    return (error / strength).to(rows.device)
