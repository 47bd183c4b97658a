"""What the server observes of one victim client: the single function the runner, the tests and the
benchmarks use to turn a private batch into server views (the attacker never touches the truth).

For every observed round the server prepares the model it sends (an honest server sends it as it is;
a malicious one, e.g. the imprint attack, modifies it and keeps secrets), the client computes its
update on its own copy, and the server builds its view: the model it sent, the update, public facts,
the defenses' public configuration and its own secrets. The client's trace (the defended inputs)
goes to the evaluator only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.base import DefensePipeline
from leakshield.fl.client import ClientTrace, HonestClient
from leakshield.fl.config import LocalTraining
from leakshield.fl.types import PreparedModel, ServerKnowledge, ServerView, ThreatModel, build_server_view


class ServerRole(Protocol):
    """What prepares the model a server sends (every attack does; honest ones return it unchanged)."""

    def prepare_model(self, model: nn.Module, knowledge: ServerKnowledge) -> PreparedModel: ...


@dataclass(frozen=True)
class Observation:
    """The server's views of the victim's updates, one per observed round (oldest first), and the
    client's private trace of the first round (for the evaluator, never for an attack)."""

    views: list[ServerView]
    trace: ClientTrace
    #: why the client's guard refused the model sent ("" when it never did); the views stop there
    refused: str = ""
    #: under secure aggregation, the other clients' private batches in the first observed round (the
    #: evaluator matches reconstructions over the whole aggregate; never for an attack)
    others: ImageSet | None = None


def observe_victim(
    models: Sequence[nn.Module],
    batch: ImageSet,
    client: HonestClient,
    *,
    threat: ThreatModel,
    rounds: Sequence[int] | None = None,
    server: ServerRole | None = None,
    knowledge: ServerKnowledge | None = None,
    generators: Sequence[torch.Generator] | None = None,
    previous: nn.Module | None = None,
) -> Observation:
    """The victim ``client`` shares an update on its private ``batch`` in each observed round, unless
    its guard refuses the model sent (then :attr:`Observation.refused` says why and no view follows).

    ``models``: the honest global model of each observed round (the federation trains between two).
    ``rounds``: their round numbers (default 0, 1, …). ``server``: the attack, whose ``prepare_model``
    builds the model sent from the honest one and the public ``knowledge``; None sends the honest model.
    ``generators``: the client's randomness per round (default: seeded 0, 1, … on the model's device).
    ``previous``: the honest model of the round before the first observed one, which the client
    accepted then (for guards that compare rounds; None: unknown, e.g. round 0).
    """
    rounds = list(rounds) if rounds is not None else list(range(len(models)))
    if len(rounds) != len(models):
        raise ValueError(f"{len(models)} models for {len(rounds)} rounds")
    if server is not None and knowledge is None:
        raise ValueError("a server that prepares the model needs the server's knowledge")
    views, traces = [], []
    for t, (model, round_) in enumerate(zip(models, rounds, strict=True)):
        prepared = server.prepare_model(model, knowledge) if server is not None else PreparedModel(model)
        device = next(prepared.model.parameters()).device
        generator = generators[t] if generators is not None else torch.Generator(device).manual_seed(t)
        before = previous if t == 0 else models[t - 1]  # what the client accepted the round before
        verdict = client.inspect(prepared.model, round_, generator, previous=before)
        if not verdict.accepted:  # the client shares nothing from this round on
            client.refusals.append((round_, verdict.reason))
            return Observation(views, traces[0] if traces else ClientTrace(None), verdict.reason)
        update, trace = client.compute(prepared.model, round_, batch, generator)
        views.append(
            build_server_view(
                prepared.model,
                update,
                client.info,
                threat,
                labels=batch.y,
                defenses=client.pipeline.public_config(),
                round=round_,
                secrets=prepared.secrets,
            )
        )
        traces.append(trace)
    return Observation(views, traces[0])


def server_view_of(
    model: nn.Module,
    batch: ImageSet,
    info: DatasetInfo,
    *,
    local: LocalTraining | None = None,
    defenses: DefensePipeline | None = None,
    labels_known: bool = False,
    model_mode: str = "eval",
    seed: int = 0,
    pool: ImageSet | None = None,
    public: ImageSet | None = None,
    server: ServerRole | None = None,
    knowledge: ServerKnowledge | None = None,
) -> ServerView:
    """What the server sees when one client (client 0, holding ``pool``, default the batch itself)
    computes its update on ``batch`` under ``defenses``: one round of :func:`observe_victim`, the
    client's generator seeded with ``seed``."""
    client = HonestClient(
        client_id=0,
        dataset=pool if pool is not None else batch,
        local=local or LocalTraining(),
        pipeline=defenses or DefensePipeline(),
        info=info,
        public=public,
        model_mode=model_mode,
    )
    device = next(model.parameters()).device
    observation = observe_victim(
        [model],
        batch,
        client,
        threat=ThreatModel(labels_known=labels_known),
        server=server,
        knowledge=knowledge,
        generators=[torch.Generator(device).manual_seed(seed)],
    )
    return observation.views[0]
