"""Fitted artifacts of a cell: every defense and attack that declares a ``fit_scope`` is fitted once per
what determines it, through the on-disk :class:`~leakshield.artifacts.ArtifactCache`, and handed its
artifact explicitly. A public fit sees the public split only; a client fit sees that one client's data
only. ``leakshield fit`` runs these ahead of time; a run then reuses them."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from leakshield.artifacts import Artifact, ArtifactCache, FitData, FitKey, data_fingerprint
from leakshield.attacks.base import Attack
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.base import DefensePipeline
from leakshield.fl.config import FLConfig


@dataclass(frozen=True)
class ArtifactUse:
    """One artifact a run used: what it is for and its content address (recorded in the run dir)."""

    component: str
    scope: str
    client: int | None
    seed: int
    model: str
    key: str

    def as_json(self) -> dict[str, Any]:
        return {
            "component": self.component,
            "scope": self.scope,
            "client": self.client,
            "seed": self.seed,
            "model": self.model,
            "key": self.key,
        }


@dataclass(frozen=True)
class FitSetting:
    """The facts every fit of one cell shares: dataset facts and public split, the client datasets and
    federation (which clients run the defenses), the model built for the cell and its identity, seed,
    device, progress."""

    info: DatasetInfo
    public: ImageSet
    clients: Sequence[ImageSet]
    fl: FLConfig
    model: nn.Module
    model_id: dict[str, Any]
    seed: int
    device: torch.device
    progress: bool = False


def model_layout(model: nn.Module) -> list[list[Any]]:
    """The model's state entries as [name, shape] pairs: what an artifact of its parameters must fit."""
    return [[name, list(value.shape)] for name, value in model.state_dict().items()]


def _params_json(params: Any) -> dict[str, Any]:
    return params.model_dump(mode="json")


def fit_defenses(
    pipeline: DefensePipeline, setting: FitSetting, cache: ArtifactCache
) -> tuple[DefensePipeline, list[ArtifactUse]]:
    """``pipeline`` with every defense's artifacts: public fits on the public split, client fits on each
    defended client's own dataset."""
    public: dict[int, Artifact] = {}
    clients: dict[tuple[int, int], Artifact] = {}
    used: list[ArtifactUse] = []
    model_name = str(setting.model_id.get("name", ""))
    for index, defense in enumerate(pipeline.defenses):
        if defense.fit_scope is None:
            continue
        if defense.fit_scope == "public":
            targets: list[tuple[int | None, ImageSet]] = [(None, setting.public)]
        else:
            targets = [
                (c, data) for c, data in enumerate(setting.clients) if setting.fl.is_defended(c) and len(data)
            ]
            if defense.fit_measures_only:  # a measurement (DCS²'s budget): the first defended client's
                targets = targets[:1]
        for client, data in targets:
            key = FitKey(
                component=f"defense:{defense.name}",
                params=_params_json(defense.params),
                scope=defense.fit_scope,
                data=data_fingerprint(data),
                seed=setting.seed,
                client=client,
                context={"model": setting.model_id},
            )
            fit_data = FitData(
                setting.info,
                data,
                copy.deepcopy(setting.model),
                setting.seed,
                setting.device,
                setting.progress,
                cache,
                setting.public,
            )
            artifact = cache.get_or_fit(key, lambda d=defense, f=fit_data: d.fit(f))
            if client is None:
                public[index] = artifact
            else:
                clients[(client, index)] = artifact
            used.append(
                ArtifactUse(defense.name, defense.fit_scope, client, setting.seed, model_name, artifact.key)
            )
    if not used:
        return pipeline, used
    return pipeline.with_artifacts(public, clients), used


def attack_fit_key(attack: Attack, setting: FitSetting) -> FitKey:
    """The cache key of ``attack``'s public-split fit for ``setting`` (its model, layout and seed)."""
    context: dict[str, Any] = {"model": setting.model_id}
    if attack.fit_trains_model:
        context["layout"] = model_layout(setting.model)
    return FitKey(
        component=f"attack:{attack.name}",
        params=_params_json(attack.params),
        scope="public",
        data=data_fingerprint(setting.public),
        seed=setting.seed,
        context=context,
    )


def fit_attack(attack: Attack, setting: FitSetting, cache: ArtifactCache) -> tuple[Attack, list[ArtifactUse]]:
    """``attack`` with its public-split artifact, if it declares a fit."""
    if attack.fit_scope is None:
        return attack, []
    key = attack_fit_key(attack, setting)
    data = FitData(
        setting.info,
        setting.public,
        copy.deepcopy(setting.model),
        setting.seed,
        setting.device,
        setting.progress,
        cache,
    )
    artifact = cache.get_or_fit(key, lambda: attack.fit(data))
    use = ArtifactUse(
        attack.name, "public", None, setting.seed, str(setting.model_id.get("name", "")), artifact.key
    )
    return attack.with_artifact(artifact), [use]
