"""Membership inference from federated updates: would a server (or a participant) learn who was in a
client's data? Attacks (:mod:`.attacks`), error rates at low FPR (:mod:`.roc`), the DP ceiling and its
audit (:mod:`.ceiling`), the game per seed (:mod:`.run`) and the ranked section (:mod:`.section`)."""

from leakshield.membership.attacks import ATTACKS, MembershipAttack
from leakshield.membership.ceiling import Audit, audit, dp_ceiling
from leakshield.membership.config import MembershipConfig, MembershipRow
from leakshield.membership.roc import Roc, roc

__all__ = ["ATTACKS", "Audit", "MembershipAttack", "MembershipConfig", "MembershipRow", "Roc", "audit",
           "dp_ceiling", "roc"]  # fmt: skip
