"""SEER (Garov et al., *Hiding in Plain Sight: Disguising Data Stealing Attacks in Federated Learning*,
ICLR 2024): a malicious server that sends a model of the honest architecture whose *parameters* it
trained, jointly with a secret decoder, so that the gradient of any batch — or the securely aggregated
sum of many clients' batches — decodes to the one sample with a chosen property (the brightest, or the
darkest). Nothing in the architecture changes and no layer is rewritten by hand, which is what makes it
hard to spot (the paper's D-SNR argument).

leakshield's version is CPU-sized (:mod:`leakshield.attacks.active.seer_training`): the model and decoder
train on the public split for ``steps`` steps (cached as an artifact per model, parameters and seed), the
threshold of the property is set so that one sample of an aggregate of ``aggregate_size`` is above it on
average (the authors' ``thresh`` mode, their setting under secure aggregation). The server reads the
update, multiplies it by the number of samples it sums (the protocol's count) to get the summed
gradient, and decodes one image; the rest of the batch is the public mean image. When no sample or
several samples of the aggregate have the property, the decoded image is a blend (the paper reports the
same failure mode); the evaluator's matching scores it against every sample of the aggregate.

Parameters: ``prop`` (``bright`` | ``dark``); ``aggregate_size``: the samples per aggregate the model is
trained for (all clients' batches together: 16 = one client's batch of 16, or 4 clients of 4);
``entries``: how many gradient entries the secret decoder reads (the authors' parameter selection);
``latent``, ``hidden``: the decoder's widths; ``steps``, ``lr``: its training (Adam); ``shift``: the
training images' random translation (an augmentation); ``seed``: the secret entries and the decoder's
initialization.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Literal

import pydantic
import torch
from torch import nn

from leakshield.artifacts import Artifact, FitData
from leakshield.attacks.active.seer_training import (
    Disaggregator,
    SeerSchedule,
    property_threshold,
    summed_gradient,
    train_seer,
)
from leakshield.attacks.base import ATTACKS, Attack, Reconstruction
from leakshield.attacks.passive.labels import granted_or_inferred_labels
from leakshield.errors import ConfigError
from leakshield.fl.types import PreparedModel, PublicMean, ServerKnowledge, ServerView
from leakshield.registry import Params
from leakshield.threats import Adversary, Knowledge, threat


class SeerParams(Params):
    """prop: the property that singles out the recovered sample (bright: highest mean pixel; dark:
    lowest). aggregate_size: samples per aggregate (every client's batch together) the model is
    trained for; one of them is above the property's threshold on average. entries: gradient entries
    the secret decoder reads. latent: width of the linear disaggregator's output. hidden: width of the
    reconstructor's hidden layer. steps: training steps of the model and decoder on the public split.
    lr: Adam's step size for that training. shift: largest random translation (pixels; at most half the
    image side, checked at the fit) of the public images in training, an augmentation against
    memorizing a small public split (0: none). seed: the
    secret entries, the decoder's initialization and the training batches."""

    prop: Literal["bright", "dark"] = "bright"
    aggregate_size: int = pydantic.Field(default=16, ge=1)
    entries: int = pydantic.Field(default=2048, ge=1)
    latent: int = pydantic.Field(default=256, ge=1)
    hidden: int = pydantic.Field(default=512, ge=1)
    steps: int = pydantic.Field(default=10000, ge=1)
    lr: float = pydantic.Field(default=3e-4, gt=0)
    shift: int = pydantic.Field(default=1, ge=0)
    seed: int = 0


@dataclass(frozen=True)
class SeerSecrets(PublicMean):
    """The secret decoder (with the public mean image that pads the batch)."""

    decoder: Disaggregator


def _decoder(params: SeerParams, model: nn.Module, shape: tuple[int, ...]) -> Disaggregator:
    total = sum(p.numel() for p in model.parameters() if p.requires_grad)
    generator = torch.Generator().manual_seed(params.seed)
    entries = torch.randperm(total, generator=generator)[: min(params.entries, total)].sort().values
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(params.seed)
        return Disaggregator(entries, params.latent, params.hidden, shape)


