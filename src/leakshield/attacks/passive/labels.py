"""Label inference from the last layer's weight gradient (iDLG, Zhao et al. 2020; batch rule as in
GradAttack / Wainakh et al.)."""

from __future__ import annotations

from typing import Literal

import torch

from leakshield.errors import ConfigError
from leakshield.fl.types import ServerView


def classifier_weight_name(view: ServerView) -> str:
    """Name of the last 2-D parameter with one row per class (the classifier's weight)."""
    num_classes = view.data_info.num_classes
    candidates = [n for n, g in view.update.delta.items() if g.ndim == 2 and g.shape[0] == num_classes]
    if not candidates:
        raise ValueError("no classes×features weight in the update; cannot infer labels")
    return candidates[-1]


def infer_labels(weight_grad: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Infer ``batch_size`` labels from the classifier's weight gradient (classes × features).

    Batch of one (iDLG): with non-negative features (sigmoid, ReLU) only the true class's row of
    ∂L/∂W = (p − y)·featureᵀ is negative, so the label is the argmin of the row sums.
    Larger batches: a class is present if its row minimum is below 0; present classes are ranked by row
    sum (most negative first) and the ranking is cycled to fill the batch when fewer classes are present
    than samples (repeats of a class cannot be counted from signs alone). Known limitation: a class the
    model already predicts with p ≈ 1 for every input (common in untrained sigmoid nets) has a positive
    row even when present, and is missed.
    """
    row_sum = weight_grad.sum(dim=1)
    if batch_size == 1:
        return row_sum.argmin().view(1)
    order = row_sum.argsort()
    present = order[weight_grad.min(dim=1).values[order] < 0]
    if len(present) == 0:
        present = order[:1]
    reps = -(-batch_size // len(present))
    return present.repeat(reps)[:batch_size].sort().values


def label_accuracy(predicted: torch.Tensor, truth: torch.Tensor) -> float:
    """Share of true labels recovered, as multisets (order-free): |pred ∩ truth| / |truth|."""
    pred_counts = torch.bincount(predicted.cpu(), minlength=int(truth.max()) + 1)
    true_counts = torch.bincount(truth.cpu(), minlength=len(pred_counts))
    n = min(len(pred_counts), len(true_counts))
    return float(torch.minimum(pred_counts[:n], true_counts[:n]).sum()) / len(truth)


def granted_or_inferred_labels(view: ServerView) -> torch.Tensor:
    """The labels the threat model grants, else those inferred from the classifier's gradient."""
    if view.labels is not None:
        return view.labels
    return infer_labels(view.update.delta[classifier_weight_name(view)], view.batch_size)


LabelMode = Literal["auto", "known", "infer", "bias", "joint"]


def resolve_labels(
    view: ServerView, mode: LabelMode, device: torch.device
) -> tuple[torch.Tensor | None, str]:
    """The labels an optimization attack matches with, and where they came from: ``known`` (granted by
    the threat model), ``inferred`` (iDLG / batch rule; FedAvg flips the sign, not the ranking),
    ``bias`` (∂L/∂z read off the classifier's bias gradient, FedSGD batch 1) or ``joint`` (None: the
    attack optimizes soft labels)."""
    if mode == "joint":
        return None, "joint"
    if mode == "bias":
        facts = view.update.protocol
        if facts.algorithm != "fedsgd" or view.batch_size != 1:
            raise ConfigError("labels: 'bias' needs a FedSGD gradient of a single image")
        bias = classifier_weight_name(view).removesuffix("weight") + "bias"
        if bias not in view.update.delta:
            raise ConfigError("labels: 'bias' needs a classifier with a bias")
        return view.update.delta[bias].to(device).reshape(1, -1), "bias"
    if mode == "known" and view.labels is None:
        raise ValueError("labels='known' but the threat model does not grant the labels")
    if mode in ("known", "auto") and view.labels is not None:
        return view.labels.to(device), "known"
    weight = view.update.delta[classifier_weight_name(view)]
    if view.update.protocol.algorithm == "fedavg":
        weight = -weight  # Δθ ≈ −lr·Σ g: the sign flips, the ranking does not
    return infer_labels(weight, view.batch_size).to(device), "inferred"
