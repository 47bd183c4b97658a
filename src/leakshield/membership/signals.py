"""What a membership attacker reads off a federation, round by round, for every candidate record.

:class:`SignalObserver` watches a :class:`~leakshield.fl.simulation.FederatedSimulation` as the server
does and keeps, per observed round r and candidate x (the attacker holds the candidates: the membership
game asks about given records):

* ``cosine[r, c, x]``: cos(−∇ℓ(θ_r; x), s_{r,c}) between the descent direction of x at the round's global
  model θ_r and client c's step s_{r,c} (FedAvg: θ_after − θ_before; FedSGD: −lr·g) — FedMIA-II's and
  Li et al.'s per-record statistic, for *every* client (FedMIA's reference distribution); NaN for a
  client that sent nothing that round;
* ``owner_diff[r, x]``: 2⟨−∇ℓ(θ_r; x), s_{r,owner}⟩ − ‖∇ℓ(θ_r; x)‖², with the step of the client whose
  pool x is from — FedMIA's Grad-Diff ‖Δ‖² − ‖Δ − ∇ℓ‖² (Δ = −s), both terms at θ_r;
* ``client_loss[r, c, x]``: ℓ(x) under client c's local model θ_r + s_{r,c} (with the buffers it sent),
  for every client (FedMIA-I's reference distribution); ``local_loss[r, x]`` is the owner's;
* ``gradient_norm[r, x]``: ‖∇ℓ(θ_{r+1}; x)‖² at the global model the round released;
* ``global_loss[r, x]`` and ``global_cosine[r, x]``: ℓ(x) under θ_{r+1} and cos(−∇ℓ(θ_r; x),
  θ_{r+1} − θ_r) — all that the global models reveal (a participant, or a server under secure
  aggregation, sees only these).

ℓ is the per-record cross-entropy on normalized inputs (a model's auxiliary terms, PRECODE's KL, are a
batch term and are left out); gradients are the clients' training-loss gradients
(:func:`~leakshield.gradients.per_sample_gradients`). Memory: the round's client steps (clients ×
parameters) and one chunk of per-record gradients (:data:`CHUNK` × parameters), never all candidates'.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.fl.participants import RoundObserver
from leakshield.fl.types import ClientUpdate
from leakshield.gradients import per_sample_gradients

#: candidates whose per-record gradients are held at once
CHUNK = 256
#: the signals kept per round, in :class:`Signals`' order
NAMES = ("cosine", "owner_diff", "client_loss", "gradient_norm", "global_loss", "global_cosine")


@dataclass
class Signals:
    """Per-round membership signals (numpy arrays, rounds first); ``owner[x]``: the client whose pool
    candidate x was drawn from; ``rounds``: the round number of each row."""

    cosine: np.ndarray
    owner_diff: np.ndarray
    client_loss: np.ndarray
    gradient_norm: np.ndarray
    global_loss: np.ndarray
    global_cosine: np.ndarray
    owner: np.ndarray
    rounds: np.ndarray

    @property
    def local_loss(self) -> np.ndarray:
        """ℓ under the owner's local model: rounds × candidates."""
        return self.client_loss[:, self.owner, np.arange(len(self.owner))]

    def row(self, round: int) -> int:
        """The row of round ``round`` (it must have been observed)."""
        found = np.flatnonzero(self.rounds == round)
        if not len(found):
            raise ValueError(f"round {round} was not observed (observed: {self.rounds.tolist()})")
        return int(found[0])


def _flat(tensors: dict[str, torch.Tensor], names: list[str]) -> torch.Tensor:
    return torch.cat([tensors[n].reshape(-1).float() for n in names])


