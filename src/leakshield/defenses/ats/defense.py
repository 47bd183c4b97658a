"""The ATS defense (Gao et al., ATS, Algorithm 2): every client minibatch, in training and in the
attacked update, goes through a transformation policy set (one policy drawn per image).

The set is given (``policies: "21-13-3+15-48-15"``, the two ConvNet policies of the paper's Table 2(b);
the authors' code publishes ``21-13-3+7-4-15``), drawn at random (``policies: random``, the paper's
random-policy baseline; ``policy_seed`` picks which), or searched on the public split (``policies:
search``, Algorithm 1 with ``search`` settings; a public fit, cached, reusable by ``leakshield fit`` and
``leakshield ats search``). ``pick`` keeps some of the searched policies by rank (``[1]``: the best;
default all of them, the hybrid). The policy set is public (Kerckhoffs): ``public_config`` names it;
which policy an image drew and the signs of its magnitudes stay with the client.
"""

from __future__ import annotations

from typing import Any

import pydantic
import torch

from leakshield.artifacts import Artifact, FitData, FitScope
from leakshield.defenses.ats.policy import MAX_OPS, PolicySet, random_policy
from leakshield.defenses.ats.search import SearchParams, search_policies
from leakshield.defenses.base import DEFENSES, ClientContext, Defense, PublicDefense
from leakshield.errors import ConfigError
from leakshield.registry import Params

SPECIAL = ("random", "search")


class AtsParams(Params):
    """policies: a policy set ``"a-b-c+d-e-f"`` (library indices 0–49, ≤ 3 per policy), ``random`` or
    ``search``. policy_seed: the seed of a random policy. random_ops: its length (1–3). search: the
    search settings (``policies: search``). pick: 1-based ranks of the searched policies to use
    (default: all, the hybrid)."""

    policies: str = "21-13-3+15-48-15"
    policy_seed: int = 0
    random_ops: int = pydantic.Field(default=MAX_OPS, ge=1, le=MAX_OPS)
    search: SearchParams = pydantic.Field(default_factory=SearchParams)
    pick: list[pydantic.PositiveInt] | None = None

    @pydantic.field_validator("policies")
    @classmethod
    def _valid(cls, value: str) -> str:
        if value not in SPECIAL:
            try:
                PolicySet.parse(value)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return value

    @pydantic.model_validator(mode="after")
    def _pick_within_keep(self) -> AtsParams:
        if self.pick is not None:
            if self.policies != "search":
                raise ValueError("pick: only with policies: search")
            if max(self.pick) > self.search.keep:
                raise ValueError(f"pick: rank {max(self.pick)} exceeds search.keep ({self.search.keep})")
        return self


@DEFENSES.register(
    "ats",
    summary="ATS: transform every client image by a searched policy set (one policy per image) "
    "[policies 21-13-3+15-48-15 (the paper's ConvNet policies, Table 2b), or random, or search]",
    reference="Gao et al., Automatic Transformation Search Against Deep Leakage from Gradients, TPAMI 2023 "
    "(CVPR 2021), Algorithms 1–2",
    params=AtsParams,
    aliases={"ats-random": {"policies": "random"}, "ats-search": {"policies": "search"}},
)
class Ats(Defense):
    """Data stage: a policy set applied afresh to every minibatch with the client's generator."""

    params: AtsParams

    def __init__(self, params: Params) -> None:
        super().__init__(params)
        p = self.params
        # only a searching ATS fits (on the public split); the instance attribute shadows the class's None
        self.fit_scope: FitScope | None = "public" if p.policies == "search" else None  # type: ignore[misc]
        self._set: PolicySet | None = None
        if p.policies == "random":
            self._set = PolicySet(
                (random_policy(torch.Generator().manual_seed(p.policy_seed), p.random_ops, exact=True),)
            )
        elif p.policies != "search":
            self._set = PolicySet.parse(p.policies)

    @property
    def policy_set(self) -> PolicySet:
        """The policies in use (searched ones once the search artifact is attached)."""
        if self._set is not None:
            return self._set
        if self.artifact is None:
            raise RuntimeError(
                "ats with policies: search needs its fitted search artifact (run the fit first)"
            )
        searched = PolicySet.parse(str(self.artifact.metadata["policies"]))
        ranks = self.params.pick or list(range(1, len(searched.policies) + 1))
        return PolicySet(tuple(searched.policies[r - 1] for r in ranks))

    def fit(self, data: FitData) -> Artifact:
        if data.model is None:
            raise ValueError("ats search needs the model the policies are searched for")
        result = search_policies(
            data.model.to(data.device),
            data.data.to(data.device),
            data.info,
            self.params.search,
            seed=data.seed,
            cache=data.cache,
            progress=data.progress,
        )
        rows: list[dict[str, Any]] = [vars(s) for s in result.scores]
        return Artifact({}, {"policies": str(result.chosen), "scores": rows})

    def data_hook(
        self, x: torch.Tensor, y: torch.Tensor, context: ClientContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy_set.apply(x, context.generator), y

    def public_config(self) -> PublicDefense:
        """The defense with its policy set spelled out (searched or random sets included)."""
        return PublicDefense(self.name, self.params.model_copy(update={"policies": str(self.policy_set)}))
