"""Defenses plug into the client pipeline at these stages (docs/concepts/cell-pipeline.md).

=============  ==========================================================  ==========================
stage          what it does                                                examples
=============  ==========================================================  ==========================
model_hook     changes the model the server builds and sends (public)       PRECODE, dropout, DP-SGD
data_hook      transforms a local minibatch before the loss                 MixUp, InstaHide, ATS
gradient       replaces how a minibatch gradient is computed                DP-SGD, Soteria, DCS²
step_hook      transforms each minibatch gradient before the optimizer      noise with ``stage: step``
release_hook   transforms the update before it leaves the client            noise, clipping, pruning
inspect        a guard: judges the model received before the client trains  row-guard
=============  ==========================================================  ==========================

A guard (``inspect``) runs first, on the model as received: a refused model yields no update (the
client stays silent that round) and the refusal is observable (``Observation.refused``, the
simulation's ``refusals``).

Every stage is the identity by default; a defense overrides the ones it needs. A defense holds no client
state: every client stage receives an immutable :class:`ClientContext` (client id, round, the client's
dataset, the current minibatch with its flags, the client's generator, the dataset's public facts and
public split, and the defense's fitted artifact for that client), so clients may run in any order,
interleaved, in parallel or in other processes.

One-off preparation is a *fit*: a defense with ``fit_scope`` ``public`` (sees the public split only) or
``client`` (sees one client's data only) implements :meth:`Defense.fit`, which returns an
:class:`~leakshield.artifacts.Artifact`; the runner caches it on disk and hands it back explicitly (a
public artifact through :meth:`Defense.with_artifact`, a client's through its context). A defense's
``public_config`` is what an adaptive attack may read (Kerckhoffs); secrets (seeds, masks, drawn
coefficients) never leave the client.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from leakshield.artifacts import Artifact, ArtifactCache, FitScope, Fittable
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.gradients import plain_gradient
from leakshield.registry import Params, Registry
from leakshield.seeds import seeded_generator


@dataclass(frozen=True)
class ClientContext:
    """What a client stage may use: who and when (``client_id``, ``round``, the local ``step``), the
    client's own ``dataset`` and current minibatch ``batch`` (pixels in [0, 1], labels, per-sample
    flags; None outside a minibatch), the client's ``generator`` (its randomness for this round), the
    dataset's public ``info`` and ``public`` split, and ``artifact``: this defense's fitted artifact for
    this client (client-scope fits; None otherwise). ``indices``: the minibatch's rows in ``dataset``
    (None when the batch did not come from it, e.g. a batch handed in from outside); ``seed``: the
    client's seed (the one its fits used); ``cache``: the run's artifact cache (None outside a run).
    ``notes``: private facts a data stage records for the evaluator (never for an attack), shared by the
    round's minibatch contexts: ``largest_component``, the mixing component of largest weight of each
    image (MixUp, InstaHide; LODA's Sec. 5.1 scores against it). ``previous``: the model the client
    received and accepted in the previous round, for a guard that compares (None: none known)."""

    client_id: int
    round: int
    dataset: ImageSet
    info: DatasetInfo
    generator: torch.Generator
    public: ImageSet | None = None
    batch: ImageSet | None = None
    step: int = 0
    artifact: Artifact | None = None
    indices: torch.Tensor | None = None
    seed: int = 0
    cache: ArtifactCache | None = None
    notes: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    previous: nn.Module | None = dataclasses.field(default=None, compare=False, repr=False)

    def at_step(self, batch: ImageSet, step: int, indices: torch.Tensor | None = None) -> ClientContext:
        """The context of one minibatch (``indices``: its rows in the client's dataset, if known)."""
        return dataclasses.replace(self, batch=batch, step=step, indices=indices)


@dataclass(frozen=True)
class Verdict:
    """A guard's judgement of a received model: ``accepted``, and when refused the ``reason`` (one line
    naming the check and the value that failed it). ``score``: the check's statistic (higher is more
    suspicious), for thresholds chosen from measured spread."""

    accepted: bool
    reason: str = ""
    score: float = 0.0


ACCEPTED = Verdict(True)


@dataclass(frozen=True)
class Participation:
    """Client-level facts for a client-level privacy account: ``rounds``, how many rounds each defended
    client sent an update in (client id → rounds); ``sample_rate``, the share of clients the server
    samples a round (clients per round / clients); ``total_rounds``, the rounds the federation ran."""

    rounds: Mapping[int, int]
    sample_rate: float
    total_rounds: int


@dataclass(frozen=True)
class PublicDefense:
    """A defense as an attacker may know it (Kerckhoffs): its registered ``name`` and its validated,
    immutable parameter object (e.g. ``params.sigma`` of Gaussian noise). Never its secrets."""

    name: str
    params: Params


class Defense(Fittable):
    """Base class of every defense; see the module docstring for the stages."""

    name: str = "defense"
    #: whether :meth:`gradient` replaces the plain minibatch gradient (at most one per pipeline)
    replaces_gradient: ClassVar[bool] = False
    #: None, or the data a one-off :meth:`fit` sees: ``public`` (public split) or ``client`` (one client)
    fit_scope: ClassVar[FitScope | None] = None
    #: whether the fit only measures (its budget's convergence) and the defense runs without the artifact
    fit_measures_only: ClassVar[bool] = False
    #: whether :meth:`inspect` judges received models (a client guard)
    guards: ClassVar[bool] = False
    #: whether its guard compares the model received with the previous round's (``context.previous``)
    needs_previous: ClassVar[bool] = False

    def __init__(self, params: Params) -> None:
        self.params = params

    # -- stages --------------------------------------------------------------------------------------
    def inspect(self, model: nn.Module, context: ClientContext) -> Verdict:
        """The guard stage: judge the model received before training on it (accept by default)."""
        return ACCEPTED

    def model_hook(self, model: nn.Module) -> nn.Module:
        return model

    def check_sampling(self, rate: float) -> None:
        """Refuse (:class:`ValueError`, the reason), before a run, a minibatch sampling rate this
        defense cannot work at (a privacy budget no noise meets); any rate by default."""

    def data_hook(
        self, x: torch.Tensor, y: torch.Tensor, context: ClientContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return x, y

    def gradient(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, context: ClientContext
    ) -> dict[str, torch.Tensor]:
        """The minibatch gradient (``x`` normalized model input); used when ``replaces_gradient``."""
        return plain_gradient(model, x, y)

    def step_hook(self, gradient: dict[str, torch.Tensor], context: ClientContext) -> dict[str, torch.Tensor]:
        """The step stage: each minibatch gradient, after the gradient stage and before the optimizer."""
        return gradient

    def release_hook(
        self, update: dict[str, torch.Tensor], context: ClientContext
    ) -> dict[str, torch.Tensor]:
        return update

    # -- public facts --------------------------------------------------------------------------------
    def sensitive_samples(self, batch: ImageSet, dataset: ImageSet) -> torch.Tensor | None:
        """Which samples of ``batch`` (of a client's ``dataset``) the defense treats as sensitive (None:
        the notion does not apply); the accuracy on sensitive samples uses it."""
        return None

    def aggregate_hook(
        self, updates: Sequence[dict[str, torch.Tensor]], generator: torch.Generator
    ) -> dict[str, torch.Tensor] | None:
        """The server stage (central DP): the round's step from the released ``updates``, drawing from
        the server's ``generator``; None (the default) leaves the step to the aggregator."""
        return None

    def privacy_spent(
        self, client_steps: Mapping[int, tuple[int, float]], participation: Participation | None = None
    ) -> dict[str, float]:
        """Formal privacy spent after training, from each client's (local steps, sampling rate) and the
        clients' ``participation``; empty for defenses without a guarantee (DP-SGD reports ε)."""
        return {}

    def public_config(self) -> PublicDefense:
        """The defense's name and parameters: everything an adaptive attack may know."""
        return PublicDefense(self.name, self.params)


DEFENSES: Registry[Defense] = Registry("defense")


class DefensePipeline:
    """Defenses applied in the order given at every stage (e.g. MixUp then Gaussian noise), with the
    client-scope artifacts of each client (``client_artifacts[(client id, defense index)]``)."""

    def __init__(
        self,
        defenses: Sequence[Defense] = (),
        client_artifacts: Mapping[tuple[int, int], Artifact] | None = None,
    ) -> None:
        self.defenses = tuple(defenses)
        self.client_artifacts = dict(client_artifacts or {})
        overriding = [d.name for d in self.defenses if d.replaces_gradient]
        if len(overriding) > 1:
            raise ValueError(
                f"defenses {', '.join(overriding)} each replace the gradient computation; stack at most one"
            )

    @classmethod
    def from_config(cls, entries: Sequence[Mapping[str, Any]]) -> DefensePipeline:
        """Build from ``[{"name": ..., "params": {...}}, ...]``."""
        return cls([create_defense(e["name"], e.get("params")) for e in entries])

    def with_artifacts(
        self,
        public: Mapping[int, Artifact],
        clients: Mapping[tuple[int, int], Artifact],
    ) -> DefensePipeline:
        """A pipeline whose defense ``i`` holds ``public[i]`` and whose clients get ``clients``."""
        defenses = [d.with_artifact(public[i]) if i in public else d for i, d in enumerate(self.defenses)]
        return DefensePipeline(defenses, {**self.client_artifacts, **clients})

    def _context(self, index: int, context: ClientContext) -> ClientContext:
        artifact = self.client_artifacts.get((context.client_id, index))
        return context if artifact is context.artifact else dataclasses.replace(context, artifact=artifact)

    @property
    def guards(self) -> bool:
        """Whether any defense of the pipeline is a client guard."""
        return any(d.guards for d in self.defenses)

    @property
    def needs_previous(self) -> bool:
        """Whether a guard of the pipeline compares the model received with the previous round's."""
        return any(d.needs_previous for d in self.defenses)

    def inspect(self, model: nn.Module, context: ClientContext) -> Verdict:
        """Every guard in order; the first refusal wins."""
        for i, defense in enumerate(self.defenses):
            if defense.guards:
                verdict = defense.inspect(model, self._context(i, context))
                if not verdict.accepted:
                    return verdict
        return ACCEPTED

    def model_hook(self, model: nn.Module, seed: int = 0) -> nn.Module:
        """Every defense's model stage in order; layers they add are initialized from torch's global RNG
        seeded with ``seed`` (restored after), so the same model and seed give the same network."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for defense in self.defenses:
                model = defense.model_hook(model)
        return model

    def data_hook(
        self, x: torch.Tensor, y: torch.Tensor, context: ClientContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        for i, defense in enumerate(self.defenses):
            x, y = defense.data_hook(x, y, self._context(i, context))
        return x, y

    def gradient(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, context: ClientContext
    ) -> dict[str, torch.Tensor]:
        """The minibatch gradient (the replacing defense's, else the plain one) through every defense's
        step stage in order. The step stage draws from one stream per local step, shared by the
        pipeline's defenses in turn (stacked noises are independent), apart from the data and gradient
        stages' draws. A step-stage perturbation acts before any release stage, whatever the order."""
        replacing = next((i for i, d in enumerate(self.defenses) if d.replaces_gradient), None)
        if replacing is None:
            gradient = plain_gradient(model, x, y)
        else:
            gradient = self.defenses[replacing].gradient(model, x, y, self._context(replacing, context))
        stepping = step_stream(context)
        for i, defense in enumerate(self.defenses):
            gradient = defense.step_hook(gradient, self._context(i, stepping))
        return gradient

    def release_hook(
        self, update: dict[str, torch.Tensor], context: ClientContext
    ) -> dict[str, torch.Tensor]:
        for i, defense in enumerate(self.defenses):
            update = defense.release_hook(update, self._context(i, context))
        return update

    def sensitive_samples(self, dataset: ImageSet) -> torch.Tensor | None:
        """The first defense's answer for a client's whole ``dataset`` that is not None."""
        for defense in self.defenses:
            mask = defense.sensitive_samples(dataset, dataset)
            if mask is not None:
                return mask
        return None

    def aggregate_hook(
        self, updates: Sequence[dict[str, torch.Tensor]], generator: torch.Generator
    ) -> dict[str, torch.Tensor] | None:
        """The first server stage that forms the step (None: the aggregator's)."""
        for defense in self.defenses:
            step = defense.aggregate_hook(updates, generator)
            if step is not None:
                return step
        return None

    def privacy_spent(
        self, client_steps: Mapping[int, tuple[int, float]], participation: Participation | None = None
    ) -> dict[str, float]:
        spent: dict[str, float] = {}
        for defense in self.defenses:
            spent.update(defense.privacy_spent(client_steps, participation))
        return spent

    def public_config(self) -> tuple[PublicDefense, ...]:
        return tuple(d.public_config() for d in self.defenses)


def create_defense(name: str, params: Mapping[str, Any] | None = None) -> Defense:
    """Build a registered defense with validated parameters."""
    defense = DEFENSES.create(name, params)
    defense.name = DEFENSES.get(name).name
    return defense


#: the stream of the step stage's randomness (apart from the release stage's)
STEP_STREAM = 0x57E95


def step_stream(context: ClientContext) -> ClientContext:
    """``context`` with the step stage's generator: seeded by the client's round generator and the local
    step, so a step-stage perturbation does not consume the draws of the data and gradient stages."""
    gen = context.generator
    return dataclasses.replace(
        context, generator=seeded_generator(gen.initial_seed(), STEP_STREAM, context.step, device=gen.device)
    )
