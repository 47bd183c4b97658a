"""The adaptive attack on CENSOR (Zhang et al., NDSS 2025): ``censor-aware``.

CENSOR releases, per parameter tensor l, a gradient ĝ_l orthogonal to the true g_l with g_l's norm
(``leakshield.defenses.censor``). An attacker who knows that (Kerckhoffs) cannot match ĝ, but it can
ask for dummy images whose gradient g'_l is orthogonal to ĝ_l and has ĝ_l's norm in every tensor:

    D_orth(g', ĝ) = (1/L)·Σ_l w_l·[cos²(g'_l, ĝ_l) + (log ||g'_l|| − log ||ĝ_l||)²],

zero at the true images. The norms are what CENSOR keeps of the gradient: one number per tensor, and
the orthogonality one linear condition per tensor. From ``until_round`` on the client releases plain
gradients and the attack is plain IG. Under ``fallback: original`` (public configuration)
the client releases g itself when no candidate lowered its loss: the attack first runs plain IG and
keeps it when its cosine distance ends below ``FALLBACK_MATCH`` (the release was the true gradient),
else minimises D_orth. (Minimising min(D_orth, cosine) in one run does not work: random dummies start
near-orthogonal to any release, so D_orth's basin captures the run.) The prior and the optimizer are
IG's (TV 1e-4, 4800 signed-Adam steps).

Parameters: IG's (:class:`~leakshield.attacks.passive.inversion.engine.GradientInversionParams`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from leakshield.attacks.adaptive.inversion import ADAPTIVE_IG, find_defense
from leakshield.attacks.base import ATTACKS, Attack, Reconstruction
from leakshield.attacks.passive.inversion.engine import GradientInversion
from leakshield.attacks.passive.inversion.objectives import Distance
from leakshield.attacks.passive.inversion.presets import preset_params
from leakshield.fl.types import ServerView
from leakshield.threats import ADAPTIVE_OBSERVER


def orthogonality_distance(
    dummy: Sequence[torch.Tensor], target: Sequence[torch.Tensor], weights: Sequence[float] | None = None
) -> torch.Tensor:
    """D_orth (module docstring): per tensor, the squared cosine plus the squared log-ratio of norms,
    averaged over the tensors of nonzero weight (tensors whose release is zero are skipped)."""
    total = dummy[0].new_zeros(())
    counted = 0
    for i, (d, t) in enumerate(zip(dummy, target, strict=True)):
        w = 1.0 if weights is None else weights[i]
        t_norm = t.norm()
        if w == 0 or t_norm == 0:
            continue
        d_norm = d.norm() + 1e-12
        cosine = (d * t).sum() / (d_norm * t_norm)
        total = total + w * (cosine.pow(2) + (d_norm.log() - t_norm.log()).pow(2))
        counted += 1
    return total / max(counted, 1)


#: the cosine distance below which the attacker takes a release for the true gradient (a fallback):
#: IG on a true gradient ends near 0, on an orthogonal release near 1
FALLBACK_MATCH = 0.1


class CensorAware(GradientInversion):
    """IG with :func:`orthogonality_distance` as its update distance (module docstring); first plain IG
    when the defense's public configuration says ``fallback: original``."""

    def _distance(self, view: ServerView) -> Distance:
        return orthogonality_distance

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        censor = find_defense(view.defenses, "censor")
        until = getattr(censor.params, "until_round", None) if censor is not None else None
        cosine = GradientInversion(self.params.model_copy(update={"distance": "cosine"}), self.init_images)
        if until is not None and view.round >= until:  # past the defended rounds: the plain gradient
            return cosine.reconstruct(view, seed=seed)
        if censor is not None and getattr(censor.params, "fallback", "best") == "original":
            plain = cosine.reconstruct(view, seed=seed)
            if plain.stats.get("grad_distance", 1.0) <= FALLBACK_MATCH:
                plain.stats["fallback_detected"] = 1.0
                return plain
        rec = super().reconstruct(view, seed=seed)
        rec.stats["fallback_detected"] = 0.0
        return rec

    def reconstruct_many(
        self, views: Sequence[ServerView], *, seeds: Sequence[int], progress: bool = False
    ) -> list[Reconstruction]:
        # each victim's release may or may not be a fallback: one by one
        return Attack.reconstruct_many(self, views, seeds=seeds, progress=progress)


ATTACKS.register(
    "censor-aware",
    summary="adaptive vs CENSOR: dummy gradients orthogonal to the release with its per-tensor norms + "
    "TV (first plain IG under fallback: original); signed Adam, 4800 steps",
    reference="leakshield, on Zhang et al., CENSOR, NDSS 2025 (what the release keeps: norms, orthogonality)",
    params=preset_params("censor-aware", ADAPTIVE_IG),
    threat=ADAPTIVE_OBSERVER,
    targets=("censor",),
)(CensorAware)
