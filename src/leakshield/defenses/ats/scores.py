"""ATS's two training-free scores of a transformation policy (Gao et al., ATS, Sec. 4.2–4.3).

* Privacy score S_pri (Eq. 5–11): for each transformed image x̂ and a uniform random start x₀, GradSim
  along the line x'(i) = (1 − i)·x₀ + i·x̂ at i = j/K, j = 0..K; the area under that curve (Eq. 6,
  trapezoid rule as in the authors' code) per image; S_pri = α·mean + β·Var over the images
  (Eq. 9–10), on a model briefly trained on a small split. Lower is more private. GradSim is Eq. 5, one
  cosine of the whole parameter gradients (``gradsim="global"``, the paper), or the authors' code's
  mean over parameter tensors of per-tensor cosines (``"per-layer"``). All K + 1 points of many images
  are one vectorized pass of per-sample gradients (``torch.func``), chunked to bound memory.
* Accuracy score S_acc (Eq. 12–14): on a randomly initialized model, the input Jacobians of the summed
  logits of one image per class, their correlation matrix Σ_J and its eigenvalues σ:
  S_acc = −Σ[log(σ + η) + 1/(σ + η)], η = 1e-5 (the authors' code: a sum and a minus sign, so higher is
  better, kept ≥ a threshold); averaged over several batches. The practical variant the experiments use
  (Sec. 5.1): the mean training accuracy over 10 forward-backward rounds of a random model on the
  transformed samples.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.ats.policy import Policy, apply_policies
from leakshield.gradients import per_sample_gradients, plain_gradient

#: per-sample gradient elements held at once by the vectorized privacy score (≈ 512 MiB of float32)
MAX_GRADIENT_ELEMENTS = 1 << 27


@dataclass(frozen=True)
class PrivacyScore:
    """The per-image areas under the GradSim curve (Eq. 6) and their combination (Eq. 10)."""

    auc: torch.Tensor

    @property
    def mean(self) -> float:
        return float(self.auc.mean())

    @property
    def var(self) -> float:
        return float(self.auc.var(unbiased=False)) if len(self.auc) > 1 else 0.0

    def combined(self, alpha: float = 0.7, beta: float = 0.3) -> float:
        """S_pri = α·mean + β·Var (Eq. 10)."""
        return alpha * self.mean + beta * self.var


def transform_with(policy: Policy | None, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``x`` through ``policy`` (None: the identity, 8-bit quantized), random signs from ``generator``."""
    signs = torch.randint(0, 2, (len(x), 3), generator=generator) * 2 - 1
    return apply_policies(x, [policy] * len(x), signs)


GradSimRule = Literal["global", "per-layer"]


def gradsim(
    grads: list[torch.Tensor], refs: list[torch.Tensor], rule: GradSimRule = "global"
) -> torch.Tensor:
    """GradSim of gradients ``grads`` against ``refs`` (matching lists of tensors whose leading dims
    broadcast, the last dim flattened parameters): Eq. 5's one cosine of the concatenated gradients
    (``global``) or the mean of per-tensor cosines (``per-layer``)."""
    dots = [(g * r).sum(-1) for g, r in zip(grads, refs, strict=True)]
    if rule == "global":
        g_norm = torch.stack([g.pow(2).sum(-1) for g in grads]).sum(0).sqrt()
        r_norm = torch.stack([r.pow(2).sum(-1) for r in refs]).sum(0).sqrt()
        return torch.stack(dots).sum(0) / (g_norm * r_norm).clamp_min(1e-12)
    cosines = [
        d / (g.norm(dim=-1) * r.norm(dim=-1)).clamp_min(1e-12)
        for d, g, r in zip(dots, grads, refs, strict=True)
    ]
    return torch.stack(cosines).mean(0)


def _point_gradsims(grads: dict[str, torch.Tensor], points: int, rule: GradSimRule) -> torch.Tensor:
    """GradSim(x'_j, x̂) for grads shaped (images·points, ...), the last point of each image being x̂
    itself; returns (images, points)."""
    flat = [g.reshape(-1, points, g[0].numel()) for g in grads.values()]
    return gradsim(flat, [f[:, -1:, :] for f in flat], rule)


