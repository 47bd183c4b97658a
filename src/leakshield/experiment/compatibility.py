"""Attack–model compatibility, checked before a run computes anything: an attack that declares what a
model must offer (``check_model(model, shape)``, raising :class:`ValueError` with the reason, e.g. trap
weights and Cocktail Party need a fully connected layer on the image) is tried on every model of the
grid, built for the dataset's image shape, so that a grid it cannot work on is refused in one line
instead of stored as failed cells after the run."""

from __future__ import annotations

import json
from collections.abc import Sequence

import torch

from leakshield.attacks import create_attack
from leakshield.attacks.execution import split_execution
from leakshield.data import load_dataset
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses import create_defense
from leakshield.errors import ConfigError
from leakshield.experiment.config import ExperimentConfig
from leakshield.models import create_model


def check_attacks_fit_models(config: ExperimentConfig, info: DatasetInfo) -> None:
    """Raise :class:`ConfigError` naming the first model of ``config`` that cannot be built on images of
    ``info.shape`` (a ViT patch that does not divide the image), or the first attack and model that
    cannot go together."""
    checks = []
    for i, spec in enumerate(config.attacks):
        attack = create_attack(spec.name, split_execution(spec.params)[0])
        if hasattr(attack, "check_model"):
            checks.append((i, spec, attack))
    for j, model_spec in enumerate(config.models):
        with torch.random.fork_rng(devices=[]):
            try:
                model = create_model(model_spec.name, model_spec.params, in_shape=info.shape,
                                     num_classes=info.num_classes, seed=0)  # fmt: skip
            except (ValueError, RuntimeError) as exc:
                raise ConfigError(
                    f"models[{j}] ({model_spec.display}) cannot be built on {info.shape[1]}×{info.shape[2]} "
                    f"images: {' '.join(str(exc).split())}"
                ) from None
        for i, spec, attack in checks:
            try:
                attack.check_model(model, info.shape)
            except ValueError as exc:
                raise ConfigError(
                    f"attacks[{i}] ({spec.display}) cannot attack models[{j}] ({model_spec.display}): {exc}; "
                    "run it with a model it can attack (a config of its own)"
                ) from None


def check_grids_fit_models(configs: Sequence[ExperimentConfig]) -> None:
    """:func:`check_attacks_fit_models` for several grids before any of them runs (a leaderboard's main
    grid and its scenarios), each on its own dataset's image shape (a dataset loaded once)."""
    infos: dict[str, DatasetInfo] = {}
    for config in configs:
        ds = config.dataset
        key = json.dumps([ds.name, ds.params, str(ds.root)], sort_keys=True, default=str)
        if key not in infos:
            infos[key] = load_dataset(ds.name, ds.params, root=ds.root).info
        check_attacks_fit_models(config, infos[key])


def check_defenses_fit_clients(config: ExperimentConfig, clients: Sequence[ImageSet]) -> None:
    """Raise :class:`ConfigError` naming the first defense that cannot work at the largest sampling
    rate a client's full minibatch has (``Defense.check_sampling``: a privacy budget out of reach would
    otherwise fail every cell after its training)."""
    sizes = [len(c) for c in clients if len(c)]
    if not sizes:
        return
    for i, setting in enumerate(config.defenses):
        rate = min(1.0, max(config.fl_for(setting).local.batch_size, config.victims.batch_size) / min(sizes))
        for entry in setting.entries:
            try:
                create_defense(entry["name"], entry["params"]).check_sampling(rate)
            except ValueError as exc:
                raise ConfigError(f"defenses[{i}] ({setting.display}): {exc}") from None
