"""What crosses the wire in FL, and what an attacker may see (it never touches the truth)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.base import PublicDefense

Algorithm = Literal["fedsgd", "fedavg"]


@dataclass(frozen=True)
class ServerKnowledge:
    """What a (malicious) server may use to prepare the model it sends: public dataset facts and the
    public split (never a client's private data). ``slot`` of ``slots``: which of the round's sampled
    clients the model is for, in client order (a server may send each client its own model, as LOKI
    does; 0 of 1 without secure aggregation). ``defenses``: the clients' defenses as their public
    configuration (Kerckhoffs: e.g. a client guard's thresholds, which a detection-aware attack evades)."""

    data_info: DatasetInfo
    public: ImageSet
    slot: int = 0
    slots: int = 1
    defenses: tuple[PublicDefense, ...] = ()


@dataclass(frozen=True)
class ServerSecrets:
    """Base of what a server keeps to itself when it prepares the model it sends (e.g. an imprint
    attack's thresholds, a prior computed from the public split); an attack subclasses it. It is
    handed back to the same attack through :attr:`ServerView.secrets`, never to a client."""


@dataclass(frozen=True)
class PublicMean(ServerSecrets):
    """The public split's mean image (pixel space, C×H×W): kept by an honest-but-curious server that
    sends the model unchanged and needs a reference image (a sign to fix, a no-information guess)."""

    image: torch.Tensor


@dataclass(frozen=True)
class PreparedModel:
    """What a server's preparation returns: the model to send and its own secrets (None: none)."""

    model: nn.Module
    secrets: ServerSecrets | None = None


@dataclass(frozen=True)
class ProtocolFacts:
    """Public facts of how a client computed its update.

    algorithm: ``fedsgd`` (one gradient of one batch) or ``fedavg`` (local SGD, update θ_after − θ_before).
    local_steps: number of local SGD steps (1 for FedSGD). batch_size: the local minibatch size.
    num_samples: how many samples the client used. model_mode: whether the client ran the model in
    ``train`` or ``eval`` mode (BatchNorm statistics, dropout). shuffled: whether FedAvg minibatches were
    drawn in a secret random order (else in the data's order). optimizer: FedAvg's local optimizer
    (``sgd`` with ``momentum``, or ``adam``).
    """

    algorithm: Algorithm
    local_lr: float
    momentum: float
    local_epochs: int
    local_steps: int
    batch_size: int
    num_samples: int
    model_mode: Literal["train", "eval"] = "eval"
    shuffled: bool = False
    optimizer: Literal["sgd", "adam"] = "sgd"


@dataclass(frozen=True)
class ClientUpdate:
    """A client's message to the server.

    ``global_params``: the parameters the client started from. ``delta``: for FedSGD the mean gradient of
    the batch loss, for FedAvg θ_after − θ_before, keyed by parameter name. ``buffers``: the client's
    buffers after local training (BatchNorm statistics), used by the FedAvg server; empty for FedSGD.
    """

    global_params: dict[str, torch.Tensor]
    delta: dict[str, torch.Tensor]
    protocol: ProtocolFacts
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)

    def detached(self) -> ClientUpdate:
        """A copy holding detached clones only."""
        clone = {k: v.detach().clone() for k, v in self.delta.items()}
        return ClientUpdate(
            global_params={k: v.detach().clone() for k, v in self.global_params.items()},
            delta=clone,
            protocol=self.protocol,
            buffers={k: v.detach().clone() for k, v in self.buffers.items()},
        )

    def gradient(self) -> dict[str, torch.Tensor]:
        """The gradient equivalent of the update: the delta itself for FedSGD; for a single-step FedAvg
        update without momentum, −Δθ / lr. Multi-step FedAvg updates have no closed form."""
        if self.protocol.algorithm == "fedsgd":
            return self.delta
        if (
            self.protocol.local_steps == 1
            and self.protocol.momentum == 0
            and self.protocol.optimizer == "sgd"
        ):
            return {k: -v / self.protocol.local_lr for k, v in self.delta.items()}
        raise ValueError("a multi-step FedAvg update is not a gradient; unroll the local steps to match it")


@dataclass(frozen=True)
class ThreatModel:
    """What the configured threat model grants the server beyond the update."""

    labels_known: bool = False


@dataclass(frozen=True)
class ServerView:
    """Everything an attack may use: the model as the server built and sent it, the update, public
    protocol and dataset facts, the defenses' public configuration, what the threat model grants, and
    the secrets the server kept when it prepared the model (:class:`ServerSecrets`). Under secure
    aggregation ``update`` is the aggregate of ``clients`` updates (their sample-weighted mean: the sum
    the protocol reveals, over the total sample count) and ``labels`` are every client's.

    Holds detached copies only: no hooks, no cached activations, no reference to the private batch or
    to the model the client trained on.
    """

    model: nn.Module
    update: ClientUpdate
    data_info: DatasetInfo
    threat: ThreatModel
    labels: torch.Tensor | None = None
    defenses: tuple[PublicDefense, ...] = ()
    round: int = 0
    secrets: ServerSecrets | None = None
    clients: int = 1

    @property
    def batch_size(self) -> int:
        """How many samples the update holds (under secure aggregation: every client's)."""
        return self.update.protocol.num_samples


def strip_hooks(model: nn.Module) -> nn.Module:
    """Remove every forward/backward hook and state-dict hook from ``model`` and its children."""
    for module in model.modules():
        for attr in (
            "_forward_hooks",
            "_forward_pre_hooks",
            "_backward_hooks",
            "_backward_pre_hooks",
            "_forward_hooks_with_kwargs",
            "_forward_pre_hooks_with_kwargs",
            "_forward_hooks_always_called",
        ):
            hooks = getattr(module, attr, None)
            if hooks is not None:
                hooks.clear()
    return model


def build_server_view(
    model: nn.Module,
    update: ClientUpdate,
    data_info: DatasetInfo,
    threat: ThreatModel,
    *,
    labels: torch.Tensor | None = None,
    defenses: tuple[PublicDefense, ...] = (),
    round: int = 0,
    secrets: ServerSecrets | None = None,
    clients: int = 1,
) -> ServerView:
    """Make the attacker's view: a hook-free deep copy of the model loaded with the update's starting
    parameters, detached update tensors, and the labels only if the threat model grants them."""
    view_model = strip_hooks(copy.deepcopy(model))
    for param in view_model.parameters():
        param.grad = None
    view_model.load_state_dict(update.global_params, strict=False)
    view_model.eval() if update.protocol.model_mode == "eval" else view_model.train()
    return ServerView(
        model=view_model,
        update=update.detached(),
        data_info=data_info,
        threat=threat,
        labels=labels.detach().clone() if (threat.labels_known and labels is not None) else None,
        defenses=tuple(defenses),
        round=round,
        secrets=secrets,
        clients=clients,
    )
