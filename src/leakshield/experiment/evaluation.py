"""The evaluator: scores a reconstruction against the private batch it never gave the attack."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from leakshield.attacks.base import Reconstruction
from leakshield.attacks.passive.labels import label_accuracy
from leakshield.data.types import ImageSet
from leakshield.errors import LeakshieldError
from leakshield.metrics.image import mean_finite, mse, mse_normalized, psnr, ssim
from leakshield.metrics.lpips import LPIPS, load_lpips
from leakshield.metrics.privacy import attack_success_rate, match_reconstructions


@dataclass(frozen=True)
class VictimScore:
    """Scores of one victim batch; ``matched`` are the reconstructions ordered like the truth."""

    per_image: dict[str, list[float]]
    label_acc: float
    matched: torch.Tensor


def load_cell_lpips(config: Any, device: torch.device) -> tuple[LPIPS | None, str]:
    """The LPIPS network of ``metrics.lpips`` (``net``, ``weights``) on ``device``, or None and the reason
    it is n/a (no weights file given, or the file is unusable)."""
    if config.weights is None:
        return None, "n/a: no LPIPS weights file given (metrics.lpips.weights)"
    try:
        return load_lpips(config.net, config.weights).to(device), ""
    except LeakshieldError as exc:
        return None, f"n/a: {exc}"


def score_victim(
    reconstruction: Reconstruction,
    truth: torch.Tensor,
    labels: torch.Tensor,
    *,
    sensitive: torch.Tensor | None = None,
    defended: torch.Tensor | None = None,
    match_on: str = "ssim",
    lpips: LPIPS | None = None,
    std: Sequence[float] | None = None,
    component: torch.Tensor | None = None,
) -> VictimScore:
    """Match reconstructions to ``truth`` (Hungarian on ``match_on``) and score each image.

    Scores against the private images: mse, psnr, ssim, lpips (if available), and mse_normalized when
    the dataset's per-channel ``std`` is given. With a mixing defense's ``component`` (each image's
    component of largest weight), psnr_component and ssim_component score against it (LODA Sec. 5.1).
    When the defense changed the inputs (``defended`` x' differs from the truth), psnr_defended and
    ssim_defended score against x'. With ``sensitive`` flags, the per-image ``sensitive`` (1/0) lets
    :func:`aggregate` report the sensitive images' own means (DCS²).
    """
    images = reconstruction.images.detach().cpu()
    if not torch.isfinite(images).all():
        raise FloatingPointError("the reconstruction contains NaN or Inf")
    truth = truth.detach().cpu()
    matched = images[match_reconstructions(images, truth, match_on)]
    scores = {
        "mse": mse(matched, truth).tolist(),
        "psnr": psnr(matched, truth).tolist(),
        "ssim": ssim(matched, truth).tolist(),
    }
    if std is not None:
        scores["mse_normalized"] = mse_normalized(matched, truth, std).tolist()
    if lpips is not None:
        device = lpips.shift.device
        scores["lpips"] = lpips(matched.to(device), truth.to(device)).cpu().tolist()
    if defended is not None and defended.shape == truth.shape:
        defended = defended.detach().cpu()
        if not torch.equal(defended, truth):
            scores["psnr_defended"] = psnr(matched, defended).tolist()
            scores["ssim_defended"] = ssim(matched, defended).tolist()
    if component is not None and component.shape == truth.shape:
        component = component.detach().cpu().clamp(0, 1)
        scores["psnr_component"] = psnr(matched, component).tolist()
        scores["ssim_component"] = ssim(matched, component).tolist()
    if sensitive is not None:
        scores["sensitive"] = sensitive.detach().cpu().float().tolist()
    rec_labels = reconstruction.labels
    label_acc = label_accuracy(rec_labels, labels) if rec_labels is not None else math.nan
    return VictimScore(per_image=scores, label_acc=label_acc, matched=matched)


@dataclass(frozen=True)
class CellOutput:
    """A computed cell: aggregate ``metrics``, per-victim rows, the image grid's rows."""

    metrics: dict[str, Any]
    victims: list[dict[str, Any]]
    grid_rows: list[torch.Tensor] | None = None


def score_reconstructions(
    reconstructions: Sequence[Reconstruction],
    truths: Sequence[ImageSet],
    *,
    metrics: Any,
    lpips: LPIPS | None = None,
    lpips_reason: str = "",
    defended: Sequence[torch.Tensor | None] | None = None,
    extra: Sequence[dict[str, Any]] | None = None,
    std: Sequence[float] | None = None,
    components: Sequence[torch.Tensor | None] | None = None,
) -> CellOutput:
    """The one scoring path (grid cells, the update auditor, probes, a client's self-audit): each
    reconstruction against its private ``truths`` (and the ``defended`` inputs x'), matched and scored by
    :func:`score_victim`, aggregated by :func:`aggregate` under the config's ``metrics`` section
    (``match_on``, ``asr_threshold``); with the dataset's ``std``, mse_normalized too; with a mixing
    defense's largest ``components``, the *_component scores; per-victim rows carry ``extra``; the grid
    shows the truths, the defended inputs where they differ, and the matched reconstructions."""
    defended = list(defended) if defended is not None else [None] * len(truths)
    components = list(components) if components is not None else [None] * len(truths)
    scores = [
        score_victim(
            r,
            t.x,
            t.y,
            sensitive=t.sensitive,
            defended=d,
            match_on=metrics.match_on,
            lpips=lpips,
            std=std,
            component=c,
        )
        for r, t, d, c in zip(reconstructions, truths, defended, components, strict=True)
    ]
    out: dict[str, Any] = dict(aggregate(scores, metrics.asr_threshold))
    if "lpips" not in out and lpips_reason:
        out["lpips_note"] = lpips_reason
    rows = [
        {**s.per_image, "label_acc": s.label_acc, **(extra[i] if extra else {})} for i, s in enumerate(scores)
    ]
    grid = [torch.cat([t.x.detach().cpu() for t in truths])]
    shown = torch.cat(
        [(d if d is not None else t.x).detach().cpu() for d, t in zip(defended, truths, strict=True)]
    )
    if not torch.equal(shown, grid[0]):
        grid.append(shown)
    grid.append(torch.cat([s.matched for s in scores]))
    return CellOutput(metrics=out, victims=rows, grid_rows=grid)


def aggregate(victims: list[VictimScore], asr_threshold: float) -> dict[str, float]:
    """Means over every image of every victim batch (and the spread of PSNR/SSIM, their best image and
    LPIPS's: the worst case for privacy, LODA's Max PSNR / Min LPIPS), plus ASR."""
    out: dict[str, float] = {}
    keys = sorted({k for v in victims for k in v.per_image})
    columns = {
        key: torch.tensor([x for v in victims for x in v.per_image.get(key, [])], dtype=torch.float64)
        for key in keys
    }
    flags = columns.pop("sensitive", None)
    for key, values in columns.items():
        out[key] = mean_finite(values)
        if key in ("psnr", "ssim") and len(values) > 1:
            out[f"{key}_std"] = float(values.std())
        finite = values[torch.isfinite(values)]
        if key in ("psnr", "ssim") and len(finite):
            out[f"{key}_max"] = float(finite.max())
        if key == "lpips" and len(finite):
            out["lpips_min"] = float(finite.min())
    ssims = columns["ssim"]
    out["asr"] = attack_success_rate(ssims, asr_threshold)
    if "ssim_defended" in columns:
        out["asr_defended"] = attack_success_rate(columns["ssim_defended"], asr_threshold)
    if "ssim_component" in columns:
        out["asr_component"] = attack_success_rate(columns["ssim_component"], asr_threshold)
    if flags is not None and len(flags) == len(ssims) and bool(flags.any()):
        chosen = flags > 0
        for key in ("ssim", "psnr", "mse"):
            out[f"{key}_sensitive"] = mean_finite(columns[key][chosen])
        out["asr_sensitive"] = attack_success_rate(ssims[chosen], asr_threshold)
    label_accs = [v.label_acc for v in victims if not math.isnan(v.label_acc)]
    out["label_acc"] = sum(label_accs) / len(label_accs) if label_accs else math.nan
    out["images"] = float(len(ssims))
    return out
