"""Adaptive gradient-inversion attacks: each knows the defense it targets (Kerckhoffs) through the
defenses' public configuration in the server's view, never their secrets (seeds, masks, drawn noise).

=======================  =====================  ===================================================
attack                   targets                adaptation
=======================  =====================  ===================================================
pruning-aware            pruning, quantization  match only the released (non-zero) entries
noise-aware              gaussian-noise,        the distance is the noise's negative log-likelihood:
                         laplacian-noise,       L2/(2σ²) for Gaussian (DP-SGD: σ·C/B), L1/b for
                         dp-sgd, clipping,      Laplacian, cosine (scale-free) against clipping
                         dp-fedavg              and DP-FedAvg (clipped, isotropic noise)
soteria-bypass           soteria                the defended layer gets weight 0 in the matching loss
dropout-expectation      dropout                the dummy gradient is averaged over dropout masks
dropout-mask             dropout                the client's mask, read off the zero columns of the
                                                next layer's weight gradient (batch 1), is used
precode-expectation      precode                the dummy gradient is averaged over bottleneck samples
precode-analytic         precode                a fully connected layer before the bottleneck leaks
(precode_analytic.py)                           its input (∇W/∇b); then feature inversion
dcs2-extra               dcs2                   one image more per sensitive sample, best match
(dcs2_adaptive.py)                              scored
dcs2-prior               dcs2                   starts from the public class-average image
carlini (carlini.py)     mixup, instahide       many rounds, clustering, regression (LODA Eq. 3)
ats-pinned               ats                    the pixels the public policy set fixes (black
(ats_adaptive.py)                               borders) are pinned; best candidate kept
loda-inverse             loda                   IG, then Eq. 6 (the encoder's stationarity) solved
(loda_adaptive.py)                              with the public extractor
=======================  =====================  ===================================================

References: Balunović et al., *Bayesian Framework for Gradient Leakage*, ICLR 2022 (noise-aware,
Soteria bypass, dropout); Wan et al., LODA, Sec. 5.1 (pruning: "the attack is adapted to match only the
unpruned part").

Against its plain counterpart (IG, same budget), measured over seeds by ``python
benchmarks/adaptive_spread.py``: dropout-mask, pruning-aware, soteria-bypass, loda-inverse and
ats-pinned win by margins the tests state; dropout-expectation by +0.014 SSIM; noise-aware is on par
under Laplacian noise; precode-expectation is not reliably better on a 16-unit MLP (+0.12 ± 0.31 over 5
seeds, from −0.21 to +0.53); dcs2-extra loses and dcs2-prior is on par (see ``dcs2_adaptive.py``).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from leakshield.attacks.base import ATTACKS, Attack, Reconstruction
from leakshield.attacks.passive.inversion.engine import GradientInversion
from leakshield.attacks.passive.inversion.presets import IG_LIKE, preset_params
from leakshield.defenses.base import PublicDefense
from leakshield.defenses.dropout import ActiveDropout
from leakshield.defenses.soteria import defended_linear
from leakshield.fl.types import ServerView
from leakshield.threats import ADAPTIVE_OBSERVER

ADAPTIVE_IG = {**IG_LIKE, "distance": "cosine", "iterations": 4800}


def find_defense(defenses: Sequence[PublicDefense], *names: str) -> PublicDefense | None:
    """The public configuration of the first defense in the view named one of ``names``."""
    return next((d for d in defenses if d.name in names), None)


class AdaptiveInversion(GradientInversion):
    """A gradient-inversion attack whose parameters are adapted to the defenses in the view."""

    def adaptation(self, view: ServerView) -> dict[str, Any]:
        """Parameter changes for this view; the default changes nothing."""
        return {}

    def adapted(self, view: ServerView) -> GradientInversion:
        attack = GradientInversion(self.params.model_copy(update=self.adaptation(view)), self.init_images)
        attack.name = self.name
        return attack

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        return self.adapted(view).reconstruct(view, seed=seed)

    def reconstruct_many(
        self, views: Sequence[ServerView], *, seeds: Sequence[int], progress: bool = False
    ) -> list[Reconstruction]:
        if not views:
            return []
        # the victims of one cell face the same defenses: adapt once
        return self.adapted(views[0]).reconstruct_many(views, seeds=seeds, progress=progress)


class NoiseAwareInversion(AdaptiveInversion):
    """Matches with the negative log-likelihood of the release defense's noise plus the TV prior, the
    Bayes-optimal attack of Balunović et al. (ICLR 2022, Sec. 4): Gaussian σ → ||g' − g||²/(2σ²);
    Laplacian b → ||g' − g||₁/b; DP-SGD (σ, C) on a batch of B → Gaussian of std σ·C/B per entry;
    clipping alone → cosine, which the clipping's rescaling cannot affect. Without such a defense in the
    view the configured distance is kept.

    The likelihood is taken per released entry (divided by the number P of entries of the update, i.e.
    by the NLL's expected value at the truth up to a constant), so that it is O(1) at the truth like IG's
    cosine distance and the TV weight keeps the meaning it has in IG."""

    def adaptation(self, view: ServerView) -> dict[str, Any]:
        return noise_adaptation(view, self.params.layer_weights)


class SoteriaBypass(AdaptiveInversion):
    """Gives Soteria's defended layer weight 0 and reconstructs from the other layers (Balunović et al.,
    ICLR 2022, Sec. 5: 4000 Adam steps, lr 0.1, TV 4e-4). The layer is the one Soteria's public
    configuration names, else the one it defends by default (the last ``nn.Linear``)."""

    def adaptation(self, view: ServerView) -> dict[str, Any]:
        return soteria_adaptation(view, self.params.layer_weights)


def noise_adaptation(view: ServerView, layer_weights: dict[str, float]) -> dict[str, Any]:
    """The parameter changes of :class:`NoiseAwareInversion` for ``view`` (none without a noise,
    DP-SGD or clipping defense in it); shared by every attack that adapts to noise (GGL's too)."""
    weights = dict(layer_weights)
    entries = sum(v.numel() for v in view.update.delta.values())
    gaussian = find_defense(view.defenses, "gaussian-noise")
    laplacian = find_defense(view.defenses, "laplacian-noise")
    dp = find_defense(view.defenses, "dp-sgd")
    if gaussian is not None or dp is not None:
        if gaussian is not None:
            std = float(gaussian.params.sigma)  # type: ignore[attr-defined]
        else:
            assert dp is not None
            std = (
                float(dp.params.noise_multiplier)  # type: ignore[attr-defined]
                * float(dp.params.clip)  # type: ignore[attr-defined]
                / max(view.update.protocol.batch_size, 1)
            )
        scale = 1 / (2 * std**2 * entries) if std > 0 else 1.0
        return {"distance": "l2", "layer_weights": {**weights, "*": scale}}
    if laplacian is not None:
        b = float(laplacian.params.scale)  # type: ignore[attr-defined]
        scale = 1 / (b * entries) if b > 0 else 1.0
        return {"distance": "l1", "layer_weights": {**weights, "*": scale}}
    if find_defense(view.defenses, "clipping", "dp-fedavg") is not None:
        # DP-FedAvg clips the update (scale lost) and, locally, adds isotropic noise: cosine to the release
        return {"distance": "cosine"}
    return {}


def soteria_adaptation(view: ServerView, layer_weights: dict[str, float]) -> dict[str, Any]:
    """The parameter changes of :class:`SoteriaBypass`: Soteria's defended layer (the one its public
    configuration names, else the last ``nn.Linear``) gets weight 0, ahead of the other patterns."""
    soteria = find_defense(view.defenses, "soteria")
    layer = getattr(soteria.params, "layer", None) if soteria is not None else None
    module, _ = defended_linear(view.model, layer)
    weight = f"{module}.weight" if module else "weight"
    return {"layer_weights": {weight: 0.0, **layer_weights}}


class DropoutMaskInference(AdaptiveInversion):
    """Reads the client's dropout mask off its update and inverts with that mask fixed.

    A dropped feature sends no signal to the Linear layer after the dropout: for a batch of one its
    weight-gradient column is exactly zero, so the mask is ``any(∂L/∂W ≠ 0, dim=0)``. With the mask
    known the model is deterministic again and the attack is plain IG. For larger batches (the union of
    the samples' masks) the attack falls back to the mean over ``dropout_samples`` draws. This reads
    the update only, never the defense's random state."""

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        model = copy.deepcopy(view.model)
        fixed = infer_dropout_masks(model, view.update.delta) if view.batch_size == 1 else 0
        # with every mask known the model is deterministic: one draw is the exact gradient
        params = self.params.model_copy(update={"dropout_samples": 1} if fixed else {})
        attack = GradientInversion(params, self.init_images)
        rec = attack.reconstruct(dataclasses.replace(view, model=model), seed=seed)
        rec.stats["masks_inferred"] = float(fixed)
        return rec

    def reconstruct_many(
        self, views: Sequence[ServerView], *, seeds: Sequence[int], progress: bool = False
    ) -> list[Reconstruction]:
        # every victim has its own mask: one by one
        return Attack.reconstruct_many(self, views, seeds=seeds, progress=progress)


def infer_dropout_masks(model: nn.Module, update: dict[str, torch.Tensor]) -> int:
    """Fix each dropout's mask in ``model`` (a copy of the client's) to the features whose column of
    the next Linear's weight update is not all zero (a batch of one: a dropped feature sends nothing).
    Returns the number of masks fixed."""
    fixed = 0
    for dropout, weight in _dropout_then_linear(model):
        grad = update.get(weight)
        if grad is not None:
            dropout.fixed_mask = (grad != 0).any(dim=0)
            fixed += 1
    return fixed


def _dropout_then_linear(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """(dropout module, name of the weight of the Linear it feeds) for every ActiveDropout directly
    followed by an nn.Linear inside an nn.Sequential (where the dropout defense puts it)."""
    pairs = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.Sequential):
            continue
        children = list(module.named_children())
        for (_, first), (second_name, second) in itertools.pairwise(children):
            if isinstance(first, ActiveDropout) and isinstance(second, nn.Linear):
                pairs.append((first, f"{name}.{second_name}.weight" if name else f"{second_name}.weight"))
    return pairs


ATTACKS.register(
    "pruning-aware",
    summary="adaptive vs pruning/compression: IG matching only the released (non-zero) entries, TV 1e-3, "
    "4800 steps",
    reference="Zhu et al., NeurIPS 2019, Sec. 5; LODA (Wan et al.) Sec. 5.1 (TV 1e-3 against pruning)",
    params=preset_params("pruning-aware", {**ADAPTIVE_IG, "tv": 1e-3, "match_released": True}),
    threat=ADAPTIVE_OBSERVER,
    targets=("pruning", "quantization"),
)(GradientInversion)

ATTACKS.register(
    "noise-aware",
    summary="adaptive vs noise/DP-SGD/clipping: the noise's negative log-likelihood (L2/2σ² or L1/b) + TV, "
    "cosine vs clipping; signed Adam, 4800 steps",
    reference="Balunović et al., Bayesian Framework for Gradient Leakage, ICLR 2022",
    params=preset_params("noise-aware", ADAPTIVE_IG),
    threat=ADAPTIVE_OBSERVER,
    targets=("gaussian-noise", "laplacian-noise", "dp-sgd", "clipping", "dp-fedavg"),
)(NoiseAwareInversion)

ATTACKS.register(
    "soteria-bypass",
    summary="adaptive vs Soteria: cosine matching with the defended layer's weight dropped, TV 4e-4, "
    "4000 Adam steps",
    reference="Balunović et al., Bayesian Framework for Gradient Leakage, ICLR 2022",
    params=preset_params("soteria-bypass", {**ADAPTIVE_IG, "iterations": 4000, "tv": 4e-4}),
    threat=ADAPTIVE_OBSERVER,
    targets=("soteria",),
)(SoteriaBypass)

ATTACKS.register(
    "dropout-expectation",
    summary="adaptive vs dropout: IG whose dummy gradient is the mean over 8 dropout masks, 4800 steps",
    reference="Balunović et al., ICLR 2022 (expectation over the defense's randomness)",
    params=preset_params("dropout-expectation", {**ADAPTIVE_IG, "dropout_samples": 8}),
    threat=ADAPTIVE_OBSERVER,
    targets=("dropout",),
)(GradientInversion)

ATTACKS.register(
    "dropout-mask",
    summary="adaptive vs dropout: reads the client's mask off the zero weight-gradient columns after the "
    "dropout (batch 1) and runs IG with it fixed, 4800 steps",
    reference="leakshield; the mask leaks as in Balunović et al., ICLR 2022 (dropout as a defense)",
    params=preset_params("dropout-mask", {**ADAPTIVE_IG, "dropout_samples": 4}),
    threat=ADAPTIVE_OBSERVER,
    targets=("dropout",),
)(DropoutMaskInference)

ATTACKS.register(
    "precode-expectation",
    summary="adaptive vs PRECODE: IG whose dummy gradient is the mean over 8 bottleneck samples, 4800 steps",
    reference="Balunović et al., ICLR 2022 (expectation over the defense's randomness); PRECODE, WACV 2022",
    params=preset_params("precode-expectation", {**ADAPTIVE_IG, "dropout_samples": 8}),
    threat=ADAPTIVE_OBSERVER,
    targets=("precode",),
)(GradientInversion)
