"""ATS (Gao et al., Automatic Transformation Search Against Deep Leakage from Gradients): the
transformation library, policies, the privacy and accuracy scores, the search and the defense."""

from leakshield.defenses.ats import defense  # noqa: F401  (registers the defense)
from leakshield.defenses.ats.library import TABLE, Transformation, describe_library, transformation
from leakshield.defenses.ats.policy import Policy, PolicySet
from leakshield.defenses.ats.scores import accuracy_score, privacy_score, training_accuracy_score
from leakshield.defenses.ats.search import SearchParams, SearchResult, search_policies

__all__ = [
    "TABLE",
    "Policy",
    "PolicySet",
    "SearchParams",
    "SearchResult",
    "Transformation",
    "accuracy_score",
    "describe_library",
    "privacy_score",
    "search_policies",
    "training_accuracy_score",
    "transformation",
]
