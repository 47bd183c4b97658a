"""Choosing LODA's c for an extractor (Wan et al., Sec. 4.1 and Appendix B.1): c trades the pixel distance
of x′ from x* against the feature alignment of Eq. 4, and its scale depends on the extractor (on the
default LeNet c 1 leaves x′ ≈ x*, on the paper's ResNet-18 c 20 obscures). The paper's criterion — x′
far from x* in pixels, its features close — is applied on public images: c is the smallest value of a
grid whose obscured images have a mean SSIM to their originals of at most ``ssim_target`` (far enough),
which, of the values far enough, keeps the features closest. Everything here is public, so the adaptive
attack recomputes the same c.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from leakshield.artifacts import Artifact, ArtifactCache, FitKey, data_fingerprint
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.loda.encoder import obscure
from leakshield.defenses.loda.extractor import ExtractorParams, feature_map, fitted_extractor
from leakshield.metrics.image import ssim

#: public images the calibration obscures, and the images they start from
CALIBRATION_IMAGES = 16


@dataclass(frozen=True)
class CTrial:
    """One grid value: the mean SSIM of x′ to x*, and the relative feature error ‖g(x′) − g(x*)‖/‖g(x*)‖."""

    c: float
    ssim: float
    feature_error: float


def trial_c(
    g: Callable[[torch.Tensor], torch.Tensor],
    private: torch.Tensor,
    starts: torch.Tensor,
    info: DatasetInfo,
    c: float,
    steps: int,
    step_size: float,
) -> CTrial:
    """Obscure ``private`` from ``starts`` with ``c`` and measure both sides of Eq. 4."""
    x_prime = obscure(g, private, starts, info, c=c, steps=steps, lr=step_size)
    with torch.no_grad():
        target = g(info.normalize(private))
        error = (g(info.normalize(x_prime)) - target).norm(dim=1) / target.norm(dim=1).clamp_min(1e-12)
    return CTrial(c, float(ssim(x_prime.cpu(), private.cpu()).mean()), float(error.mean()))


def calibrated_c(
    params: ExtractorParams,
    grid: list[float],
    ssim_target: float,
    steps: int,
    step_size: float,
    info: DatasetInfo,
    public: ImageSet,
    seed: int,
    cache: ArtifactCache | None,
    device: torch.device,
) -> tuple[float, list[CTrial]]:
    """The smallest c of ``grid`` whose x′ has mean SSIM ≤ ``ssim_target`` to x* (else the largest), and
    every trial; cached on the public split."""
    fields = params.model_dump(mode="json", include=set(ExtractorParams.model_fields))
    settings = {**fields, "grid": sorted(grid), "ssim_target": ssim_target, "steps": steps, "lr": step_size}
    key = FitKey("loda:c", settings, "public", data_fingerprint(public), seed)

    def fit() -> Artifact:
        g = feature_map(fitted_extractor(params, info, public, seed, cache, device), params)
        order = torch.randperm(len(public), generator=torch.Generator().manual_seed(seed + 17))
        n = min(CALIBRATION_IMAGES, len(public) // 2)  # n public images, obscured from n others
        private, starts = public.x[order[:n]].to(device), public.x[order[n : 2 * n]].to(device)
        trials = []
        for c in sorted(grid):
            trials.append(trial_c(g, private, starts, info, c, steps, step_size))
            if trials[-1].ssim <= ssim_target:
                break
        return Artifact({}, {"trials": [vars(t) for t in trials]})

    artifact = cache.get_or_fit(key, fit) if cache is not None else fit()
    trials = [CTrial(**t) for t in artifact.metadata["trials"]]
    return trials[-1].c, trials
