"""A quick probe, outside a grid: one attack on a few victims under one defense stack, scored. Tests and
benchmarks use it to check what a paper says a defense or an attack does, on small real cases, through
the same :func:`~leakshield.fl.observation.observe_victim` as the runner."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from leakshield.artifacts import ArtifactCache
from leakshield.attacks import Reconstruction, create_attack
from leakshield.data.types import DatasetSplits, ImageSet
from leakshield.defenses import DefensePipeline
from leakshield.experiment.code_cache import CodeKeyedCache
from leakshield.experiment.config import Component
from leakshield.experiment.evaluation import score_reconstructions
from leakshield.experiment.federation import build_model
from leakshield.experiment.fitting import FitSetting, fit_attack, fit_defenses
from leakshield.experiment.sections import MetricSection
from leakshield.fl import FLConfig, HonestClient, LocalTraining, ServerKnowledge, ThreatModel, observe_victim


@dataclass(frozen=True)
class ProbeResult:
    """Per-victim mean SSIM of the matched reconstructions against the private images, and against the
    defended inputs x' (empty when the defense keeps no per-image input)."""

    private: list[float]
    defended: list[float]
    #: per-victim SSIM of the attack's own no-information reference (its ``prior``: GGL's draw, the
    #: learned attackers' best placebo), for the victims that have one (empty: the attack has none)
    prior: list[float] = dataclasses.field(default_factory=list)

    @property
    def ssim(self) -> float:
        return statistics.fmean(self.private)

    @property
    def ssim_defended(self) -> float | None:
        return statistics.fmean(self.defended) if self.defended else None


def probe_attack(
    data: DatasetSplits,
    defenses: Sequence[tuple[str, Mapping[str, Any]]],
    attack: str,
    attack_params: Mapping[str, Any] | None = None,
    *,
    model: str = "lenet",
    model_params: Mapping[str, Any] | None = None,
    victims: Sequence[int] = (0, 7),
    pool: int = 60,
    seed: int = 0,
    labels_known: bool = True,
    cache: ArtifactCache | None = None,
    state: Mapping[str, torch.Tensor] | None = None,
) -> ProbeResult:
    """Each training image in ``victims`` is a FedSGD batch of one of client 0, which holds the first
    ``pool`` training images; the untrained ``model`` (initialized with seed 0, eval mode) runs the
    ``defenses`` stack; ``attack`` reconstructs every victim. ``seed`` draws the defenses' randomness
    and the attack's starts (victim k uses 1000·seed + k). Defenses and attacks that declare a fit are
    fitted as in a run (client fits on client 0's data, public fits on the public split; fit seed 0)
    through ``cache`` (default: the user's artifact cache). ``state``: parameters to load into the model
    first (a trained model, e.g. to attack a late round)."""
    info, cache = data.info, cache or CodeKeyedCache()
    pipeline = DefensePipeline.from_config([{"name": n, "params": dict(p)} for n, p in defenses])
    spec = Component(name=model, **dict(model_params or {}))
    net = build_model(spec, pipeline, info, 0, "cpu").eval()
    if state is not None:  # a trained model instead of the untrained one
        net.load_state_dict(state)
    held = data.train.subset(list(range(pool)))
    setting = FitSetting(
        info,
        data.public,
        [held],
        FLConfig(clients=1),
        net,
        {"name": spec.name, **spec.params},
        0,
        torch.device("cpu"),
    )
    pipeline, _ = fit_defenses(pipeline, setting, cache)
    client = HonestClient(0, held, LocalTraining(), pipeline, info, public=data.public, model_mode="eval")
    adversary, _ = fit_attack(create_attack(attack, dict(attack_params or {})), setting, cache)
    knowledge = ServerKnowledge(info, data.public)
    batches = [data.train.subset([i]) for i in victims]
    seeds = [1000 * seed + k for k in range(len(batches))]
    observations = [
        observe_victim(
            [net],
            batch,
            client,
            threat=ThreatModel(labels_known),
            server=adversary,
            knowledge=knowledge,
            generators=[torch.Generator().manual_seed(s)],
        )
        for batch, s in zip(batches, seeds, strict=True)
    ]
    recs = adversary.reconstruct_many([o.views[0] for o in observations], seeds=seeds)
    private = score_reconstructions(recs, batches, metrics=MetricSection()).victims
    # against the defended inputs x' (clamped to pixels: InstaHide's signs leave the range)
    defended_x = [o.trace.defended_x for o in observations]
    as_truth = [
        ImageSet(d.clamp(0, 1), b.y) for d, b in zip(defended_x, batches, strict=True) if d is not None
    ]
    kept = [r for r, d in zip(recs, defended_x, strict=True) if d is not None]
    defended = score_reconstructions(kept, as_truth, metrics=MetricSection()).victims if kept else []
    drawn = [i for i, r in enumerate(recs) if r.prior is not None]
    priors = [Reconstruction(images=recs[i].prior) for i in drawn]  # type: ignore[arg-type]
    chosen = [batches[i] for i in drawn]
    prior = score_reconstructions(priors, chosen, metrics=MetricSection()).victims if drawn else []
    return ProbeResult([statistics.fmean(v["ssim"]) for v in private],
                       [statistics.fmean(v["ssim"]) for v in defended],
                       [statistics.fmean(v["ssim"]) for v in prior])  # fmt: skip
