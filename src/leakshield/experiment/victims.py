"""The victims of a run: ``victims.count`` batches of ``victims.batch_size`` images drawn with
``victims.seed`` from one client's training data, the same for every model, defense and attack. By
default they are the same in every seed; with ``victims.per_seed`` each cell seed draws its own
(:func:`leakshield.seeds.victim_draw_seed`), so that seeds repeat over new images rather than the same
few. ``victims.offset`` skips that many batches of the draw's order (the leaderboard's stage 2 takes the
batches after stage 1's, disjoint from them within a seed). With ``victims.sensitive: k`` each batch
holds k of the client's sensitive samples (by ``metrics.sensitive``), put last and flagged."""

from __future__ import annotations

import torch

from leakshield.data.types import ImageSet
from leakshield.errors import LeakshieldError
from leakshield.experiment.config import ExperimentConfig
from leakshield.metrics.sensitivity import SensitiveSamples
from leakshield.seeds import victim_draw_seed

__all__ = ["draw_victims", "victim_draw_seed"]


def draw_victims(
    config: ExperimentConfig, clients: list[ImageSet], batch_size: int | None = None, seed: int | None = None
) -> list[ImageSet]:
    """The victim batches of ``config`` from the victim client's dataset in ``clients``; ``batch_size``
    overrides ``victims.batch_size`` (a point of the scale axes); ``seed``: the cell seed, which decides
    the draw when ``victims.per_seed``."""
    v = config.victims
    if batch_size is not None:
        v = v.model_copy(update={"batch_size": batch_size})
    if v.client >= len(clients):
        raise LeakshieldError(f"victims.client: {v.client} but there are {len(clients)} clients")
    pool = clients[v.client]
    first, count = v.offset, v.offset + v.count  # batches [first, count) of the draw's order
    need = count * v.batch_size
    if need > len(pool):
        raise LeakshieldError(
            f"victims: {v.offset} skipped + {v.count} batches × {v.batch_size} images = {need} exceed the "
            f"{len(pool)} training images of client {v.client}"
        )
    gen = torch.Generator().manual_seed(victim_draw_seed(v.seed, seed or 0) if v.per_seed else v.seed)
    if v.sensitive is None:
        order = torch.randperm(len(pool), generator=gen)[:need]
        return [pool.subset(order[i * v.batch_size : (i + 1) * v.batch_size]) for i in range(first, count)]
    assert config.metrics.sensitive is not None
    mask = SensitiveSamples(config.metrics.sensitive).of_dataset(pool)
    sensitive, other = mask.nonzero().flatten(), (~mask).nonzero().flatten()
    k = v.sensitive
    if count * k > len(sensitive) or count * (v.batch_size - k) > len(other):
        raise LeakshieldError(
            f"victims: {v.offset} skipped + {v.count} batches with {k} sensitive images each need "
            f"{count * k} sensitive and {count * (v.batch_size - k)} other images; client {v.client} has "
            f"{len(sensitive)} and {len(other)}"
        )
    sensitive = sensitive[torch.randperm(len(sensitive), generator=gen)]
    other = other[torch.randperm(len(other), generator=gen)]
    batches = []
    for i in range(first, count):
        rest = other[i * (v.batch_size - k) : (i + 1) * (v.batch_size - k)]
        idx = torch.cat([rest, sensitive[i * k : (i + 1) * k]])  # sensitive last
        flags = torch.arange(v.batch_size) >= v.batch_size - k
        batch = pool.subset(idx)
        batches.append(ImageSet(batch.x, batch.y, flags))
    return batches
