"""The cells of a text grid and how one group of them is computed: for one seed, model, defense setting,
model state and batch size, every victim's update of the honest model is computed once through the
client's defense pipeline and handed to every observing attack; an attack that changes the model sends
its own, whose updates are computed for it. The clients' guards judge each model received (a refused
victim shares nothing). Each attack's reconstructions are scored against the truth.

Scores (per sequence after Hungarian pairing on ROUGE-1, :func:`~leakshield.text.scores.text_scores`):
ROUGE-1/2/L F-measures, exact match and token accuracy; beside them the no-information guess's ROUGE-1/2
(the public split's most frequent words at the sequence's true length: a guess that even knows the
length). An attack that recovers a set and no order (the bag of words) is scored once per victim batch:
its recall and precision on token ids, and ROUGE-1 of its tokens against the batch's distinct tokens
(each token a word, word pieces without their ``##``)."""

from __future__ import annotations

import statistics
import time
import traceback
from dataclasses import dataclass
from typing import Any

import torch

from leakshield.errors import ConfigError, LeakshieldError, is_storage_problem
from leakshield.experiment.config import Component, DefenseSetting
from leakshield.experiment.store import CellRecord
from leakshield.seeds import mix
from leakshield.text.scores import no_information_text, paired_scores, text_scores, token_accuracy
from leakshield.text.tokenizer import SPECIALS
from leakshield.text_grid.attacks import (
    TEXT_ATTACKS,
    TextAttack,
    TextAttackInput,
    create_text_attack,
    threat_of,
)
from leakshield.text_grid.config import TextExperimentConfig, TextModelSpec
from leakshield.text_grid.known import known_noise_std, known_rounding, step_sizes
from leakshield.text_grid.world import TextWorld, Victim

WORDS = len(SPECIALS)  # ids from here on are words and word pieces


@dataclass(frozen=True)
class TextCell:
    seed: int
    model: TextModelSpec
    state: str
    defense: DefenseSetting
    attack: Component
    batch: int

    @property
    def key(self) -> str:
        return (
            f"text|seed={self.seed}|model={self.model.display}|state={self.state}|"
            f"defense={self.defense.display}|attack={self.attack.display}|batch={self.batch}"
        )

    @property
    def group(self) -> tuple:
        """Cells of one group share their victims' updates."""
        return (self.seed, self.model.display, self.defense.display, self.state, self.batch)


def expand_text_grid(config: TextExperimentConfig) -> list[TextCell]:
    """Every cell, a group's cells next to each other."""
    return [
        TextCell(seed, model, state, defense, attack, batch)
        for seed in config.seeds
        for model in config.models
        for defense in config.defenses
        for state in config.states
        for batch in config.victims.batches
        for attack in config.attacks
    ]


@dataclass(frozen=True)
class Observation:
    """What the server holds of one victim: its gradient estimate and local steps, or, when the
    client's guard refused the model sent, nothing and the guard's reason."""

    gradient: dict[str, torch.Tensor] | None
    steps: int
    refused: str | None = None


def observe(world: TextWorld, cell: TextCell, sent, previous) -> list[Observation]:
    """Every victim's observation when the server sends ``sent`` (``previous``: the model the clients
    accepted the round before, for the guards that compare; None untrained)."""
    out = []
    for victim in world.victims[cell.batch]:
        verdict = world.inspect(sent, cell.defense, victim, cell.seed, previous)
        if not verdict.accepted:
            out.append(Observation(None, 0, verdict.reason or "refused"))
            continue
        out.append(Observation(*world.update(sent, cell.defense, victim, cell.seed)))
    return out


def _modifies(cell: TextCell) -> bool:
    """Whether the cell's attack changes the model the server sends (its declared threat says so)."""
    return TEXT_ATTACKS.get(cell.attack.name).threat.modifies_model


