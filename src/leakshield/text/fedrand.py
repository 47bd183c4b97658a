"""Federated LoRA fine-tuning, plain or with FedRand (Park, Lee, Kim and Hwang, *FedRand: Enhancing
Privacy in Federated Learning with Randomized LoRA Subparameter Updates*, arXiv 2503.07216, 2025).

Plain federated LoRA is FedAvg over the adapters (and the head): every client trains A and B from the
server's values and sends both updates. FedRand (the paper's Fig. 2): at round t each client, for each
adapted module, draws which of A or B it takes from the server — its *public* half, the one it sends
back — and initializes the other, its *private* half, from its own model of the previous round (the
server's values the first time it takes part); it trains both on its data and sends only the public
halves' updates (and the head's, which has no pair). The server averages each parameter over the clients
that sent it. The draw is a fair coin per (client, round, module) from the federation's seed.

What the server sees of a client is its *message* (:meth:`AdapterFederation.message`): parameter name →
update, the withheld halves absent. Against DAGER the halves differ: a sent A-update's rows span the
client's first-layer states whatever its private B (:mod:`leakshield.text.dager_lora`), while a sent
B-update's rows span A_private·x, with A_private unknown to the server.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from leakshield.errors import LeakshieldError
from leakshield.seeds import seeded_generator
from leakshield.text.dataset import TokenSet
from leakshield.text.lora import AdapterClassifier, lora_names

#: the stream key of FedRand's coins
COIN_STREAM = 0xFED7


class AdapterFederation:
    """FedAvg of ``model``'s shared parameters over ``clients`` (each a :class:`TokenSet`), all of them
    every round, each training ``epochs`` of Adam at ``lr`` over minibatches of ``batch_size``;
    ``fedrand``: FedRand's randomized halves (module docstring). ``model`` is the server's and is
    updated in place."""

    def __init__(
        self,
        model: AdapterClassifier,
        clients: Sequence[TokenSet],
        *,
        fedrand: bool,
        epochs: int = 1,
        batch_size: int = 32,
        lr: float = 1e-3,
        seed: int = 0,
    ) -> None:
        if not isinstance(model, AdapterClassifier):
            raise LeakshieldError("a LoRA federation needs a model with LoRA adapters (an AdapterClassifier)")
        if not clients:
            raise LeakshieldError("a LoRA federation needs one client or more")
        self.model, self.clients, self.fedrand = model, list(clients), fedrand
        self.epochs, self.batch_size, self.lr, self.seed = epochs, batch_size, lr, seed
        self.round = 0
        self.modules = [name for name, module in model.named_modules() if hasattr(module, "lora_A")]
        #: each client's adapters as it trained them in its last round (FedRand only)
        self.private: dict[int, dict[str, torch.Tensor]] = {}

    def public_halves(self, client: int) -> dict[str, str]:
        """Module name → the half (``A`` or ``B``) ``client`` takes from the server and sends this
        round; plain LoRA: ``AB`` (both)."""
        if not self.fedrand:
            return dict.fromkeys(self.modules, "AB")
        coins = torch.rand(
            len(self.modules), generator=seeded_generator(self.seed, COIN_STREAM, self.round, client)
        )
        return {m: "A" if float(c) < 0.5 else "B" for m, c in zip(self.modules, coins, strict=True)}

    def sent_names(self, client: int) -> set[str]:
        """The parameter names ``client``'s message holds this round."""
        halves = self.public_halves(client)
        withheld = set()
        for module, half in halves.items():
            a_name, b_name = lora_names(module)
            withheld |= {b_name} if half == "A" else {a_name} if half == "B" else set()
        return {n for n, _ in self.model.named_parameters()} - withheld

    def view(self, client: int) -> AdapterClassifier:
        """The model ``client`` trains this round: the server's, its private halves replaced by its
        own values of the previous round (where it has them)."""
        local = copy.deepcopy(self.model)
        sent = self.sent_names(client)
        own = self.private.get(client, {})
        with torch.no_grad():
            for name, parameter in local.named_parameters():
                if name not in sent and name in own:
                    parameter.copy_(own[name])
        return local

    def message(self, client: int, data: TokenSet) -> dict[str, torch.Tensor]:
        """``client``'s local training on ``data`` this round: its message (sent name → trained minus
        received), keeping its private halves for the next round."""
        local = self.view(client)
        received = {n: p.detach().clone() for n, p in local.named_parameters()}
        optimizer = torch.optim.Adam(local.parameters(), lr=self.lr)
        generator = seeded_generator(self.seed, self.round, client)
        local.train()
        for _ in range(self.epochs):
            for rows in torch.randperm(len(data), generator=generator).split(self.batch_size):
                loss = F.cross_entropy(local(data.x[rows]), data.y[rows])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        sent = self.sent_names(client)
        trained = {n: p.detach().clone() for n, p in local.named_parameters()}
        if self.fedrand:  # its own model of this round: next round's private halves come from it
            self.private[client] = {n: v for n, v in trained.items() if ".lora_" in n}
        return {n: trained[n] - received[n] for n in trained if n in sent}

    def run(self, rounds: int = 1) -> None:
        """``rounds`` rounds: every client's message, each parameter moved by the mean update of the
        clients that sent it."""
        for _ in range(rounds):
            messages = [self.message(c, data) for c, data in enumerate(self.clients)]
            with torch.no_grad():
                for name, parameter in self.model.named_parameters():
                    updates = [m[name] for m in messages if name in m]
                    if updates:
                        parameter.add_(torch.stack(updates).mean(0))
            self.round += 1

    def victim_gradient(
        self, client: int, ids: torch.Tensor, labels: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """What the server receives from ``client`` this round when it sends one gradient of a batch
        (FedSGD): the gradient on its view of the model, the withheld halves left out."""
        local = self.view(client).eval()
        loss = F.cross_entropy(local(ids), labels)
        names, parameters = zip(*local.named_parameters(), strict=True)
        grads = torch.autograd.grad(loss, parameters)
        sent = self.sent_names(client)
        return {n: g.detach() for n, g in zip(names, grads, strict=True) if n in sent}
