"""The adaptive attack on ATS: the policy set is public (Kerckhoffs), so the attacker knows which pixels
a policy leaves at a fixed value whatever the image (the black border of a translation or shear, the
grey corners of a rotation, the same after later point operations) and pins them there.

For every policy of the set and every sign combination of its signed magnitudes, the policy is applied
to probe images (black, white and random); pixels that come out identical on every probe are
content-independent. Each distinct pinned pattern is a candidate: IG (signed Adam, cosine, boxed) runs
with those pixels fixed (its box narrowed to the value), and the candidate whose reconstruction matches
the update best is kept. The free pixels are what is left to recover; without a geometric operation the
attack is plain IG. Batches of one image (the paper's setting); larger batches fall back to plain IG.

Reference: Gao et al., ATS, TPAMI 2023 (the defense); the adaptation is leakshield's. The other
adaptive setting of the issue, attacking an early-round model, is the ``round`` dimension of a grid
(``attack.rounds``); see configs/ats.yaml.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import pydantic
import torch

from leakshield.attacks.adaptive.inversion import ADAPTIVE_IG, AdaptiveInversion, find_defense
from leakshield.attacks.base import ATTACKS, Attack, Reconstruction
from leakshield.attacks.passive.inversion.engine import GradientInversion
from leakshield.attacks.passive.inversion.params import GradientInversionParams
from leakshield.attacks.passive.inversion.presets import preset_params
from leakshield.data.types import DatasetInfo
from leakshield.defenses.ats.policy import Policy, PolicySet, apply_policies
from leakshield.fl.types import ServerView
from leakshield.threats import ADAPTIVE_OBSERVER


@dataclass(frozen=True)
class PinnedPixels:
    """Pixels a policy fixes whatever the image: ``mask`` (C×H×W bool) and their ``value`` in [0, 1]."""

    mask: torch.Tensor
    value: torch.Tensor

    @property
    def count(self) -> int:
        return int(self.mask.sum())


def pinned_pixels(
    policy: Policy, signs: Sequence[int], shape: tuple[int, int, int], probes: int = 4
) -> PinnedPixels:
    """The content-independent pixels of ``policy`` with ``signs`` (black, white and random probes)."""
    gen = torch.Generator().manual_seed(0)
    images = torch.cat(
        [torch.zeros(1, *shape), torch.ones(1, *shape), torch.rand(probes, *shape, generator=gen)]
    )
    sign_rows = torch.tensor([list(signs) + [1] * (3 - len(signs))] * len(images))
    out = apply_policies(images, [policy] * len(images), sign_rows)
    mask = (out == out[0]).all(dim=0)
    return PinnedPixels(mask, torch.where(mask, out[0], torch.zeros_like(out[0])))


def candidates(policies: PolicySet, shape: tuple[int, int, int]) -> list[PinnedPixels]:
    """The distinct pinned patterns over the set's policies and their sign combinations, most pinned
    pixels first (an empty pattern, plain IG, is always among them)."""
    found: dict[bytes, PinnedPixels] = {}
    for policy in policies.policies:
        signed = [k for k, t in enumerate(policy.ops) if t.signed]
        for combo in itertools.product((1, -1), repeat=len(signed)):
            signs = [1] * len(policy.ops)
            for k, s in zip(signed, combo, strict=True):
                signs[k] = s
            pinned = pinned_pixels(policy, signs, shape)
            key = pinned.mask.numpy().tobytes() + pinned.value.numpy().tobytes()
            found.setdefault(key, pinned)
    empty = PinnedPixels(torch.zeros(shape, dtype=torch.bool), torch.zeros(shape))
    found.setdefault(empty.mask.numpy().tobytes() + empty.value.numpy().tobytes(), empty)
    return sorted(found.values(), key=lambda p: -p.count)


class PinnedInversion(GradientInversion):
    """IG whose box pins some pixels to known values (lower bound = upper bound there)."""

    def __init__(self, params, pinned: PinnedPixels) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params)
        self.pinned = pinned

    def _bounds(self, info: DatasetInfo, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = super()._bounds(info, device)
        mask = self.pinned.mask.to(device)[None]
        value = info.normalize(self.pinned.value.to(device)[None])
        return torch.where(mask, value, lo.expand_as(value)), torch.where(mask, value, hi.expand_as(value))


class AtsPinnedParams(preset_params("ats-pinned", {**ADAPTIVE_IG, "boxed": True})):  # type: ignore[misc]
    """max_candidates: at most this many pinned patterns are tried (most pinned pixels first, and the
    empty pattern, plain IG, always)."""

    max_candidates: int = pydantic.Field(default=8, ge=1)


class AtsPinnedInversion(AdaptiveInversion):
    """See the module docstring."""

    params: AtsPinnedParams

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        ats = find_defense(view.defenses, "ats")
        base = self.params.model_dump(exclude={"max_candidates"})
        params = GradientInversionParams(**base)
        if ats is None or view.batch_size != 1:
            rec = GradientInversion(params).reconstruct(view, seed=seed)
            rec.stats["pinned_pixels"] = 0.0
            return rec
        policies = PolicySet.parse(str(ats.params.policies))  # type: ignore[attr-defined]
        best: Reconstruction | None = None
        found = candidates(policies, view.data_info.shape)
        # the most informative patterns, and always the empty one (plain IG: the image drew no shift)
        tried = [*found[:-1][: self.params.max_candidates - 1], found[-1]]
        for pinned in tried:
            rec = PinnedInversion(params, pinned).reconstruct(view, seed=seed)
            rec.stats["pinned_pixels"] = float(pinned.count)
            if best is None or rec.stats["grad_distance"] < best.stats["grad_distance"]:
                best = rec
        assert best is not None
        best.stats["candidates"] = float(len(tried))
        return best

    def reconstruct_many(
        self, views: Sequence[ServerView], *, seeds: Sequence[int], progress: bool = False
    ) -> list[Reconstruction]:
        return Attack.reconstruct_many(self, views, seeds=seeds, progress=progress)


ATTACKS.register(
    "ats-pinned",
    summary="adaptive vs ATS: IG with the pixels the public policy set fixes (black borders of shifts, "
    "shears; rotation fill) pinned, one run per policy × sign pattern, best match kept; 4800 steps",
    reference="leakshield; defense: Gao et al., ATS, TPAMI 2023 (the policy set is public)",
    params=AtsPinnedParams,
    threat=ADAPTIVE_OBSERVER,
    targets=("ats",),
)(AtsPinnedInversion)
