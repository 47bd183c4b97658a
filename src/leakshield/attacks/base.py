"""Attacks receive a :class:`~leakshield.fl.types.ServerView` and return a :class:`Reconstruction`.

No attack signature accepts the private batch (the attacker never touches the truth): the evaluator keeps it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

import pydantic
import torch
from torch import nn
from tqdm.auto import tqdm

from leakshield.artifacts import Fittable
from leakshield.attacks.execution import Execution, split_execution
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.errors import ConfigError, LeakshieldError
from leakshield.fl.config import LocalTraining
from leakshield.fl.types import ClientUpdate, PreparedModel, ServerKnowledge, ServerView
from leakshield.registry import Params, Registry, format_validation_error
from leakshield.threats import Threat

__all__ = [
    "ATTACKS",
    "Attack",
    "AttackerClient",
    "Participation",
    "Reconstruction",
    "ServerKnowledge",
    "create_attack",
]


@dataclass(frozen=True)
class Reconstruction:
    """What an attack produced: images in [0, 1] pixel space (N×C×H×W, at least the batch size), the
    labels it inferred or was given (or None), and diagnostics (final gradient distance, time...).
    ``normalized``: optimization attacks also keep their unclamped estimate of the model input (e.g. an
    InstaHide encoding, which leaves the pixel range), for attacks that build on it. ``prior``: the
    attack's own no-information reference for the same labels, made without the victim's update (GGL:
    the generator at the search's first latent; the learned attackers: the same attack on public batches
    of the labels, K·B images of which the scorer matches the best): what its images must beat to show
    leakage."""

    images: torch.Tensor
    labels: torch.Tensor | None = None
    stats: dict[str, float] = field(default_factory=dict)
    normalized: torch.Tensor | None = None
    prior: torch.Tensor | None = None


@dataclass(frozen=True)
class Participation:
    """How a participant attack (threat adversary ``participant``) takes part in training: the
    ``attacker`` client (None: the last one), the ``rounds`` it takes part in after the grid's attack
    round, whether the victims' replies reach the server (``victims_heard`` false: the control, a
    federation that never heard them, from round 0), how many labelled ``samples`` it releases at the
    end, and the SSIM ``window`` the evaluator scores them with (class-level SSIM, Anti-GAN Eq. 5)."""

    attacker: int | None
    rounds: int
    samples: int
    victims_heard: bool = True
    window: int = 8


class AttackerClient(Protocol):
    """A participant attack's client (a :class:`~leakshield.fl.participants.Participant`): it replies
    to the models it receives, then ``finish`` trains once more against the final global model and
    ``release`` returns its *output*, labelled samples of the classes it ``targets`` (never a score: the
    evaluator alone holds the private images). ``active_from``: the first round it attacks in."""

    client_id: int
    targets: list[int]
    active_from: int

    def fit(self, model: nn.Module, round: int) -> ClientUpdate | None: ...

    def finish(self, model: nn.Module) -> None: ...

    def release(self, count: int, seed: int) -> ImageSet: ...


class Attack(Fittable):
    """Base class of every attack. Subclasses implement :meth:`reconstruct`.

    An attack that watches the victim over several consecutive rounds (e.g. Carlini et al.'s attack on
    InstaHide) sets :attr:`rounds_observed` above 1 and overrides :meth:`reconstruct_from_rounds`; the
    pipeline then hands it one view per round, the victim sharing an update on the same private batch
    while the federation trains between them.
    """

    name: str = "attack"
    #: ``public``: the attack needs a one-off :meth:`fit` on the public split (e.g. a generator prior)
    fit_scope: ClassVar[Literal["public"] | None] = None
    #: the parameter its run's cost grows linearly with, which the dry run probes at two short budgets
    #: (an attack without one is probed by running it whole)
    probe_budget: ClassVar[str] = "iterations"
    #: the parameter its fit's cost grows linearly with (e.g. training ``steps``), which lets the dry run
    #: time the fit at two short budgets; None: the fit is not estimated
    fit_budget: ClassVar[str | None] = None
    #: its artifact holds trained parameters of the model itself (e.g. SEER): the fit is keyed by the
    #: model's layout after the defenses' model stage, so a defense that changes the architecture gets
    #: its own fit
    fit_trains_model: ClassVar[bool] = False

    def inner_budget(self) -> tuple[int, Callable[[int], dict[str, Any]]] | None:
        """The budget of an attack it runs inside each step of its own (e.g. Carlini et al.'s inversion of
        every observed round), which the dry run shortens too: (its value, parameter updates that set it
        to j); None when there is none."""
        return None

    #: how the attack runs (speed only; see :mod:`leakshield.attacks.execution`)
    execution: Execution = Execution()

    def __init__(self, params: Params) -> None:
        self.params = params

    @property
    def threat(self) -> Threat:
        """The attack's declared threat model (its registry entry's), refined by its parameters where a
        parameter adds knowledge (e.g. a BatchNorm prior)."""
        return ATTACKS.get(self.name).threat

    @property
    def rounds_observed(self) -> int:
        return 1

    def prepare_model(self, model: nn.Module, knowledge: ServerKnowledge) -> PreparedModel:
        """The model the server sends and the secrets it keeps (handed back in the view's ``secrets``).
        Honest-but-curious attacks send it unchanged and keep none; a malicious server (e.g. imprint)
        returns a modified copy. Called before the victim computes its update, which the victim does on
        its own copy: an attack never sees what the client computed privately. An attack keeps no
        state between calls: what it needs later goes into its secrets."""
        return PreparedModel(model)

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        raise NotImplementedError

    # -- participant attacks (threat adversary ``participant``) ----------------------------------------
    def participation(self) -> Participation:
        """How the attacker takes part in training (participant attacks only)."""
        raise LeakshieldError(f"{self.name} is not a participant attack (threat: {self.threat.who})")

    def participant(
        self, client_id: int, dataset: ImageSet, local: LocalTraining, info: DatasetInfo, seed: int
    ) -> AttackerClient:
        """The attacker client holding its own ``dataset`` (participant attacks only)."""
        raise LeakshieldError(f"{self.name} is not a participant attack (threat: {self.threat.who})")

    def reconstruct_many(
        self, views: Sequence[ServerView], *, seeds: Sequence[int], progress: bool = False
    ) -> list[Reconstruction]:
        """Attack independent victims; attacks that can vectorize over victims override this."""
        if len(views) != len(seeds):
            raise ValueError(f"{len(views)} views but {len(seeds)} seeds")
        pairs = tqdm(list(zip(views, seeds, strict=True)), desc=self.name, disable=not progress, leave=False)
        return [self.reconstruct(view, seed=seed) for view, seed in pairs]

    def reconstruct_from_rounds(self, views: Sequence[ServerView], *, seed: int = 0) -> Reconstruction:
        """Attack a sequence of views of the same victim, oldest first; single-round attacks use the first."""
        if not views:
            raise ValueError("no views to attack")
        return self.reconstruct(views[0], seed=seed)

    def reconstruct_many_from_rounds(
        self, views: Sequence[Sequence[ServerView]], *, seeds: Sequence[int], progress: bool = False
    ) -> list[Reconstruction]:
        """Multi-round attacks on independent victims (``views[victim][round]``); attacks that can share
        work across victims override this."""
        if len(views) != len(seeds):
            raise ValueError(f"{len(views)} victims but {len(seeds)} seeds")
        pairs = tqdm(list(zip(views, seeds, strict=True)), desc=self.name, disable=not progress, leave=False)
        return [self.reconstruct_from_rounds(v, seed=seed) for v, seed in pairs]


ATTACKS: Registry[Attack] = Registry("attack", requires_threat=True)


def create_attack(
    name: str, params: Mapping[str, Any] | None = None, execution: Mapping[str, Any] | None = None
) -> Attack:
    """Build a registered attack (or preset) with validated parameters. Execution settings (``path``,
    ``compile_after``, ``victim_shards``) may come in ``params`` or ``execution`` (``params`` wins);
    they are kept apart from the method's parameters (:mod:`leakshield.attacks.execution`)."""
    method, settings = split_execution(params)
    try:
        run = Execution(**{**(execution or {}), **settings})
    except pydantic.ValidationError as exc:
        raise ConfigError(f"{name}: {format_validation_error(exc)}") from None
    attack = ATTACKS.create(name, method)
    attack.name = ATTACKS.get(name).name
    attack.execution = run
    return attack
