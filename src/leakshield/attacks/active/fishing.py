"""Class fishing (Wen et al., *Fishing for User Data in Large-Batch Federated Learning via Gradient
Magnification*, ICML 2022): a malicious server rewrites the classifier so that only the samples of one
target class send a gradient below it, then inverts that gradient as if the batch held those samples
alone.

The server sets every non-target row of the last linear layer to zero with bias 1000 and the target row
to 0.5 (the values of the authors' implementation in breaching): every input then predicts the target
class with probability ≈ 0, so a non-target sample's loss is the constant log(C − 1) and its gradient
below the classifier is zero, while a target-class sample's is −W_targetᵀ (its loss is ≈ 1000). The
shared gradient of every layer below the classifier is therefore the (scaled) gradient of the target
class's samples only, whatever the batch size — and, under secure aggregation, whatever the number of
clients. An optimization attack (cosine distance, scale-free) recovers them; one sample of the class
in the whole update is recovered as from a batch of one. Several samples of the class blend: the paper
then fishes one feature inside the class (feature fishing: ``feature-fishing``).

Parameters: ``target_class``: the class fished; ``samples``: how many images to recover from the
target class's gradient (1 in the paper); the inversion's own parameters (IG's: cosine, TV 1e-4, signed
Adam lr 0.1, boxed), 2,000 steps by default.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pydantic
import torch
from torch import nn

from leakshield.attacks.base import ATTACKS, Attack, Reconstruction
from leakshield.attacks.passive.inversion.engine import GradientInversion
from leakshield.attacks.passive.inversion.presets import IG_LIKE, preset_params
from leakshield.data.types import DatasetInfo
from leakshield.fl.types import PreparedModel, PublicMean, ServerKnowledge, ServerView, ThreatModel
from leakshield.threats import Adversary, Knowledge, threat

#: the bias of the non-target classes and the target row's weights (breaching's class attack)
NON_TARGET_BIAS = 1000.0
TARGET_WEIGHT = 0.5


_FishingInversion = preset_params("fishing", {"distance": "cosine", "iterations": 2000, **IG_LIKE})


class FishingParams(_FishingInversion):  # type: ignore[misc,valid-type]
    """target_class: the class whose samples are fished. samples: images recovered from its gradient."""

    target_class: int = pydantic.Field(default=0, ge=0, description="the class fished")
    samples: int = pydantic.Field(default=1, ge=1, description="images recovered from the class's gradient")

    def check_data(self, shape: tuple[int, int, int], num_classes: int) -> None:
        super().check_data(shape, num_classes)
        if self.target_class >= num_classes:
            raise ValueError(
                f"target_class: {self.target_class}; the dataset has classes 0 to {num_classes - 1}"
            )


@dataclass(frozen=True)
class FishingSecrets(PublicMean):
    """The fished class and the classifier's parameter names (with the public mean image)."""

    target_class: int
    weight: str
    bias: str


def classifier_layer(model: nn.Module, info: DatasetInfo) -> tuple[str, nn.Linear]:
    """The last linear layer with one output per class (qualified name, module)."""
    found = [
        (n, m)
        for n, m in model.named_modules()
        if isinstance(m, nn.Linear) and m.out_features == info.num_classes
    ]
    if not found or found[-1][1].bias is None:
        raise ValueError("fishing needs a model ending in a linear classifier with a bias")
    return found[-1]


@ATTACKS.register(
    "fishing",
    summary="malicious server: class fishing zeroes every class but one in the classifier, so only the "
    "target class's samples leave a gradient to invert, in any batch or aggregate",
    reference="Wen et al., Fishing for User Data in Large-Batch Federated Learning via Gradient "
    "Magnification, ICML 2022",
    params=FishingParams,
    threat=threat(
        Adversary.PARAMETER_SERVER, (Knowledge.PROTOCOL, Knowledge.PUBLIC_SPLIT), secure_aggregation=True
    ),
)
class FishingAttack(GradientInversion):
    """Needs FedSGD (or a one-step update) and a model ending in a linear classifier with a bias."""

    params: FishingParams

    def prepare_model(self, model: nn.Module, knowledge: ServerKnowledge) -> PreparedModel:
        sent = copy.deepcopy(model)
        name, layer = classifier_layer(sent, knowledge.data_info)
        target = self.params.target_class
        with torch.no_grad():
            layer.weight.zero_()
            layer.weight[target] = TARGET_WEIGHT
            bias = torch.full_like(layer.bias, NON_TARGET_BIAS)
            bias[target] = layer.bias[target]
            layer.bias.copy_(bias)
        mean = knowledge.public.x.double().mean(dim=0).cpu()
        return PreparedModel(sent, FishingSecrets(mean, target, f"{name}.weight", f"{name}.bias"))

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        start = time.perf_counter()
        secrets = view.secrets
        if not isinstance(secrets, FishingSecrets):
            raise ValueError("the fishing attack needs the model it prepared (prepare_model)")
        k = self.params.samples
        # the gradient below the classifier is the target class's alone: invert it as a batch of k
        facts = dataclasses.replace(view.update.protocol, num_samples=k, batch_size=k)
        fished = dataclasses.replace(
            view,
            update=dataclasses.replace(view.update, protocol=facts),
            threat=ThreatModel(labels_known=True),
            labels=torch.full((k,), secrets.target_class, dtype=torch.long),
        )
        weights = {secrets.weight: 0.0, secrets.bias: 0.0, **self.params.layer_weights}
        inversion = GradientInversion(self.params.model_copy(update={"layer_weights": weights}))
        found = inversion.reconstruct(fished, seed=seed)
        rest = max(view.batch_size - k, 0)
        guess = secrets.image.float()[None].expand(rest, -1, -1, -1)
        images = torch.cat([found.images, guess])
        labels = torch.full((len(images),), secrets.target_class, dtype=torch.long)
        stats = {**found.stats, "fished": float(k), "seconds": time.perf_counter() - start}
        return Reconstruction(images=images, labels=labels, stats=stats)

    def vectorizable(self, views: Sequence[ServerView]) -> bool:
        return False  # each victim's view is rewritten to the fished batch first

    def reconstruct_many(
        self, views: Sequence[ServerView], *, seeds: Sequence[int], progress: bool = False
    ) -> list[Reconstruction]:
        return Attack.reconstruct_many(self, views, seeds=seeds, progress=progress)
