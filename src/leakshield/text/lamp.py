"""LAMP (Balunović et al., *LAMP: Extracting Text from Gradients with Language Model Priors*, NeurIPS
2022): TAG's continuous search over word embeddings, alternated with discrete moves that reorder them,
judged by the gradient distance plus a language model's perplexity.

- **continuous** (Sec. 4.2): Adam on the dummy embeddings x against
  L_rec(x) + α_reg (mean‖x_i‖ − ν)², ν the word table's mean row norm (LAMP's ``init_size``), with
  L_rec one of: ``cos``, the mean over layers of 1 − cos(∇′, ∇) (LAMP_cos); ``l1l2``, Σ ‖∇′−∇‖² +
  ``tag_factor`` ‖∇′−∇‖₁ (LAMP_L1+L2); ``l2``, Σ ‖∇′−∇‖²; the step decays ×``lr_decay`` every 50 steps.
- **discrete** (Sec. 4.3, Algorithm 1): every ``swap_every`` steps after a burn-in of ``swap_burnin`` ×
  ``iterations``, each sequence draws ``candidates`` reorderings of its inner positions (swap two
  tokens, move a token, move a span, put a prefix at the end — the four moves in turn) and keeps the
  one (or its current order) that minimizes L_rec + α_lm · NLL, NLL the prior's mean next-token
  negative log-likelihood of the nearest tokens (:mod:`leakshield.text.prior`). The batch gradient is
  the mean of per-sequence gradients, so a candidate that reorders sequence k costs one gradient of k
  alone: the batch's is updated by (∇′_k − ∇_k) / b, which is exact.
- **init** (its ``init.py``): the best of ``init_candidates`` normal draws by L_rec, then of as many
  permutations of its positions, its rows scaled to norm ν. LAMP draws N(0, 1) for BERT-base, whose
  rows have norm ≈ 1.4; here the draws take the word table's standard deviation (a width-64 table's
  rows have norm ≈ 0.16, and L_rec at 50 times the model's scale selects nothing: with N(0, 1) draws
  the test's review came back at ROUGE-1 0.33 instead of 0.83); **decode**: each kept embedding to the
  word (no special token) of highest cosine similarity, the positions of the lowest total loss seen.

Length and labels are read as TAG reads them (:mod:`leakshield.text.tag`). The paper's coefficients:
LAMP_cos α_lm 0.2, α_reg 1; LAMP_L1+L2 α_lm 60, α_reg 25, ``tag_factor`` 0.01; lr 0.01 decayed 0.89;
2,000 steps; 200 candidates; swaps every 75 steps after 10 %. ``prior`` None removes the language
model from the discrete step (the ablation of its Table 5).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from leakshield.errors import LeakshieldError
from leakshield.text.models import TextClassifier
from leakshield.text.prior import LanguagePrior
from leakshield.text.tag import TagResult, labels_and_length, matched_parameters
from leakshield.text.tokenizer import CLS, SEP, SPECIALS

Distance = Literal["cos", "l1l2", "l2"]
#: LAMP's (α_lm, α_reg) per distance (its lamp_cos.sh and lamp_l1l2.sh; L2 shares L1+L2's)
COEFFICIENTS: dict[str, tuple[float, float]] = {"cos": (0.2, 1.0), "l1l2": (60.0, 25.0), "l2": (60.0, 25.0)}


@dataclass(frozen=True)
class _Target:
    model: TextClassifier
    params: list[torch.nn.Parameter]
    targets: list[torch.Tensor]
    labels: torch.Tensor
    distance: Distance
    tag_factor: float

    def gradients(
        self, embeddings: torch.Tensor, labels: torch.Tensor, create_graph: bool
    ) -> list[torch.Tensor]:
        mask = torch.ones(embeddings.shape[:2], dtype=torch.bool, device=embeddings.device)
        loss = F.cross_entropy(self.model.forward_embeddings(embeddings, mask), labels)
        return list(torch.autograd.grad(loss, self.params, create_graph=create_graph))

    def score(self, dummy: Sequence[torch.Tensor]) -> torch.Tensor:
        if self.distance == "cos":
            terms = [1 - F.cosine_similarity(d.flatten(), t.flatten(), dim=0, eps=1e-12) for d, t in
                     zip(dummy, self.targets, strict=True)]  # fmt: skip
            return torch.stack(terms).mean()
        factor = self.tag_factor if self.distance == "l1l2" else 0.0
        return sum(
            ((d - t) ** 2).sum() + factor * (d - t).abs().sum()
            for d, t in zip(dummy, self.targets, strict=True)
        )  # type: ignore[return-value]


def _reorderings(length: int, count: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``count`` permutations of positions 0 … length−1 that keep the first and last (LAMP's four moves
    in turn); the identity first."""
    out = [np.arange(length)]
    inner = length - 2
    for k in range(1, count):
        perm = np.arange(length)
        if inner < 2:
            out.append(perm)
            continue
        kind = k % 4
        if kind == 0:  # swap two tokens
            i, j = 1 + rng.integers(inner, size=2)
            perm[i], perm[j] = perm[j], perm[i]
        elif kind == 1:  # move a token
            i, j = 1 + rng.integers(inner), 1 + rng.integers(inner)
            body = [p for p in perm[1:-1] if p != i]
            body.insert(j - 1, i)
            perm = np.array([0, *body, length - 1])
        elif kind == 2:  # move a span
            b, e = sorted(1 + rng.integers(inner + 1, size=2))
            body = [p for p in perm[1:-1] if not b <= p < e]
            at = rng.integers(len(body) + 1)
            perm = np.array([0, *body[:at], *range(b, e), *body[at:], length - 1])
        else:  # a prefix to the end
            i = 1 + rng.integers(inner)
            perm = np.array([0, *range(i, length - 1), *range(1, i), length - 1])
        out.append(perm)
    return out


