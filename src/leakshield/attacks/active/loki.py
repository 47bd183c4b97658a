"""LOKI (Zhao et al., *LOKI: Large-scale Data Reconstruction Attack against Federated Learning through
Model Manipulation*, IEEE S&P 2024): a malicious server that defeats secure aggregation by sending every
client its own model.

LOKI prepends a block of customized kernels whose rows are split among the round's clients: client c
receives a model in which only its own rows can fire (its imprint bins,
:mod:`leakshield.attacks.active.imprint`),
every other client's rows carrying a bias no input reaches (zero ReLU gradient). The aggregate's
gradient of block c is therefore client c's alone (scaled by its share of the samples, which the ratio
∇W/∇b cancels), and the imprint differences of each block recover that client's samples one by one —
the sum secure aggregation reveals no longer mixes clients. This is the fully connected variant of the
paper's design (its convolutional scaling stage only shrinks the layer for large images; the
separation of clients, the paper's contribution, is the same).

Parameters: ``bins``: imprint bins per client (the paper scales them with the batch; ≥ 4× the batch
recovers most samples); ``fit``: where the thresholds go (see :class:`ImprintParams`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from torch import nn

from leakshield.attacks.active.imprint import (
    ImprintAttack,
    ImprintBlock,
    ImprintedModel,
    ImprintParams,
    pixel_images,
    recover_from_bins,
)
from leakshield.attacks.base import ATTACKS, Reconstruction
from leakshield.attacks.passive.labels import granted_or_inferred_labels
from leakshield.fl.types import PreparedModel, ServerKnowledge, ServerSecrets, ServerView
from leakshield.threats import Adversary, Knowledge, threat

#: the bias of another client's rows: far below any normalized pixel mean, so they never fire
SILENT_BIAS = -1.0e4


@dataclass(frozen=True)
class LokiSecrets(ServerSecrets):
    """The slot the model was sent to, how many slots the round has, and the bins per slot."""

    slot: int
    slots: int
    bins: int


@ATTACKS.register(
    "loki",
    summary="malicious server: a customized imprint block per client keeps every client's samples apart "
    "in the securely aggregated sum",
    reference="Zhao et al., LOKI: Large-scale Data Reconstruction Attack against Federated Learning through "
    "Model Manipulation, IEEE S&P 2024",
    params=ImprintParams,
    threat=threat(
        Adversary.ARCHITECTURE_SERVER, (Knowledge.PROTOCOL, Knowledge.PUBLIC_SPLIT), secure_aggregation=True
    ),
)
class LokiAttack(ImprintAttack):
    """Needs FedSGD (or a one-step update), and a federation in which the server may send each client a
    different model (no client compares its model with the others')."""

    params: ImprintParams

    def prepare_model(self, model: nn.Module, knowledge: ServerKnowledge) -> PreparedModel:
        info, k = knowledge.data_info, self.params.bins
        queries = info.normalize(knowledge.public.x).flatten(1).mean(dim=1).double()
        own = self._thresholds(queries).float()
        thresholds = torch.full((knowledge.slots * k,), -SILENT_BIAS)  # −bias: the rows never fire
        thresholds[knowledge.slot * k : (knowledge.slot + 1) * k] = own
        block = ImprintBlock(math.prod(info.shape), thresholds)
        device = next(model.parameters()).device
        secrets = LokiSecrets(knowledge.slot, knowledge.slots, k)
        return PreparedModel(ImprintedModel(block, model).to(device), secrets)

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        start = time.perf_counter()
        if not isinstance(view.model, ImprintedModel) or not isinstance(view.secrets, LokiSecrets):
            raise ValueError("the LOKI attack needs the model it prepared (prepare_model)")
        info, k = view.data_info, view.secrets.bins
        gradient = view.update.gradient()
        grad_w, grad_b = gradient["imprint.query.weight"], gradient["imprint.query.bias"]
        found, hits = [], 0
        for slot in range(view.secrets.slots):  # each client's block holds that client's samples only
            rows = slice(slot * k, (slot + 1) * k)
            images, hit = recover_from_bins(grad_w[rows], grad_b[rows], view.batch_size)
            found.append(images)
            hits += hit
        images = pixel_images(torch.cat(found)[: max(view.batch_size, 1)], info, view.batch_size)
        labels = granted_or_inferred_labels(view)
        stats = {"bins_hit": float(hits), "bins": float(k * view.secrets.slots),
                 "seconds": time.perf_counter() - start}  # fmt: skip
        return Reconstruction(images=images, labels=labels.cpu(), stats=stats)
