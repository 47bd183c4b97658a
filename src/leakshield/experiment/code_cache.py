"""An artifact cache keyed by code as well: a fitted artifact (LODA's encoders, Anti-GAN's generator,
a condensed set, ATS's search, GGL's generator) is stored under its :class:`~leakshield.artifacts.FitKey`
with, in its context, a stamp of the code that fits it — the fitting component's modules, the shared
core's and the models' (:mod:`leakshield.code_graph`). A cell recomputed after an edit to that code
therefore refits instead of loading what the old code fitted; an edit elsewhere reuses the artifact."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable

from leakshield.artifacts import Artifact, ArtifactCache, FitKey
from leakshield.attacks import ATTACKS
from leakshield.code_graph import CodeGraph, installed_graph
from leakshield.defenses import DEFENSES
from leakshield.experiment.stamps import CORE_ROOTS, home_modules
from leakshield.models import MODELS


@functools.cache
def fit_code(component: str, graph: CodeGraph | None = None) -> str:
    """16 hex digits over the contents of the modules that fit ``component`` (``defense:loda``,
    ``attack:ggl``, ``ats:privacy-model``: the registered defense or attack its prefix names, else the
    whole package), the core's and every registered model's."""
    graph = graph or installed_graph()
    kind, _, name = component.partition(":")
    homes: set[str] = set()
    for registry in (DEFENSES, ATTACKS):
        for candidate in (name, kind):
            if candidate in registry:
                homes |= set(home_modules(registry, candidate))
        if homes:
            break
    roots = homes or set(graph.modules)
    roots |= set(CORE_ROOTS) | {entry.factory.__module__ for entry in MODELS}
    blob = json.dumps(sorted(graph.closure(sorted(roots)).values()))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class CodeKeyedCache(ArtifactCache):
    """:class:`~leakshield.artifacts.ArtifactCache` whose keys also carry :func:`fit_code`."""

    @staticmethod
    def coded(key: FitKey) -> FitKey:
        return dataclasses.replace(key, context={**key.context, "code": fit_code(key.component)})

    def load(self, key: FitKey) -> Artifact | None:
        return super().load(self.coded(key))

    def save(self, key: FitKey, artifact: Artifact) -> Artifact:
        return super().save(self.coded(key), artifact)

    def get_or_fit(self, key: FitKey, fit: Callable[[], Artifact]) -> Artifact:
        return super().get_or_fit(self.coded(key), fit)  # coding twice is coding once