def _nearest(inner: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Each embedding's word of highest cosine similarity (special tokens never), as ids."""
    words = F.normalize(table[len(SPECIALS) :], dim=1)
    return (F.normalize(inner, dim=-1) @ words.T).argmax(-1) + len(SPECIALS)


def lamp_attack(
    model: TextClassifier,
    gradient: Mapping[str, torch.Tensor],
    prior: LanguagePrior | None,
    batch: int = 1,
    labels: torch.Tensor | None = None,
    *,
    distance: Distance = "cos",
    iterations: int = 2000,
    lr: float = 0.01,
    lr_decay: float = 0.89,
    tag_factor: float = 0.01,
    prior_weight: float | None = None,
    reg_weight: float | None = None,
    swap_every: int = 75,
    swap_burnin: float = 0.1,
    candidates: int = 200,
    init_candidates: int = 500,
    seed: int = 0,
    length: int | None = None,
    noise_std: float | None = None,
) -> TagResult:
    """Reconstruct ``batch`` sequences from ``gradient`` of ``model`` (eval mode) with ``prior`` (None:
    no language model); coefficients default to the paper's for ``distance``."""
    labels, length = labels_and_length(model, gradient, batch, labels, length, noise_std, "LAMP")
    alpha_lm, alpha_reg = COEFFICIENTS[distance]
    alpha_lm = alpha_lm if prior_weight is None else prior_weight
    alpha_reg = alpha_reg if reg_weight is None else reg_weight
    table = model.word_embeddings.weight.detach()
    device = table.device
    labels = labels.to(device)
    named = dict(model.named_parameters())
    names = matched_parameters(model, gradient)
    target = _Target(model, [named[n] for n in names], [gradient[n].detach() for n in names], labels,
                     distance, tag_factor)  # fmt: skip
    frame = table[torch.tensor([CLS, SEP], device=device)]
    norm = float(table[len(SPECIALS) :].norm(dim=1).mean())

    def embed(inner: torch.Tensor) -> torch.Tensor:
        n = inner.shape[0]
        return torch.cat([frame[:1].expand(n, 1, -1), inner, frame[1:].expand(n, 1, -1)], 1)

    def rec(inner: torch.Tensor, create_graph: bool = False) -> torch.Tensor:
        return target.score(target.gradients(embed(inner), labels, create_graph))

    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    shape = (batch, length - 2, table.shape[1])
    best_init, best_score = None, float("inf")
    spread = float(
        table.std()
    )  # LAMP draws N(0, 1) for BERT-base's rows of norm ≈ 1.4: here, the table's scale
    for _ in range(max(1, init_candidates)):  # random draws, the best by L_rec (LAMP's init.py)
        draw = (torch.randn(shape, generator=generator) * spread).to(device)
        score = float(rec(draw))
        if score < best_score:
            best_init, best_score = draw, score
    if best_init is None:
        raise LeakshieldError("LAMP: every initial draw gave a non-finite gradient distance")
    for _ in range(max(1, init_candidates)):  # then permutations of the best draw's positions
        draw = best_init[:, torch.randperm(shape[1], generator=generator).to(device)]
        score = float(rec(draw))
        if score < best_score:
            best_init, best_score = draw, score
    best_init = best_init / best_init.norm(dim=-1, keepdim=True) * norm  # rows scaled to ν
    inner = best_init.clone().requires_grad_(True)  # type: ignore[union-attr]
    optimizer = torch.optim.Adam([inner], lr=lr)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=lr_decay)
    best, best_total = inner.detach().clone(), float("inf")
    for step in range(iterations):
        total = rec(inner, create_graph=True) + alpha_reg * (inner.norm(dim=-1).mean() - norm) ** 2
        (inner.grad,) = torch.autograd.grad(total, [inner])
        if float(total.detach()) <= best_total:
            best, best_total = inner.detach().clone(), float(total.detach())
        optimizer.step()
        schedule.step()
        if step >= swap_burnin * iterations and (step - 1) % swap_every == 0:
            with torch.no_grad():
                inner.data = _reorder(inner.detach(), target, embed, labels, table, prior, alpha_lm,
                                      candidates, rng)  # fmt: skip
    with torch.no_grad():
        ids = _nearest(best, table).cpu()
        framed = torch.cat([torch.full((batch, 1), CLS), ids, torch.full((batch, 1), SEP)], 1)
    return TagResult(framed, labels.cpu(), length, float(rec(best)))


