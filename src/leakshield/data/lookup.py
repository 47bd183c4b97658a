"""Finding a client's own images again: data-stage defenses that precompute a per-image replacement
(LODA's obscured images, Anti-GAN's mixed images) take each minibatch image's row in the client's
dataset from the client's minibatch indices, and look an image up by its pixels only when the batch
came from outside the dataset."""

from __future__ import annotations

from collections.abc import Callable

import torch


def find_rows(dataset: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    """The row of ``dataset`` equal to each of ``images`` (−1 where none is): candidates by a random
    projection, confirmed by exact comparison."""
    if not len(dataset):
        return torch.full((len(images),), -1, dtype=torch.long)
    probe = torch.randn(dataset[0].numel(), generator=torch.Generator().manual_seed(0)).to(dataset)
    keys, wanted = dataset.flatten(1) @ probe, images.flatten(1) @ probe
    rows = []
    for image, key in zip(images, wanted, strict=True):
        candidates = (keys - key).abs().le(1e-4 * (1 + key.abs())).nonzero().flatten()
        row = next((int(i) for i in candidates if torch.equal(dataset[i], image)), -1)
        rows.append(row)
    return torch.tensor(rows, dtype=torch.long, device=images.device)


def swap_in(
    dataset: torch.Tensor,
    replacements: torch.Tensor,
    images: torch.Tensor,
    fresh: Callable[[torch.Tensor], torch.Tensor],
    indices: torch.Tensor | None = None,
) -> torch.Tensor:
    """Each of ``images`` replaced by the row of ``replacements`` of its row in ``dataset``: the rows
    ``indices`` when the caller knows them (the client's minibatch indices), else found by the pixels;
    the images found nowhere get ``fresh(positions)`` (their positions in ``images``)."""
    if indices is not None:
        return replacements.to(images.device)[indices.to(replacements.device)].to(images.device)
    rows = find_rows(dataset.to(images.device), images)
    out = replacements.to(images.device)[rows.clamp_min(0)]
    missing = (rows < 0).nonzero().flatten()
    if len(missing):
        out[missing] = fresh(missing)
    return out
