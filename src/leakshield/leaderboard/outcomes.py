"""What one attack cell (one seed) did to each of its victims: the cell's mean score, each victim's
margin above its own no-information reference (:mod:`.margin`) and how many of its victims leaked
(:func:`.leak_rate.victim_leaked`).

References come from the baseline cell of the same batch size, seed and stage: the public mean image's
SSIM against each victim image, in the victims' order. Victims drawn per seed have a baseline per seed
(``seed`` set); a run whose victims are the same in every seed has one shared baseline (``seed`` None),
which every seed of its stage reads. An attack with a
generative prior also records its prior's draw per image (``prior_ssim`` in the victim rows); its
reference is the higher of the two. An export made before per-victim scores were kept (wave 3) has only
cell means: each of its images then counts at the cell's mean SSIM against the baseline's mean (or the
prior's mean), which :attr:`SeedOutcome.per_victim` says.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.leak_rate import victim_leaked
from leakshield.leaderboard.margin import victim_margin


def finite(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def cell_score(record: CellRecord) -> tuple[float, str] | None:
    """The cell's mean score and its metric: per-image SSIM, or class-level SSIM (a participant's GAN)."""
    for metric in ("ssim", "class_ssim"):
        value = finite(record.metrics.get(metric))
        if value is not None:
            return value, metric
    return None


@dataclass(frozen=True)
class SeedOutcome:
    """One attack cell: its seed, mean score and PSNR, leaked victims of all, its no-information level."""

    seed: int
    score: float
    psnr: float | None
    leaked: int
    victims: int
    reference: float | None
    #: whether leaks were counted from per-victim scores (False: an old export's cell means)
    per_victim: bool = True
    #: the mean over the seed's victims of their margins (max(SSIM − own reference, 0), 3 decimals)
    margin: float = 0.0
    #: the leaderboard's stage the cell belongs to (1: selection, 2: fresh victims)
    stage: int = 1
    #: the mean over the seed's victims of SSIM − own reference, not clipped (the positive control's
    #: per-seed value, :mod:`.controls`; a class-level score, which has no reference: the score itself)
    gain: float = 0.0


def _images(rows: Sequence[dict], key: str) -> list[float | None]:
    return [finite(v) for row in rows for v in (row.get(key) or [])]


def _priors(rows: Sequence[dict], mean: float | None) -> list[float | None]:
    """Each image's prior draw SSIM, aligned with :func:`_images`' SSIMs: a victim's own where recorded,
    none where it has none (a refused victim), the cell's mean where no victim has one (older stores)."""
    recorded = any(row.get("prior_ssim") for row in rows)
    out: list[float | None] = []
    for row in rows:
        images = len(row.get("ssim") or [])
        own = [finite(v) for v in (row.get("prior_ssim") or [])]
        out += own if len(own) == images else [None if recorded else mean] * images
    return out


#: a baseline's place: (stage, seed — None when shared by every seed) → scale label → per-image SSIMs
BaselineImages = dict[tuple[int, int | None], dict[str, list[float]]]


def baseline_images(records: Sequence[CellRecord]) -> BaselineImages:
    """(stage, seed or None) → scale label (``""`` without axes; ``batch=16`` …) → the mean image's SSIM
    per victim image."""
    out: BaselineImages = defaultdict(dict)
    for r in records:
        if r.kind == "baseline" and r.status == "ok":
            values = _images(r.victims, "ssim")
            if values and all(v is not None for v in values):
                out[(r.stage, r.seed)][r.scale or ""] = [float(v) for v in values if v is not None]
    return dict(out)


def references_of(per_image: BaselineImages, scale: str, seed: int | None, stage: int = 1) -> object:
    """The per-image references of a cell at ``scale``, ``seed`` and ``stage``: its seed's baseline,
    else its stage's shared one (None when neither exists: never another seed's victims')."""
    for place in ((stage, seed), (stage, None)):
        if place in per_image:
            return for_scale(per_image[place], scale)
    return None


def baselines(records: Sequence[CellRecord]) -> dict[str, float]:
    """The no-information SSIM (mean over victims) per scale label (``""`` without axes)."""
    found: dict[str, list[float]] = defaultdict(list)
    for r in records:
        value = finite(r.metrics.get("ssim"))
        if r.kind == "baseline" and r.status == "ok" and value is not None and r.stage == 1:
            found[r.scale or ""].append(value)
    return {k: sum(v) / len(v) for k, v in found.items()}


def for_scale(table: dict, scale: str) -> object:
    """``table``'s entry for ``scale``, else for its batch size alone, else for no axes."""
    batch = next((part for part in scale.split() if part.startswith("batch=")), "")
    return table.get(scale, table.get(batch, table.get("")))


def outcome(record: CellRecord, per_image: BaselineImages, means: dict[str, float]) -> SeedOutcome:
    """The margins and leaks of one successful attack cell (see the module docstring for the
    references)."""
    score, metric = cell_score(record) or (math.nan, "ssim")
    psnr, seed, scale = finite(record.metrics.get("psnr")), int(record.seed or 0), record.scale or ""
    stage = record.stage
    if metric == "class_ssim":  # classes are the victims; no no-information level is defined
        values = [finite(row.get("class_ssim")) for row in record.victims]
        if not values:  # an export without per-class rows: the cell's mean stands for one class
            return SeedOutcome(seed, score, psnr, int(victim_leaked(score, None)), 1, None, False,
                               victim_margin(score, None), stage, score)  # fmt: skip
        leaked = sum(victim_leaked(v, None) for v in values if v is not None)
        margin = _mean([victim_margin(v, None) for v in values])
        gain = _mean([v for v in values if v is not None])
        return SeedOutcome(seed, score, psnr, leaked, len(values), None, True, margin, stage, gain)
    mean_image = for_scale(means, scale)
    prior_mean = finite(record.metrics.get("prior_ssim"))
    reference = max((v for v in (mean_image, prior_mean) if v is not None), default=None)
    ssims = _images(record.victims, "ssim")
    references = references_of(per_image, scale, record.seed, stage)
    if ssims and isinstance(references, list) and len(references) == len(ssims):
        priors = _priors(record.victims, prior_mean)
        own = [max(r, p if p is not None else -math.inf) for r, p in zip(references, priors, strict=True)]
        leaked = sum(victim_leaked(s, r) for s, r in zip(ssims, own, strict=True) if s is not None)
        margin = _mean([victim_margin(s, r) for s, r in zip(ssims, own, strict=True)])
        gain = _mean([s - r for s, r in zip(ssims, own, strict=True) if s is not None and math.isfinite(r)])
        return SeedOutcome(seed, score, psnr, leaked, len(ssims), reference, True, margin, stage, gain)
    images = int(finite(record.metrics.get("images")) or max(len(record.victims), 1))
    leaked = images if victim_leaked(score, reference) else 0
    gain = score - (reference if reference is not None else 0.0)
    return SeedOutcome(seed, score, psnr, leaked, images, reference, False, victim_margin(score, reference),
                       stage, gain)  # fmt: skip


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
