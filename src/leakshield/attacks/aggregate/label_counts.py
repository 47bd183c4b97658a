"""Label counts of a batch or of a secure aggregate: iLRG (Ma et al., *Instance-wise Batch Label
Restoration via Gradients in Federated Learning*, ICLR 2023).

For the classifier's last layer z = W h + b under softmax cross-entropy, a FedSGD update holds
∇W_j = (1/B) Σ_i (p_ij − y_ij) h_iᵀ and ∇b_j = (1/B) Σ_i (p_ij − y_ij). iLRG (i) reads off each class's
average embedding ē_j = ∇W_j / ∇b_j, (ii) predicts at it, P_j = softmax(W ē_j + b) (the model's output
for the samples of class j), and (iii) solves the linear system the bias gradient gives for the counts
k: B ∇b_i = Σ_j k_j P_j[i] − k_i with Σ_j k_j = B, by least squares; the counts are rounded to integers
summing to B. Exact for untrained models (the paper's Theorem); an aggregate is one large batch.
``probabilities: public`` replaces step (ii) by the model's mean prediction over the public split.

The attack reveals labels, not images: its images are the no-information guess (the public mean image),
and the cell's ``label_acc`` is the count accuracy (the share of the victim's labels among the counts).
No parameters.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from leakshield.attacks.base import ATTACKS, Attack, Reconstruction
from leakshield.attacks.passive.labels import classifier_weight_name
from leakshield.fl.types import PreparedModel, PublicMean, ServerKnowledge, ServerView
from leakshield.registry import Params
from leakshield.threats import Adversary, Knowledge, threat


def class_probabilities(weight: torch.Tensor, bias: torch.Tensor, grad_w: torch.Tensor,
                        grad_b: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """iLRG's P_j (row j: the prediction for the samples of class j) at each class's average embedding
    ē_j = ∇W_j / ∇b_j, clamped at 0 (ReLU features, as the reference code does)."""
    weight, bias, grad_w, grad_b = (t.double() for t in (weight, bias, grad_w, grad_b))
    safe = torch.where(grad_b.abs() > 1e-30, grad_b, torch.full_like(grad_b, 1e-30))
    embeddings = (grad_w / safe[:, None]).clamp_min(0)
    return torch.softmax(embeddings @ weight.T + bias, dim=1)


def restore_counts(probs: torch.Tensor, grad_b: torch.Tensor, total: int) -> torch.Tensor:
    """iLRG's class counts (integers summing to ``total``): the least-squares solution of
    B ∇b_i = Σ_j k_j P_j[i] − k_i, Σ_j k_j = B, given ``probs`` (row j: P_j)."""
    probs, grad_b = probs.double(), grad_b.double()
    classes = len(grad_b)
    coefs = torch.cat(
        [torch.ones(1, classes, dtype=torch.float64), probs.T - torch.eye(classes, dtype=torch.float64)]
    )
    values = torch.cat([torch.tensor([float(total)], dtype=torch.float64), total * grad_b])
    counts = torch.linalg.pinv(coefs) @ values
    return round_counts(counts, total)


def round_counts(counts: torch.Tensor, total: int) -> torch.Tensor:
    """Non-negative integers closest to ``counts`` that sum to ``total`` (largest remainders)."""
    counts = counts.clamp_min(0)
    whole = counts.floor()
    missing = total - int(whole.sum())
    if missing > 0:
        whole[torch.argsort(counts - whole, descending=True)[:missing]] += 1
    while missing < 0:  # the clamp added mass: take it back from the largest remainders' opposite
        largest = int(torch.argmax(torch.where(whole > 0, whole - counts, -torch.inf)))
        whole[largest] -= 1
        missing += 1
    return whole.long()


@dataclass(frozen=True)
class PublicPrediction(PublicMean):
    """The public mean image and the model's mean softmax output over the public split."""

    predictions: torch.Tensor


class LabelCountParams(Params):
    """probabilities: where each class's predicted probabilities come from: ``embeddings`` (iLRG: the
    prediction at the class's average embedding read off the gradient) or ``public`` (the model's mean
    prediction over the public split for every class, the estimate of Geng et al., *Towards General Deep
    Leakage in Federated Learning*, 2021, which assumes an untrained model predicts alike for all
    inputs)."""

    probabilities: Literal["embeddings", "public"] = "embeddings"


@ATTACKS.register(
    "ilrg",
    summary="honest-but-curious server: the number of samples of each class in a batch or a secure "
    "aggregate, from the last layer's gradient (labels, not images)",
    reference="Ma et al., Instance-wise Batch Label Restoration via Gradients in Federated Learning, "
    "ICLR 2023",
    params=LabelCountParams,
    threat=threat(
        Adversary.OBSERVING_SERVER, (Knowledge.PROTOCOL, Knowledge.PUBLIC_SPLIT), secure_aggregation=True
    ),
)
class LabelCountAttack(Attack):
    """Needs FedSGD (or a one-step update) and a model ending in a linear classifier with a bias."""

    params: LabelCountParams

    def prepare_model(self, model: nn.Module, knowledge: ServerKnowledge) -> PreparedModel:
        """Sends the model unchanged; keeps the public mean image (the images it reports) and the
        model's mean prediction over the public split."""
        public = knowledge.public.x.to(next(model.parameters()).device)
        with torch.no_grad():
            logits = model(knowledge.data_info.normalize(public))
        predictions = torch.softmax(logits.double(), dim=1).mean(dim=0).cpu()
        return PreparedModel(model, PublicPrediction(public.double().mean(dim=0).cpu(), predictions))

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        start = time.perf_counter()
        if not isinstance(view.secrets, PublicPrediction):
            raise ValueError("ilrg needs the public mean image it kept (prepare_model)")
        name = classifier_weight_name(view)
        bias_name = name.removesuffix("weight") + "bias"
        params = dict(view.model.named_parameters())
        if bias_name not in params:
            raise ValueError("ilrg needs a classifier with a bias")
        gradient = view.update.gradient()
        weight, bias = params[name].detach(), params[bias_name].detach()
        if self.params.probabilities == "embeddings":
            probs = class_probabilities(weight, bias, gradient[name], gradient[bias_name])
        else:
            probs = view.secrets.predictions[None].expand(len(bias), -1)
        counts = restore_counts(probs, gradient[bias_name], view.batch_size)
        labels = torch.repeat_interleave(torch.arange(len(counts)), counts)
        images = view.secrets.image.float()[None].expand(view.batch_size, -1, -1, -1).clone()
        return Reconstruction(images=images, labels=labels, stats={"seconds": time.perf_counter() - start})