def _reorder(inner, target: _Target, embed, labels, table, prior, alpha_lm, candidates, rng) -> torch.Tensor:
    """One discrete step: each sequence's best of ``candidates`` reorderings (its current order among
    them) by L_rec + α_lm · NLL; the batch gradient is updated by linearity, one sequence at a time."""
    batch = inner.shape[0]
    if inner.shape[1] < 2:  # one inner token: nothing to reorder
        return inner
    full = embed(inner)
    with torch.enable_grad():
        each = [target.gradients(full[k : k + 1], labels[k : k + 1], False) for k in range(batch)]
    current = [sum(g[k] for g in each) / batch for k in range(len(target.params))]  # type: ignore[misc]
    out = inner.clone()
    for k in range(batch):
        perms = _reorderings(full.shape[1], candidates, rng)
        options = torch.stack([full[k, torch.as_tensor(p, device=full.device)] for p in perms])
        scores = []
        for option in options:
            with torch.enable_grad():
                mine = target.gradients(option[None], labels[k : k + 1], False)
            moved = [c + (m - o) / batch for c, m, o in zip(current, mine, each[k], strict=True)]
            scores.append(float(target.score(moved)))
        total = torch.tensor(scores)
        if prior is not None and alpha_lm:
            ids = torch.cat([torch.full((len(options), 1), CLS), _nearest(options[:, 1:-1], table).cpu(),
                             torch.full((len(options), 1), SEP)], 1)  # fmt: skip
            # the reference's perplexity is a mean over the batch: one sequence moves it by 1/b of its own
            total = total + alpha_lm * prior.nll(ids.to(next(prior.parameters()).device)).cpu() / batch
        pick = int(total.argmin())
        if pick:
            out[k] = options[pick, 1:-1]
            with torch.enable_grad():
                chosen = target.gradients(options[pick][None], labels[k : k + 1], False)
            current = [c + (m - o) / batch for c, m, o in zip(current, chosen, each[k], strict=True)]
            each[k] = chosen
    return out