class SignalObserver(RoundObserver):
    """Computes :class:`Signals` of ``candidates`` (pixels in [0, 1]) while a simulation of ``clients``
    clients runs; ``owner[x]`` is the client each candidate's pool belongs to. ``observed``: the rounds
    whose signals are kept (None: every round)."""

    def __init__(
        self, candidates: ImageSet, owner: torch.Tensor, clients: int, info: DatasetInfo,
        *, algorithm: str, local_lr: float, observed: set[int] | None = None,
    ) -> None:  # fmt: skip
        self.x = info.normalize(candidates.x)
        self.y = candidates.y
        self.owner = owner.long().to(self.y.device)
        self.clients = clients
        self.sign = 1.0 if algorithm == "fedavg" else -local_lr  # a client's step from its ``delta``
        self.observed = observed
        self.rounds: list[int] = []
        self.rows: dict[str, list[np.ndarray]] = {k: [] for k in NAMES}
        self._model: nn.Module | None = None  # the round's global model θ_r (eval mode)
        self._theta: dict[str, torch.Tensor] = {}
        self._steps: dict[int, torch.Tensor] = {}  # client → its flattened step
        self._client_loss: torch.Tensor | None = None

    @staticmethod
    def _names(model: nn.Module) -> list[str]:
        return [n for n, p in model.named_parameters() if p.requires_grad]

    def round_started(self, round: int, model: nn.Module) -> None:
        if self.observed is not None and round not in self.observed:
            self._model = None
            return
        model.eval()  # the attacker's forward passes: inference-mode layers (dropout off)
        self._model = model
        self._theta = {n: p.detach().clone() for n, p in model.named_parameters()}
        self._steps = {}
        self._client_loss = torch.full((self.clients, len(self.y)), float("nan"), device=self.y.device)

    def _losses(self, model: nn.Module, params: dict[str, torch.Tensor]) -> torch.Tensor:
        state = {**dict(model.named_buffers()), **params}
        with torch.no_grad():
            out = torch.cat(
                [
                    functional_call(model, state, (self.x[i : i + CHUNK],))
                    for i in range(0, len(self.y), CHUNK)
                ]
            )
        return F.cross_entropy(out, self.y, reduction="none")

    def update_received(self, round: int, client_id: int, update: ClientUpdate) -> None:
        if self._model is None:  # a round not observed
            return
        names = self._names(self._model)
        self._steps[client_id] = self.sign * _flat(update.delta, names)
        local = {n: self._theta[n] + self.sign * update.delta[n] if n in update.delta else self._theta[n]
                 for n in self._theta}  # fmt: skip
        assert self._client_loss is not None
        self._client_loss[client_id] = self._losses(self._model, {**update.buffers, **local})

    def _descents(self, model: nn.Module) -> Iterator[torch.Tensor]:
        """−∇ℓ(θ; x) of every candidate at ``model``'s parameters, one chunk at a time (flattened)."""
        names = self._names(model)
        for start in range(0, len(self.y), CHUNK):
            grads = per_sample_gradients(model, self.x[start : start + CHUNK], self.y[start : start + CHUNK])
            yield -torch.cat([grads[n].flatten(1) for n in names], dim=1)

    def round_finished(self, round: int, model: nn.Module) -> None:
        if self._model is None:
            return
        model.eval()
        names = self._names(model)
        after = {n: p.detach() for n, p in model.named_parameters()}
        moved = F.normalize(_flat(after, names) - _flat(self._theta, names), dim=0)
        n, device = len(self.y), self.y.device
        nan = float("nan")
        sent = torch.zeros(self.clients, dtype=torch.bool, device=device)
        steps = torch.zeros(self.clients, len(moved), device=device)
        for client, step in self._steps.items():
            sent[client], steps[client] = True, step
        cosine = torch.full((self.clients, n), nan, device=device)
        owner_diff = torch.full((n,), nan, device=device)
        global_cosine = torch.empty(n, device=device)
        unit_steps = F.normalize(steps, dim=1)  # once a round, not once a chunk
        start = 0
        for descent in self._descents(self._model):
            part = slice(start, start + len(descent))
            unit = F.normalize(descent, dim=1)
            global_cosine[part] = unit @ moved
            cosine[:, part] = torch.where(sent[:, None], unit_steps @ unit.T, nan)
            owners = self.owner[part]
            dots = (descent * steps[owners]).sum(dim=1)
            diff = 2 * dots - (descent**2).sum(dim=1)
            owner_diff[part] = torch.where(sent[owners], diff, nan)
            start += len(descent)
        found = {
            "cosine": cosine,
            "owner_diff": owner_diff,
            "client_loss": self._client_loss,
            "gradient_norm": torch.cat([(d**2).sum(dim=1) for d in self._descents(model)]),  # at θ_{r+1}
            "global_loss": self._losses(model, after),
            "global_cosine": global_cosine,
        }
        for key, value in found.items():
            assert value is not None
            self.rows[key].append(value.detach().cpu().numpy())
        self.rounds.append(round)
        self._model, self._steps = None, {}

    def signals(self) -> Signals:
        """The signals of every round observed so far."""
        if not self.rounds:
            raise ValueError("no round was observed: run the simulation first")
        stacked = {k: np.stack(v).astype(np.float64) for k, v in self.rows.items()}
        return Signals(owner=self.owner.cpu().numpy(), rounds=np.asarray(self.rounds), **stacked)
