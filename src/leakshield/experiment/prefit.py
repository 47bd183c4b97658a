"""``leakshield fit CONFIG``: compute every fitted artifact a config's grid needs, ahead of the run and
with progress bars, so that ``leakshield run`` (here or on other machines sharing the cache folder)
does no fitting work."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from leakshield.artifacts import ArtifactCache
from leakshield.attacks.base import ATTACKS
from leakshield.defenses.base import create_defense
from leakshield.experiment.config import ExperimentConfig
from leakshield.experiment.federation import load_world
from leakshield.experiment.fitting import FitSetting, fit_attack
from leakshield.experiment.training import TrainedModels


@dataclass(frozen=True)
class FitSummary:
    artifacts: int
    fitted: int
    reused: int
    cache: Path
    #: intermediate results fitted on the way (chunks, checkpoints, per-policy scores)
    intermediate: int = 0


def needs_fitting(config: ExperimentConfig) -> bool:
    """Whether any defense or attack of ``config`` declares a fit (a defense may decide by its
    parameters, e.g. ATS fits only when it searches its policies)."""
    defenses = [e for d in config.defenses for e in d.entries]
    return any(create_defense(e["name"], e.get("params")).fit_scope is not None for e in defenses) or any(
        _fits(ATTACKS.get(a.name).factory) for a in config.attacks
    )


def _fits(factory: object) -> bool:
    return getattr(factory, "fit_scope", None) is not None


def fit_config(
    config: ExperimentConfig, device: torch.device, cache: ArtifactCache, *, progress: bool = True
) -> FitSummary:
    """Fit (or find in ``cache``) every artifact of ``config``: per seed, model and defense setting the
    defenses' public and client fits, per seed and model the attacks' public fits."""
    before = len(cache.fitted)
    data, clients = load_world(config)
    clients = [c.to(device) for c in clients]
    models = TrainedModels(config, data, clients, data.public.to(device), device, cache, progress)
    jobs = [(s, m, d) for s in config.seeds for m in config.models for d in config.defenses]
    for seed, model, defense in tqdm(jobs, desc="fitting defenses", disable=not progress, unit="setting"):
        models.fresh(model, defense, seed)
    fitted_attacks = [a for a in config.attacks if _fits(ATTACKS.get(a.name).factory)]
    attack_jobs = [(s, m, a) for s in config.seeds for m in config.models for a in fitted_attacks]
    for seed, model, entry in tqdm(attack_jobs, desc="fitting attacks", disable=not progress, unit="setting"):
        net, _ = models.fresh(model, config.defenses[0], seed)
        setting = FitSetting(
            data.info,
            data.public,
            clients,
            config.fl,
            net,
            {"name": model.name, **model.params},
            seed,
            device,
            progress,
        )
        _, used = fit_attack(config.create_attack(entry), setting, cache)
        models.used.extend(u for u in used if u not in models.used)
    new = set(cache.fitted[before:])
    fitted = sum(1 for use in models.used if use.key in new)
    intermediate = len(new) - fitted
    return FitSummary(len(models.used), fitted, len(models.used) - fitted, cache.root, intermediate)