@ATTACKS.register(
    "seer",
    summary="malicious server: trains the model's parameters with a secret decoder so that any batch's or "
    "aggregate's gradient decodes to its brightest sample; the architecture stays honest",
    reference="Garov et al., Hiding in Plain Sight: Disguising Data Stealing Attacks in Federated "
    "Learning, ICLR 2024",
    params=SeerParams,
    threat=threat(
        Adversary.PARAMETER_SERVER, (Knowledge.PROTOCOL, Knowledge.PUBLIC_SPLIT), secure_aggregation=True
    ),
)
class SeerAttack(Attack):
    """Needs FedSGD (or a one-step update) and its fit on the public split (run through a grid, or
    :meth:`fit` then :meth:`with_artifact`)."""

    params: SeerParams
    fit_scope = "public"
    fit_budget = "steps"
    fit_trains_model = True

    def fit(self, data: FitData) -> Artifact:
        if data.model is None:
            raise ConfigError("seer: its fit trains the model it will send; none was given")
        p = self.params
        side = min(data.info.shape[1:])
        if p.shift > side // 2:
            most = side // 2
            raise ConfigError(f"seer: shift {p.shift} px is more than half the {side}-px image side; use "
                              f"at most {most}")  # fmt: skip
        model = copy.deepcopy(data.model).to(data.device)
        decoder = _decoder(p, model, data.info.shape).to(data.device)
        threshold = property_threshold(data.data, p.prop, p.aggregate_size)
        schedule = SeerSchedule(p.steps, p.lr, p.aggregate_size, p.prop, p.shift)
        losses = train_seer(model, decoder, data.data, data.info, schedule, threshold, p.seed, data.progress)
        tensors = {f"model.{k}": v.detach().cpu() for k, v in model.state_dict().items()}
        tensors |= {f"decoder.{k}": v.detach().cpu() for k, v in decoder.state_dict().items()}
        tensors["public_mean"] = data.data.x.double().mean(dim=0).cpu()
        return Artifact(tensors, {"threshold": threshold, "losses": losses})

    def _trained(self, prefix: str) -> dict[str, torch.Tensor]:
        if self.artifact is None:
            raise ConfigError("seer: the attack has not been fitted (run it through a grid, or call fit() "
                              "and with_artifact())")  # fmt: skip
        return {k[len(prefix) :]: v for k, v in self.artifact.tensors.items() if k.startswith(prefix)}

    def prepare_model(self, model: nn.Module, knowledge: ServerKnowledge) -> PreparedModel:
        sent = copy.deepcopy(model)
        try:
            sent.load_state_dict(self._trained("model."))
        except RuntimeError:
            raise ConfigError("seer: the model sent must have the architecture it was fitted on") from None
        device = next(sent.parameters()).device
        decoder = _decoder(self.params, sent, knowledge.data_info.shape)
        decoder.load_state_dict(self._trained("decoder."))
        mean = self._trained("public_")["mean"]
        return PreparedModel(sent.to(device), SeerSecrets(mean, decoder.to(device).eval()))

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        start = time.perf_counter()
        secrets = view.secrets
        if not isinstance(secrets, SeerSecrets):
            raise ValueError("the SEER attack needs the model it prepared (prepare_model)")
        gradient = view.update.gradient()
        names = [n for n, p in view.model.named_parameters() if p.requires_grad]
        summed = torch.cat([gradient[n].flatten() for n in names]) * view.batch_size  # mean → sum
        with torch.no_grad():
            found = secrets.decoder(summed.to(secrets.decoder.entries.device)).cpu()
        rest = max(view.batch_size - 1, 0)
        images = torch.cat([found.float(), secrets.image.float()[None].expand(rest, -1, -1, -1)])
        labels = granted_or_inferred_labels(view)
        stats = {"seconds": time.perf_counter() - start}
        return Reconstruction(images=images, labels=labels.cpu(), stats=stats)


__all__ = ["SeerAttack", "SeerParams", "summed_gradient"]