def gradsim_curves(
    model: nn.Module,
    transformed: torch.Tensor,
    labels: torch.Tensor,
    starts: torch.Tensor,
    info: DatasetInfo,
    *,
    points: int = 20,
    vectorized: bool = True,
    rule: GradSimRule = "global",
) -> torch.Tensor:
    """GradSim(x'(j/K), x̂) for j = 0..K (``points`` = K) of every image: (N, K + 1).

    ``transformed`` x̂ and ``starts`` x₀ are N×C×H×W in [0, 1]; the line is taken in the model's
    normalized input space (the same line, since normalization is affine). ``vectorized=False`` computes
    one gradient per point in a Python loop (the reference's way; for checks and benchmarks)."""
    model = model.eval()
    device = next(model.parameters()).device
    steps = torch.arange(points + 1, dtype=transformed.dtype, device=device) / points
    target = info.normalize(transformed.to(device))
    noise = info.normalize(starts.to(device))
    lines = (1 - steps.view(1, -1, 1, 1, 1)) * noise[:, None] + steps.view(1, -1, 1, 1, 1) * target[:, None]
    labels = labels.to(device)
    if not vectorized:
        curves = torch.zeros(len(target), points + 1)
        for i in range(len(target)):
            reference = plain_gradient(model, target[i : i + 1], labels[i : i + 1])
            for j in range(points + 1):
                g = plain_gradient(model, lines[i, j : j + 1], labels[i : i + 1])
                curves[i, j] = gradsim([g[k].flatten() for k in g], [reference[k].flatten() for k in g], rule)
        return curves
    n_params = sum(p.numel() for p in model.parameters())
    chunk = max(1, MAX_GRADIENT_ELEMENTS // max(1, n_params * (points + 1)))
    out = []
    for start in range(0, len(target), chunk):
        block = lines[start : start + chunk]
        k = len(block)
        flat = block.reshape(k * (points + 1), *block.shape[2:])
        y = labels[start : start + k].repeat_interleave(points + 1)
        grads = per_sample_gradients(model, flat, y)
        out.append(_point_gradsims(grads, points + 1, rule).detach().cpu())
    return torch.cat(out)


def area_under(curves: torch.Tensor) -> torch.Tensor:
    """Area under each GradSim curve over i ∈ [0, 1] (trapezoid rule on the K + 1 points)."""
    return torch.trapezoid(curves, dx=1.0 / (curves.shape[1] - 1), dim=1)


def privacy_score(
    model: nn.Module,
    policy: Policy | None,
    images: ImageSet,
    info: DatasetInfo,
    *,
    points: int = 20,
    seed: int = 0,
    vectorized: bool = True,
    rule: GradSimRule = "global",
) -> PrivacyScore:
    """S_pri of ``policy`` on ``images`` (e.g. 10 per class) with ``model`` (briefly trained), GradSim by
    ``rule``. The random starts depend on ``seed`` only (the same for every policy); the policy's signs
    on ``seed`` too."""
    gen = torch.Generator().manual_seed(seed)
    starts = torch.rand(images.x.shape, generator=gen)
    transformed = transform_with(policy, images.x.cpu(), torch.Generator().manual_seed(seed + 1))
    curves = gradsim_curves(
        model, transformed, images.y, starts, info, points=points, vectorized=vectorized, rule=rule
    )
    return PrivacyScore(area_under(curves))


def jacobian_score(model: nn.Module, x: torch.Tensor, eta: float = 1e-5) -> float:
    """−Σ[log(σ + η) + 1/(σ + η)] over the eigenvalues σ of the correlation matrix of the per-image input
    Jacobians of the summed logits (Eq. 12–14; Mellor et al., NASWOT). ``x`` normalized, one image per
    class; the Jacobians come from one backward pass (the images do not interact in eval mode)."""
    model = model.eval()
    x = x.detach().clone().requires_grad_(True)
    (jac,) = torch.autograd.grad(model(x).sum(), x)
    corr = torch.corrcoef(jac.flatten(1).double())
    corr = torch.nan_to_num(corr, nan=0.0)
    sigma = torch.linalg.eigvalsh(corr).clamp_min(0.0)
    return float(-(torch.log(sigma + eta) + 1.0 / (sigma + eta)).sum())


def one_per_class(
    data: ImageSet, num_classes: int, batches: int, generator: torch.Generator
) -> list[ImageSet]:
    """``batches`` disjoint-as-possible batches of one image per class present (classes in order)."""
    out = []
    per_class = {
        c: (data.y == c).nonzero().flatten()[torch.randperm(int((data.y == c).sum()), generator=generator)]
        for c in range(num_classes)
        if bool((data.y == c).any())
    }
    for b in range(batches):
        picks = [int(idx[b % len(idx)]) for idx in per_class.values()]
        out.append(data.subset(picks))
    return out


def accuracy_score(
    model: nn.Module,
    policy: Policy | None,
    data: ImageSet,
    info: DatasetInfo,
    *,
    batches: int = 10,
    eta: float = 1e-5,
    seed: int = 0,
) -> float:
    """S_acc (Eq. 14) of ``policy`` on a randomly initialized ``model``, averaged over ``batches`` batches
    of one transformed image per class."""
    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    scores = []
    for batch in one_per_class(data, info.num_classes, batches, gen):
        x = transform_with(policy, batch.x.cpu(), gen)
        scores.append(jacobian_score(model, info.normalize(x.to(device)), eta))
    return sum(scores) / len(scores)


def training_accuracy_score(
    model: nn.Module,
    policy: Policy | None,
    images: ImageSet,
    info: DatasetInfo,
    *,
    rounds: int = 10,
    lr: float = 0.1,
    seed: int = 0,
) -> float:
    """The practical S_acc (Sec. 5.1): mean training accuracy over ``rounds`` full-batch SGD steps
    (momentum 0.9) of a copy of the random ``model`` on the transformed ``images``."""
    net = copy.deepcopy(model).train()
    device = next(net.parameters()).device
    x = info.normalize(transform_with(policy, images.x.cpu(), torch.Generator().manual_seed(seed)).to(device))
    y = images.y.to(device)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    accuracies = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(rounds):
            logits = net(x)
            accuracies.append(float((logits.argmax(-1) == y).float().mean()))
            loss = torch.nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return sum(accuracies) / len(accuracies)