def compute_group(world: TextWorld, cells: list[TextCell], environment: dict[str, Any]) -> list[CellRecord]:
    """The records of ``cells`` (one group); a failing group is stored as failed cells, never raised.
    An observing server's attacks share the victims' updates of the honest model; a malicious one's
    (``modifies_model``) gets the updates of the model it prepared. Client guards judge the model each
    victim receives; a refused victim sends nothing."""
    first = cells[0]
    start = time.time()
    try:
        state = world.state(first.model, first.defense, first.state, first.seed)
        honest: list[Observation] | None = None
        if any(not _modifies(c) for c in cells):
            honest = observe(world, first, state.model, state.previous)
    except Exception as exc:  # a failing group must not stop the grid
        if is_storage_problem(exc):  # a full or read-only disk: stop, a rerun resumes
            raise
        error = f"{type(exc).__name__}: {exc}"
        trace = [{"traceback": traceback.format_exc(limit=4)}]
        return [_record(c, "failed", {}, trace, error, start, environment) for c in cells]
    guarded = world.pipeline(first.defense).guards
    records = []
    for cell in cells:
        began = time.time()
        try:
            attack = create_text_attack(cell.attack.name, cell.attack.params)
            sent, observed = state.model, honest
            if _modifies(cell):
                if world.config.update.algorithm != "fedsgd":
                    raise ConfigError(f"{cell.attack.name} reads one gradient step: set update.algorithm "
                                      "to fedsgd (local steps move its bins)")  # fmt: skip
                sent = attack.prepare(state.model, world.data.public.x.to(world.device), cell.seed)
                observed = observe(world, cell, sent, state.previous)
            if observed is None:
                raise LeakshieldError("no observation of the honest model was computed for this group")
            rows, metrics = _attack_cell(world, cell, attack, sent, observed)
            metrics.update(accuracy=state.accuracy, chance=world.chance, **state.privacy)
            if guarded:
                metrics["refused"] = sum(o.refused is not None for o in observed) / len(observed)
            records.append(_record(cell, "ok", metrics, rows, None, began, environment))
        except Exception as exc:
            if is_storage_problem(exc):
                raise
            error = f"{type(exc).__name__}: {exc}"
            records.append(
                _record(
                    cell,
                    "failed",
                    {},
                    [{"traceback": traceback.format_exc(limit=4)}],
                    error,
                    began,
                    environment,
                )
            )
    return records


def _attack_cell(
    world: TextWorld, cell: TextCell, attack: TextAttack, model, observed: list[Observation]
) -> tuple[list[dict], dict[str, Any]]:
    tokenizer, public_ids = world.info.tokenizer, world.data.public.x
    local = world.config.update
    rows: list[dict[str, Any]] = []
    seconds = []
    for victim, seen in zip(world.victims[cell.batch], observed, strict=True):
        truths = [tokenizer.decode(r) for r in victim.batch.x]
        if seen.refused is not None:  # nothing shared: the no-information guess is all the server has
            empty = torch.zeros(0, dtype=torch.long)
            found = [_bag_row(victim, empty, tokenizer, public_ids)] if attack.recovers_set else (
                _guess_rows(victim, truths, tokenizer, public_ids))  # fmt: skip
            rows += [{**row, "refused": seen.refused} for row in found]
            continue
        assert seen.gradient is not None
        fedavg = local.algorithm == "fedavg"
        sizes = step_sizes(cell.batch, local.batch_size, local.local_epochs) if fedavg else [cell.batch]
        assert len(sizes) == seen.steps, (sizes, seen.steps)
        noise = known_noise_std(
            world.pipeline_entries(cell.defense, victim),
            sizes,
            len(world.clients[victim.client]),
            local.local_lr if fedavg else None,
        )
        labels = victim.batch.y.to(world.device) if attack.needs_labels else None
        began = time.perf_counter()
        seed = mix(cell.seed, victim.index)
        rounding = known_rounding(world.pipeline_entries(cell.defense, victim))
        out = attack(
            TextAttackInput(
                model, seen.gradient, cell.batch, labels, noise, seed, public_ids, world.cache, rounding
            )
        )
        seconds.append(time.perf_counter() - began)
        if out.ids is not None:
            rows += _sequence_rows(victim, out.ids, truths, tokenizer, public_ids)
        if out.bag is not None:
            rows.append(_bag_row(victim, out.bag, tokenizer, public_ids))
    metrics: dict[str, Any] = {
        "seconds_per_victim": statistics.fmean(seconds) if seconds else None,
        "victims": len(observed),
        "scored": len(rows),
    }
    bags = [r for r in rows if "bag_recall" in r]
    if bags:
        metrics["bags_empty"] = sum(r["bag_precision"] is None for r in bags)
    for name in (
        "rouge1",
        "rouge2",
        "rougeL",
        "exact",
        "token_accuracy",
        "floor_rouge1",
        "floor_rouge2",
        "bag_recall",
        "bag_precision",
    ):
        values = [r[name] for r in rows if r.get(name) is not None]
        if values:
            metrics[name] = statistics.fmean(values)
    return rows, metrics


