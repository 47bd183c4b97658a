"""Carlini et al.'s attack on instance encoding (*An Attack on InstaHide: Is Private Learning Possible
with Instance Encoding?*, IEEE S&P 2021) as LODA describes it (Wan et al., Sec. 3.2, Eq. 2–3, Sec. 5.1).

The server watches one client for T rounds. Each round it inverts the client's gradient to the encoded
images (a gradient-inversion preset, unboxed when InstaHide's sign flips push encodings out of the pixel
range), estimates which encodings share a private image by the similarity of their absolute values
(k-means on the normalized |E|; one group when the client's batch holds one image) and solves LODA's Eq. 3,

    argmin_X' || abs(M̂ X') − abs(E) ||²,

by Adam (lr 0.01). Per round, mixed labels are read off the bias gradient (batch 1). M̂ is built from
the defense's public configuration only: each encoding gets its group's image with the expected own
coefficient λ̂ = E[λ₀] of the coefficient sampler (estimated by sampling it) and the unknown partners with
1 − λ̂ times the mean public image. The attack never sees the drawn coefficients, partners or signs. The
estimate X' is boxed to the valid pixel range; InstaHide's abs() leaves the sign of each pixel to the
start (the side of the mean public image), the box and the partner term.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic
import torch
from sklearn.cluster import KMeans
from torch import nn
from tqdm.auto import tqdm

from leakshield.attacks.adaptive.inversion import find_defense
from leakshield.attacks.base import ATTACKS, Attack, Reconstruction, create_attack
from leakshield.attacks.execution import Execution, split_execution
from leakshield.data.types import DatasetInfo
from leakshield.defenses.mixing import InstaHideParams, MixUpParams, sample_coefficients
from leakshield.errors import ConfigError
from leakshield.fl.types import PreparedModel, ServerKnowledge, ServerSecrets, ServerView
from leakshield.registry import Params
from leakshield.threats import Adversary, Knowledge, Rounds, threat


class CarliniParams(Params):
    """rounds: T, rounds observed. inner: the attack run on every round's update (default: 1000 iterations
    for an optimization attack). inner_params: parameters overriding the inner attack's defaults. lr,
    steps: Adam on Eq. 3. coefficient_samples: draws of the public coefficient sampler used to estimate λ̂."""

    rounds: int = pydantic.Field(default=50, ge=1)
    inner: str = "ig"
    inner_params: dict[str, Any] | None = None
    lr: float = pydantic.Field(default=0.01, gt=0)
    steps: int = pydantic.Field(default=2000, ge=1)
    coefficient_samples: int = pydantic.Field(default=2000, ge=1)

    @pydantic.model_validator(mode="after")
    def _inner_is_valid(self) -> CarliniParams:
        if self.inner == "carlini":
            raise ValueError("inner: carlini cannot invert a single round")
        method, execution = split_execution(self.resolved_inner_params)
        ATTACKS.validate(self.inner, method)  # unknown names/fields fail here
        Execution(**execution)  # how the inner attack runs (path, shards) is checked too
        return self

    @property
    def resolved_inner_params(self) -> dict[str, Any]:
        if self.inner_params is not None:
            return dict(self.inner_params)
        takes_iterations = "iterations" in ATTACKS.get(self.inner).params.model_fields
        return {"iterations": 1000} if takes_iterations else {}


@dataclass(frozen=True)
class PublicMeanImage(ServerSecrets):
    """The public split's mean image (pixels), the server's stand-in for partners it cannot know."""

    image: torch.Tensor


@ATTACKS.register(
    "carlini",
    summary="adaptive vs MixUp/InstaHide: invert T = 50 rounds to encodings, group them by |E| "
    "similarity, solve LODA's Eq. 3 on absolute values",
    reference="Carlini et al., IEEE S&P 2021; as described in LODA (Wan et al.) Sec. 3.2 Eq. 2–3, Sec. 5.1",
    params=CarliniParams,
    threat=threat(
        Adversary.OBSERVING_SERVER,
        (Knowledge.PROTOCOL, Knowledge.DEFENSES, Knowledge.PUBLIC_SPLIT),
        rounds=Rounds.SEVERAL,
    ),
    targets=("mixup", "instahide"),
)
class CarliniAttack(Attack):
    """Multi-round decoding of instance encodings (see the module docstring)."""

    params: CarliniParams
    probe_budget = "rounds"  # each observed round runs the inner attack once

    @property
    def rounds_observed(self) -> int:
        return self.params.rounds

    def inner_budget(self) -> tuple[int, Callable[[int], dict[str, Any]]] | None:
        inner = self.params.resolved_inner_params
        if "iterations" not in inner:
            return None
        return int(inner["iterations"]), lambda j: {"inner_params": {**inner, "iterations": j}}

    def prepare_model(self, model: nn.Module, knowledge: ServerKnowledge) -> PreparedModel:
        # honest server: the model is unchanged; the public split's mean image models unknown partners
        return PreparedModel(model, PublicMeanImage(knowledge.public.x.mean(dim=0)))

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        return self.reconstruct_from_rounds([view], seed=seed)

    def reconstruct_from_rounds(self, views: Sequence[ServerView], *, seed: int = 0) -> Reconstruction:
        return self.reconstruct_many_from_rounds([views], seeds=[seed])[0]

    def reconstruct_many_from_rounds(
        self, views: Sequence[Sequence[ServerView]], *, seeds: Sequence[int], progress: bool = False
    ) -> list[Reconstruction]:
        """Every victim's rounds are inverted round by round, all victims of a round together (they share
        the round's model, so the inner attack can vectorize), then each victim is decoded."""
        if not views or any(not v for v in views):
            raise ValueError("no views to attack")
        if len(views) != len(seeds):
            raise ValueError(f"{len(views)} victims but {len(seeds)} seeds")
        start = time.perf_counter()
        first = views[0][0]
        info = first.data_info
        defense = self._defense(first)
        inner = self._inner(defense, first)
        rounds = len(views[0])
        encodings: list[list[torch.Tensor]] = [[] for _ in views]
        for t in tqdm(
            range(rounds), desc=f"{self.name}: inverting rounds", disable=not progress, leave=False
        ):
            recs = inner.reconstruct_many(
                [v[t] for v in views], seeds=[seed * 7919 + t for seed in seeds], progress=False
            )
            for k, rec in enumerate(recs):
                if rec.normalized is None:
                    raise ConfigError(
                        f"carlini.inner: {self.params.inner} does not return its input estimate"
                    )
                encodings[k].append(rec.normalized)
        secrets = first.secrets
        mean = secrets.image if isinstance(secrets, PublicMeanImage) else torch.full(info.shape, 0.5)
        seconds = (time.perf_counter() - start) / len(views)
        results = []
        for k, seed in enumerate(seeds):
            e = torch.cat(encodings[k]).float()  # (T·b) × C × H × W, normalized
            x, stats = self.decode(e, views[k][0].batch_size, defense, info, mean, seed=seed)
            stats.update({"rounds": float(rounds), "seconds": seconds})
            images = info.denormalize(x).clamp(0, 1)
            results.append(Reconstruction(images=images, labels=None, stats=stats, normalized=x))
        return results

    @staticmethod
    def _defense(view: ServerView) -> MixUpParams:
        """The public configuration of the mixing defense in the view."""
        config = find_defense(view.defenses, "instahide", "mixup")
        if config is None or not isinstance(config.params, MixUpParams):
            raise ConfigError("carlini: the view has no mixup or instahide defense to decode")
        return config.params

    def _inner(self, defense: MixUpParams, view: ServerView) -> Attack:
        """The per-round inversion, adapted to encodings where the user did not say otherwise: mixed
        labels are read off the bias gradient (batch 1), and InstaHide's sign-flipped encodings are
        neither boxed to the pixel range nor smooth (no TV prior)."""
        p = self.params
        fields = ATTACKS.get(p.inner).params.model_fields
        adapted: dict[str, Any] = {}
        if "labels" in fields and view.batch_size == 1 and view.update.protocol.algorithm == "fedsgd":
            adapted["labels"] = "bias"
        if isinstance(defense, InstaHideParams) and defense.sign_flip:
            adapted.update({k: v for k, v in (("boxed", False), ("tv", 0.0)) if k in fields})
        # the inner attack runs as this one does (path, shards, where calibrations are remembered)
        return create_attack(p.inner, {**adapted, **p.resolved_inner_params}, self.execution.model_dump())

    def decode(
        self,
        encodings: torch.Tensor,
        batch_size: int,
        defense: MixUpParams,
        info: DatasetInfo,
        partner_mean: torch.Tensor,
        *,
        seed: int = 0,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Recover ``batch_size`` private inputs (normalized) from encodings in the model's input space:
        group them, then solve Eq. 3 with M̂ from the public configuration ``defense``.
        ``partner_mean`` (pixels) stands for the partners the attacker cannot know."""
        p = self.params
        flips = isinstance(defense, InstaHideParams) and defense.sign_flip
        e = encodings.float()
        groups = self._group(e, batch_size, seed)
        lam = self._own_coefficient(defense, seed)
        background = info.normalize(partner_mean.unsqueeze(0))[0]
        lo, hi = info.normalized_bounds(torch.zeros(1, *info.shape))
        members = [groups == g for g in range(batch_size)]
        if flips:
            # abs() hides each pixel's sign: start on the side of the mean public image (a dark background
            # stays dark) with the mean magnitude, then let the box and the partner term refine it
            side = torch.where(background >= 0, 1.0, -1.0)
            x0 = torch.stack([side * e[m].abs().mean(0) if m.any() else background for m in members])
            x0 = x0 / max(lam, 1e-3)
        else:  # without flips Eq. 3 is linear: start at its least-squares solution
            x0 = torch.stack([e[m].mean(0) if m.any() else background for m in members])
            x0 = (x0 - (1 - lam) * background) / max(lam, 1e-3)
        x = torch.max(torch.min(x0, hi), lo).requires_grad_(True)
        opt = torch.optim.Adam([x], lr=p.lr)
        target = e.abs() if flips else e
        loss = torch.zeros(())
        for _ in range(p.steps):
            mixed = lam * x[groups] + (1 - lam) * background
            loss = ((mixed.abs() if flips else mixed) - target).pow(2).sum(dim=(1, 2, 3)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                x.copy_(torch.max(torch.min(x, hi), lo))
        return x.detach(), {"own_coefficient": lam, "regression_loss": float(loss.detach())}

    @staticmethod
    def _group(e: torch.Tensor, b: int, seed: int) -> torch.Tensor:
        """Which private image each encoding holds: k-means on the normalized absolute values."""
        if b == 1:
            return torch.zeros(len(e), dtype=torch.long)
        features = e.abs().flatten(1)
        features = features - features.mean(dim=0)
        features = features / features.norm(dim=1, keepdim=True).clamp_min(1e-12)
        labels = KMeans(n_clusters=b, n_init=10, random_state=seed).fit_predict(features.numpy())
        return torch.from_numpy(labels).long()

    def _own_coefficient(self, defense: MixUpParams, seed: int) -> float:
        """λ̂ = E[λ₀] under the defense's public coefficient sampler."""
        gen = torch.Generator().manual_seed(seed)
        draws = sample_coefficients(
            self.params.coefficient_samples, defense.concentration, defense.max_coefficient, gen
        )
        return float(draws[:, 0].mean())
