"""Training pairs of a learned inverter (Wu et al., *Learning to Invert*, UAI 2023, Sec. 3): the
attacker runs the victim's protocol on public images through the defense as publicly configured, so the
pairs (defended update, image) carry the defense's distortion and the inverter learns to undo it.

An update of tens of thousands of numbers is compressed by a fixed count sketch (Charikar et al., 2002:
each entry added, with a random sign, into one of ``dim`` buckets), which keeps inner products in
expectation and costs one pass; the labels (known, or inferred as every other attack infers them) are
appended as a sorted one-hot block, and the batch's images are ordered by label as the inverter outputs
them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from tqdm.auto import tqdm

from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.base import DefensePipeline, PublicDefense, create_defense
from leakshield.errors import ConfigError
from leakshield.fl.client import compute_update
from leakshield.fl.config import LocalTraining
from leakshield.fl.types import ProtocolFacts
from leakshield.seeds import seeded_generator

__all__ = [
    "TrainingPairs",
    "UpdateSketch",
    "defended_update",
    "label_block",
    "local_training",
    "make_pairs",
    "placebo_batch",
    "public_pipeline",
]


class UpdateSketch:
    """A count sketch of an update's parameters ``names`` (in that order) into ``dim`` numbers; the
    identity when the update has ``dim`` entries or fewer. ``seed`` fixes the buckets and signs."""

    def __init__(self, shapes: Sequence[tuple[str, torch.Size]], dim: int, seed: int) -> None:
        self.names = [name for name, _ in shapes]
        self.size = sum(int(torch.Size(shape).numel()) for _, shape in shapes)
        self.dim = min(dim, self.size)
        generator = torch.Generator().manual_seed(seed)
        self.buckets = torch.randint(0, self.dim, (self.size,), generator=generator)
        self.signs = torch.randint(0, 2, (self.size,), generator=generator).float() * 2 - 1

    def __call__(self, delta: dict[str, torch.Tensor]) -> torch.Tensor:
        flat = torch.cat([delta[name].detach().reshape(-1).float().cpu() for name in self.names])
        if self.dim == self.size:
            return flat
        return torch.zeros(self.dim).index_add_(0, self.buckets, flat * self.signs)


@dataclass(frozen=True)
class TrainingPairs:
    """Sketched defended updates with the label block appended (N×F), and the images they came from,
    ordered by label (N×B×C×H×W)."""

    inputs: torch.Tensor
    images: torch.Tensor


def label_block(labels: torch.Tensor, classes: int) -> torch.Tensor:
    """The batch's labels, sorted, one-hot and flattened (B·classes): what the server knows of them."""
    return nn.functional.one_hot(labels.sort().values.long().cpu(), classes).float().reshape(-1)


def public_pipeline(defenses: Sequence[PublicDefense]) -> DefensePipeline:
    """The clients' defenses rebuilt from their public configuration (Kerckhoffs); a defense that
    needs a fitted artifact (LODA, DCS², ATS…) cannot be rebuilt from it and is refused in one line."""
    built = [create_defense(d.name, d.params.model_dump()) for d in defenses]
    sized = [d.name for d in built if getattr(d.params, "target_epsilon", None) is not None]
    if sized:
        raise ConfigError(
            f"learned attackers: {', '.join(sized)} sizes its noise from the client's dataset "
            "(target_epsilon), which the attacker's public batches do not have; give "
            "noise_multiplier"
        )
    fitted = [d.name for d in built if d.fit_scope is not None and not d.fit_measures_only]
    if fitted:
        raise ConfigError(
            f"learned attackers: {', '.join(fitted)} needs a fitted artifact the attacker does "
            "not hold; the inverter trains through defenses built from public parameters "
            "only"
        )
    return DefensePipeline(built)


def local_training(facts: ProtocolFacts) -> LocalTraining:
    """The client's training as the update's public protocol facts state it."""
    return LocalTraining(
        algorithm=facts.algorithm,
        local_lr=facts.local_lr,
        local_epochs=facts.local_epochs,
        batch_size=facts.batch_size,
        momentum=facts.momentum,
        shuffle=facts.shuffled,
        optimizer=facts.optimizer,
    )


#: the seeds' streams of the pairs and of the placebo updates (:mod:`leakshield.seeds`)
PAIRS_STREAM = 0x1EA2
PLACEBO_STREAM = 0x1EA3


def defended_update(
    model: nn.Module,
    data: ImageSet,
    facts: ProtocolFacts,
    pipeline: DefensePipeline,
    info: DatasetInfo,
    public: ImageSet,
    generator: torch.Generator,
) -> dict[str, torch.Tensor]:
    """The update ``data`` gives on ``model`` as the victim's protocol ``facts`` and the defenses state,
    the client's randomness drawn from ``generator``."""
    device = next(model.parameters()).device
    update, _ = compute_update(
        model,
        data.to(device),
        local_training(facts),
        pipeline,
        info=info,
        generator=generator,
        public=public,
        model_mode=facts.model_mode,
    )
    return update.delta


def make_pairs(
    model: nn.Module,
    public: ImageSet,
    facts: ProtocolFacts,
    pipeline: DefensePipeline,
    info: DatasetInfo,
    sketch: UpdateSketch,
    *,
    count: int,
    seed: int,
    progress: bool = False,
) -> TrainingPairs:
    """``count`` pairs: each a batch of ``facts.num_samples`` public images drawn at random, its update
    computed as the victim computes it (the same model, protocol and defenses; the client's randomness
    drawn afresh per pair from its own stream), sketched."""
    batch = facts.num_samples
    if len(public) < batch:
        raise ConfigError(
            f"learned-inversion: the public split holds {len(public)} images, fewer than the "
            f"victim's batch of {batch}"
        )
    device = next(model.parameters()).device
    draw = seeded_generator(PAIRS_STREAM, seed)
    inputs, images = [], []
    for i in tqdm(range(count), desc="learned-inversion pairs", disable=not progress, leave=False):
        data = public.subset(torch.randperm(len(public), generator=draw)[:batch])
        client_rng = seeded_generator(PAIRS_STREAM, seed, i, device=device)
        delta = defended_update(model, data, facts, pipeline, info, public, client_rng)
        inputs.append(torch.cat([sketch(delta), label_block(data.y, info.num_classes)]))
        images.append(data.x[data.y.argsort(stable=True)].cpu())
    return TrainingPairs(torch.stack(inputs), torch.stack(images))


def placebo_batch(public: ImageSet, labels: torch.Tensor, generator: torch.Generator) -> ImageSet:
    """Public images with the victim's ``labels``, one drawn per label (any public image for a label the
    split lacks): someone else's batch, which the attack's output on the victim must beat."""
    rows = []
    for y in labels.tolist():
        same = (public.y.cpu() == y).nonzero().flatten()
        pool = same if len(same) else torch.arange(len(public))
        rows.append(int(pool[torch.randint(len(pool), (1,), generator=generator)]))
    return public.subset(rows)
