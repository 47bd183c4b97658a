"""Membership scores to error rates: the ROC curve, TPR at a fixed low FPR and the AUC (Carlini et al.,
*Membership Inference Attacks From First Principles*, S&P 2022, Sec. III: report TPR at low FPR, on
log-scaled ROC curves, not accuracy or AUC alone).

Scores are "higher means member". A threshold t calls every record scoring ≥ t a member. TPR at
FPR α is the largest TPR of a threshold whose FPR is at most α, read off the empirical curve without
interpolation (LiRA's and FedMIA's code read it the same way; FedMIA takes FPR < α strictly): with n
non-members the smallest FPR above 0 is 1/n, so 1 % is resolved from 100 non-members on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def chance_tpr(nonmembers: int, level: float) -> float:
    """The expected TPR at FPR ``level`` of scores that carry no information, read as :meth:`Roc.tpr_at`
    does from ``nonmembers`` non-members: the threshold admits k = ⌊level·n⌋ false positives, and a
    member scores above the (k+1)-th largest of n exchangeable non-members with probability
    (k + 1)/(n + 1) — 0.013, not 0.01, at 1 % of 150."""
    if nonmembers < 1:
        raise ValueError("chance TPR of no non-members")
    return (math.floor(level * nonmembers + 1e-9) + 1) / (nonmembers + 1)


@dataclass(frozen=True)
class Roc:
    """An empirical ROC curve: ``fpr[i]``, ``tpr[i]`` of the i-th threshold, from (0, 0) to (1, 1)."""

    fpr: np.ndarray
    tpr: np.ndarray
    members: int
    nonmembers: int

    def tpr_at(self, level: float) -> float:
        """The largest TPR whose FPR is at most ``level`` (no interpolation)."""
        if not 0 <= level <= 1:
            raise ValueError(f"FPR level {level}: must lie in [0, 1]")
        return float(self.tpr[self.fpr <= level + 1e-12].max())

    @property
    def auc(self) -> float:
        """Area under the curve (trapezoids; ties count one half, the Mann–Whitney U / (m·n))."""
        return float(np.sum(np.diff(self.fpr) * (self.tpr[1:] + self.tpr[:-1]) / 2))


def roc(members: Sequence[float] | np.ndarray, nonmembers: Sequence[float] | np.ndarray) -> Roc:
    """The ROC of scores of ``members`` (positives) against ``nonmembers`` (higher = member). Tied
    scores move the curve diagonally (one threshold takes them all). NaN scores are refused."""
    pos = np.asarray(members, dtype=float).ravel()
    neg = np.asarray(nonmembers, dtype=float).ravel()
    if len(pos) == 0 or len(neg) == 0:
        raise ValueError(f"an ROC needs members and non-members: {len(pos)} and {len(neg)} given")
    if np.isnan(pos).any() or np.isnan(neg).any():
        raise ValueError("membership scores hold NaN: the attack failed on some record")
    thresholds = np.unique(np.concatenate([pos, neg]))[::-1]
    pos_sorted, neg_sorted = np.sort(pos), np.sort(neg)
    # how many scores are ≥ each threshold
    tp = len(pos) - np.searchsorted(pos_sorted, thresholds, side="left")
    fp = len(neg) - np.searchsorted(neg_sorted, thresholds, side="left")
    fpr = np.concatenate([[0.0], fp / len(neg)])
    tpr = np.concatenate([[0.0], tp / len(pos)])
    return Roc(fpr, tpr, len(pos), len(neg))


def split_scores(scores: np.ndarray, member: np.ndarray) -> Roc:
    """:func:`roc` of ``scores`` with boolean ``member`` labels."""
    member = np.asarray(member, dtype=bool)
    return roc(scores[member], scores[~member])
