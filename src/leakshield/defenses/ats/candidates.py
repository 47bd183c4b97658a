"""ATS's candidate policies and the filters between them and the final set (Gao et al., ATS, Sec. 4.3–4.5,
Algorithm 1): the random draw, the FSIM pre-filter of distorting policies, the fresh random model of each
accuracy score, and the choice of the best policies that share no library entry."""

from __future__ import annotations

import copy
import zlib

import torch
from torch import nn

from leakshield.data.types import ImageSet
from leakshield.defenses.ats.policy import Policy, random_policy, shares_functions
from leakshield.defenses.ats.scores import transform_with
from leakshield.metrics.fsim import fsim


def candidates(include: list[str], count: int, ops: int, exact: bool, seed: int) -> list[Policy]:
    """The ``include``d policies, then ``count`` distinct random ones of at most (``exact``: exactly)
    ``ops`` entries; a larger ``count`` extends the same list."""
    gen = torch.Generator().manual_seed(seed)
    drawn = [Policy.parse(text) for text in include]
    seen = {str(p) for p in drawn}
    while len(drawn) < len(include) + count:
        policy = random_policy(gen, ops, exact=exact)
        if str(policy) not in seen:
            seen.add(str(policy))
            drawn.append(policy)
    return drawn


def reinitialized(model: nn.Module, seed: int) -> nn.Module:
    """A copy of ``model`` with every layer re-drawn by its ``reset_parameters`` (PyTorch's default
    initialization; layers without one keep their values) from ``seed``; the global RNG is untouched."""
    net = copy.deepcopy(model)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for module in net.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()
    return net.eval()


def policy_seed(policy: Policy, seed: int) -> int:
    """The seed of the random model M^r that scores ``policy`` (stable across runs and C_max)."""
    return (seed * 1_000_003 + zlib.crc32(str(policy).encode())) % (2**63)


def mean_fsim(policy: Policy, images: ImageSet, seed: int) -> float:
    """Mean FSIM of ``images`` against themselves through ``policy`` (signs drawn from ``seed``)."""
    x = images.x.cpu()
    return float(fsim(x, transform_with(policy, x, torch.Generator().manual_seed(seed + 2))).mean())


def disjoint_best(ranked: list[str], keep: int, disjoint: bool) -> list[str]:
    """The first ``keep`` policies of ``ranked``, skipping any that shares a library entry with one
    already kept (``disjoint``, Sec. 4.5)."""
    chosen: list[str] = []
    for text in ranked:
        policy = Policy.parse(text)
        if disjoint and any(shares_functions(policy, Policy.parse(c)) for c in chosen):
            continue
        chosen.append(text)
        if len(chosen) == keep:
            break
    return chosen