def _guess_rows(victim: Victim, truths: list[str], tokenizer, public_ids) -> list[dict]:
    """A refused victim's sequences scored as the no-information guess (no token accuracy: no ids)."""
    rows = []
    for k, truth in enumerate(truths):
        guess = no_information_text(public_ids, int(victim.batch.lengths[k]), tokenizer)
        score = text_scores([guess], [truth])[0]
        rows.append({"victim": victim.index, "client": victim.client, "sequence": k, "truth": truth,
                     "reconstructed": guess, **score, "floor_rouge1": score["rouge1"],
                     "floor_rouge2": score["rouge2"]})  # fmt: skip
    return rows


def _sequence_rows(victim: Victim, ids: torch.Tensor, truths: list[str], tokenizer, public_ids) -> list[dict]:
    predicted = [tokenizer.decode(r) for r in ids]
    rows = []
    for k, (paired, score) in enumerate(paired_scores(predicted, truths)):
        truth = truths[k]
        length = int(victim.batch.lengths[k])
        guess = text_scores([no_information_text(public_ids, length, tokenizer)], [truth])[0]
        row = ids[paired : paired + 1]
        rows.append(
            {
                "victim": victim.index,
                "client": victim.client,
                "sequence": k,
                "truth": truth,
                "reconstructed": predicted[paired],
                **score,
                "token_accuracy": token_accuracy(row, victim.batch.x[k : k + 1].cpu()),
                "floor_rouge1": guess["rouge1"],
                "floor_rouge2": guess["rouge2"],
            }
        )
    return rows


def _bag_row(victim: Victim, bag: torch.Tensor, tokenizer, public_ids) -> dict:
    """A bag scored on distinct tokens (each one a word, ``##`` dropped): ROUGE-1 of the bag against the
    batch's distinct tokens (a set has no order: no ROUGE-2), recall and precision on token ids; an empty
    bag has no precision (``bags_empty`` counts them)."""
    found = sorted(i for i in bag.tolist() if i >= WORDS)
    true_ids = sorted({i for i in victim.batch.x.flatten().tolist() if i >= WORDS})
    truth = " ".join(t.removeprefix("##") for t in tokenizer.tokens(true_ids))
    words = " ".join(t.removeprefix("##") for t in tokenizer.tokens(found))
    score = text_scores([words], [truth])[0]
    guess = text_scores([no_information_text(public_ids, len(true_ids) + 2, tokenizer)], [truth])[0]
    hits = len(set(true_ids) & set(found))
    return {
        "victim": victim.index,
        "client": victim.client,
        "truth": truth,
        "reconstructed": words,
        "rouge1": score["rouge1"],
        "bag_recall": hits / max(len(true_ids), 1),
        "bag_precision": hits / len(found) if found else None,
        "floor_rouge1": guess["rouge1"],
    }


def _record(
    cell: TextCell,
    status: str,
    metrics: dict,
    victims: list[dict],
    error: str | None,
    start: float,
    environment: dict[str, Any],
) -> CellRecord:
    """The stored form of a cell, with where it ran (``environment``) and its model state."""
    threat = threat_of(cell.attack.name, cell.attack.params)
    return CellRecord(
        key=cell.key,
        kind="text",
        model=cell.model.display,
        defense=cell.defense.display,
        attack=cell.attack.display,
        round=None,
        seed=cell.seed,
        status=status,
        metrics=metrics,
        victims=victims,
        error=error,
        images=None,
        seconds=time.time() - start,
        finished=time.time(),
        environment={**environment, "state": cell.state},
        attack_name=TEXT_ATTACKS.get(cell.attack.name).name,
        threat=threat.as_json(),
        scale=f"batch={cell.batch} state={cell.state}",
    )
