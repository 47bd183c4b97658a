"""The server-attack cell protocol: a server — honest-but-curious, or one that changes the model it
sends — attacks each fixed victim's update; the evaluator scores the reconstructions against the
private images it alone holds. A victim whose client guard refused the model sent shares nothing: the
attacker is left with the no-information guess (the public split's mean image) and the cell reports
the refused share."""

from __future__ import annotations

import dataclasses

from leakshield.attacks.base import Attack, Reconstruction
from leakshield.data import ImageSet
from leakshield.experiment.aggregate_round import claimed_by_victim, observe_in_aggregate
from leakshield.experiment.cells import Cell
from leakshield.experiment.config import Component
from leakshield.experiment.fitting import FitSetting, fit_attack
from leakshield.experiment.protocols import CellOutput, register_protocol
from leakshield.experiment.world import ExperimentContext
from leakshield.fl import HonestClient, Observation, ServerKnowledge, ThreatModel, observe_victim
from leakshield.models.imported import identity
from leakshield.seeds import victim_attack_seed, victim_round_generator


def fitted_attack(world: ExperimentContext, cell: Cell, spec: Component) -> Attack:
    """The attack ``spec`` for ``cell``'s model, defense and seed, with its public-split fit (cached) if
    it declares one."""
    assert cell.model and cell.defense and cell.seed is not None
    attack = world.config.create_attack(spec, world.cache.root)
    if attack.fit_scope is None:
        return attack
    attack, used = fit_attack(attack, attack_fit_setting(world, cell), world.cache)
    world.models.used.extend(u for u in used if u not in world.models.used)
    return attack


def attack_fit_setting(world: ExperimentContext, cell: Cell) -> FitSetting:
    """What an attack's public-split fit for ``cell`` sees: the cell's fresh model, its identity, seed."""
    assert cell.model and cell.defense and cell.seed is not None
    net, _ = world.models.fresh(cell.model, cell.defense, cell.seed)
    model_id = identity(cell.model.name, cell.model.params)
    return FitSetting(world.info, world.data.public, world.models.clients, world.config.fl, net, model_id,
                      cell.seed, world.device, world.progress)  # fmt: skip


@register_protocol("server-attack", "a server attacks each victim's update; the evaluator scores it")
def run_server_attack(world: ExperimentContext, cell: Cell) -> CellOutput:
    assert cell.model and cell.defense and cell.attack and cell.round is not None
    assert cell.seed is not None
    attack = fitted_attack(world, cell, cell.attack)
    threat = ThreatModel(labels_known=world.config.attack.threat.labels_known)
    rounds = [cell.round + t for t in range(attack.rounds_observed)]
    trained = [world.models.at_round(cell.model, cell.defense, cell.seed, r) for r in rounds]
    knowledge = ServerKnowledge(world.info, world.data.public, defenses=trained[0].pipeline.public_config())
    victim_client = world.config.victims.client
    client = HonestClient(
        client_id=victim_client,
        dataset=world.models.clients[victim_client],
        local=world.config.victim_update,
        pipeline=trained[0].pipeline,
        info=world.info,
        public=world.models.public,
        seed=cell.seed,
        model_mode=world.config.attack.model_mode,
        cache=world.cache,
    )
    models = [t.model for t in trained]
    previous = None  # the model the victim accepted the round before (for guards that compare rounds)
    if cell.round > 0 and trained[0].pipeline.needs_previous:
        previous = world.models.at_round(cell.model, cell.defense, cell.seed, cell.round - 1).model

    offset = world.config.victims.offset  # stage 2's victims continue stage 1's streams, never reuse them

    def observe(k: int, batch: ImageSet) -> Observation:
        k += offset
        batch = batch.to(world.device)
        if world.config.fl.secure_aggregation:  # the server sees each round's aggregate, never one update
            return observe_in_aggregate(world.config, world.models.clients, models, batch, client,
                                        threat=threat, rounds=rounds, server=attack, knowledge=knowledge,
                                        cell_seed=cell.seed, victim=k, device=world.device,
                                        size=cell.scale.clients if cell.scale else None)  # fmt: skip
        generators = [
            victim_round_generator(cell.seed, k, t, device=world.device) for t in range(len(rounds))
        ]
        return observe_victim(models, batch, client, threat=threat, rounds=rounds, server=attack,
                              knowledge=knowledge, generators=generators, previous=previous)  # fmt: skip

    victims = world.victims_of(cell.scale, cell.seed)
    observations = [observe(k, batch) for k, batch in enumerate(victims)]
    heard = [k for k, o in enumerate(observations) if not o.refused]
    seeds = [victim_attack_seed(cell.seed, k + offset) for k in heard]
    if attack.rounds_observed == 1:
        found = attack.reconstruct_many([observations[k].views[0] for k in heard], seeds=seeds,
                                        progress=world.progress)  # fmt: skip
    else:
        found = attack.reconstruct_many_from_rounds(
            [observations[k].views for k in heard], seeds=seeds, progress=world.progress
        )
    by_victim = dict(zip(heard, found, strict=True))
    reconstructions, extra = [], []
    for k, (batch, observation) in enumerate(zip(victims, observations, strict=True)):
        reconstruction = by_victim.get(k)
        if reconstruction is None:  # refused: nothing was shared, the no-information guess remains
            reconstruction = world.no_information_guess(batch)
        elif observation.others is not None:  # the other clients' samples claim their own images
            claimed = claimed_by_victim(reconstruction.images, batch, observation.others)
            reconstruction = dataclasses.replace(reconstruction, images=claimed)
        reconstructions.append(reconstruction)
        info = {"labels": batch.y.tolist(), **reconstruction.stats}
        if observation.refused:
            info["refused"] = observation.refused
        extra.append(info)
    defended = [o.trace.defended_x for o in observations]
    components = [o.trace.component_x for o in observations]
    output = world.score(reconstructions, list(victims), defended, extra, components)
    priors, prior_rows = prior_scores(world, reconstructions, list(victims))
    output.metrics.update(priors)
    for row, prior_row in zip(output.victims, prior_rows, strict=False):
        row["prior_ssim"] = prior_row.get("ssim")
    if any(o.refused for o in observations) or trained[0].pipeline.guards:  # a guard's 0 is a result
        output.metrics["refused"] = sum(bool(o.refused) for o in observations) / len(observations)
    if world.config.fl.secure_aggregation:  # how many clients each attacked aggregate held
        held = [o.views[0].clients for o in observations if o.views]
        output.metrics["aggregate_clients"] = sum(held) / len(held) if held else 0.0
    return output


def prior_scores(
    world: ExperimentContext, reconstructions: list[Reconstruction], victims: list[ImageSet]
) -> tuple[dict[str, float], list[dict]]:
    """``prior_ssim`` / ``prior_psnr``: how close a prior-based attack's draw for the known labels,
    made without the update, already is to the victims (scored as the reconstructions are), and each
    victim's scores of that draw, in victim order (an empty row for a victim without a draw; no rows for
    an attack without a prior).
    The leaderboard counts such an attack as leaking a victim only above its draw."""
    drawn = [i for i, r in enumerate(reconstructions) if r.prior is not None]
    if not drawn:
        return {}, []
    scored = world.score([Reconstruction(images=reconstructions[i].prior) for i in drawn],  # type: ignore[arg-type]
                         [victims[i] for i in drawn])  # fmt: skip
    metrics = {f"prior_{k}": scored.metrics[k] for k in ("ssim", "psnr") if k in scored.metrics}
    rows: list[dict] = [{} for _ in victims]
    for i, row in zip(drawn, scored.victims, strict=True):
        rows[i] = row
    return metrics, rows
