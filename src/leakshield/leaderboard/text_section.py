"""The leaderboard's text section: a text grid's cells ranked per threat model by the same rule as the
images (:mod:`.ranking`: seeds as the unit, margins and leaks against each text's own no-information
score, the strongest attack chosen on every seed, each row against no defense and all pairs by paired
tests with Holm's correction, the utility gate). The text grid has no stage 2: its rows show the texts
their attack was chosen on.

The unit is one private text. A text leaks when its reconstruction's ROUGE-2 F-measure (after the
grid's Hungarian pairing) is at least the images' threshold 0.6 — most of its word pairs back in order
— and above the ROUGE-2 of its own no-information guess (the public split's most frequent words at its
true length). The ranking reads a cell's per-victim scores under the images' key ``ssim``: the records
built here are transient (never stored or exported) and carry, for text, ROUGE-2 there and ROUGE-1 in
the PSNR slot (the tie-breaker); the tables say so in their headers. A model state is a "round": 0
untrained, the grid's ``training.rounds`` trained. Utility: the test accuracy of the model trained under
the defense (per seed, from any of its cells that succeeded); chance: always answering the test split's
most frequent label, as the cells record it. Attacks that recover a set of words and no order (the bag
of words) are left out: they rank no sequence.

A row is marked stale (:mod:`.staleness`) when a cell it ranks is, or its utility: every trained cell of
a model, defense and seed that succeeded records the same trained model's accuracy, so the utility is
stale only when none of those cells is fresh. The no-information guess is computed by the shared core
alone, which every cell reaches: it can be stale only when every cell is, and is not tracked apart."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from leakshield.experiment.store import CellRecord
from leakshield.leaderboard.staleness import TEXT_SCOPE, stale_labels
from leakshield.leaderboard.tables import Table, letters, marked_stale, selection_note, threat_rankings

#: what the text tables call the ranking's score columns
LABELS = {"score": "ROUGE-2", "second": "ROUGE-1"}


def _batch(record: CellRecord) -> str:
    return next((part for part in (record.scale or "").split() if part.startswith("batch=")), "")


def _victims(rows: Sequence[dict], key: str) -> list[dict]:
    """Per victim (in order): its sequences' ``key`` scores in order, and its guard's refusal."""
    grouped: dict[int, dict] = {}
    for row in rows:
        if row.get("rouge2") is None:
            continue
        entry = grouped.setdefault(int(row["victim"]), {"ssim": []})
        entry["ssim"].append(float(row[key]))
        if row.get("refused"):
            entry["refused"] = row["refused"]
    return [grouped[k] for k in sorted(grouped)]


def _recovers_set(record: CellRecord) -> bool:
    from leakshield.text_grid.attacks import TEXT_ATTACKS

    name = record.attack_name or record.attack or ""
    return name in TEXT_ATTACKS and bool(getattr(TEXT_ATTACKS.get(name).factory, "recovers_set", False))


def ranking_records(records: Sequence[CellRecord], rounds: int) -> list[CellRecord]:
    """Attack, baseline and utility records the ranking reads, built from a text grid's cells."""
    out: list[CellRecord] = []
    references: dict[str, CellRecord] = {}
    utility: dict[tuple, CellRecord] = {}
    for r in records:
        if r.kind != "text":
            continue
        trained = r.environment.get("state") == "trained"
        scale = _batch(r)
        base = dict(kind="attack", round=rounds if trained else 0, scale=scale, images=None)
        if r.status != "ok":
            if not _recovers_set(r):  # a failed bag of words would not have been ranked either
                out.append(dataclasses.replace(r, **base))
            continue
        accuracy = r.metrics.get("accuracy")
        if trained and accuracy is not None and (r.model, r.defense, r.seed) not in utility:
            found = {"accuracy": accuracy}
            for name in ("chance", "epsilon", "epsilon_client"):
                if r.metrics.get(name) is not None:
                    found[name] = r.metrics[name]
            utility[(r.model, r.defense, r.seed)] = dataclasses.replace(
                r, kind="utility", key=f"text-utility|{r.model}|{r.defense}|{r.seed}", attack=None,
                metrics=found, victims=[], round=rounds, scale="",
            )  # fmt: skip
        victims = _victims(r.victims, "rouge2")
        if not victims:  # a bag of words: no sequences to rank
            continue
        metrics = {"ssim": r.metrics["rouge2"], "psnr": r.metrics.get("rouge1")}
        if "refused" in r.metrics:
            metrics["refused"] = r.metrics["refused"]
        out.append(dataclasses.replace(r, **base, metrics=metrics, victims=victims))
        if scale not in references:
            floors = _victims(r.victims, "floor_rouge2")
            mean = sum(v for f in floors for v in f["ssim"]) / sum(len(f["ssim"]) for f in floors)
            references[scale] = dataclasses.replace(
                r, kind="baseline", key=f"text-baseline|{scale}", attack=None, defense=None, model=None,
                metrics={"ssim": mean}, victims=[{"ssim": f["ssim"]} for f in floors], scale=scale, seed=None,
            )  # fmt: skip
    return [*out, *references.values(), *utility.values()]


def stale_ranked(records: Sequence[CellRecord], converted: Sequence[CellRecord], stale: set[str]) -> set[str]:
    """The keys of ``converted`` (:func:`ranking_records` of ``records``) that ``stale`` (keys of stale
    text cells) reaches:
    the stale cells themselves, and each utility none of whose cells (its model, defense and seed,
    trained) is fresh."""
    trained = [r for r in records if r.kind == "text" and r.environment.get("state") == "trained"
               and r.status == "ok" and r.metrics.get("accuracy") is not None]  # fmt: skip
    fresh = {(r.model, r.defense, r.seed) for r in trained if r.key not in stale}
    return {
        r.key
        for r in converted
        if r.key in stale or (r.kind == "utility" and (r.model, r.defense, r.seed) not in fresh)
    }


def text_tables(records: Sequence[CellRecord], rounds: int, stale: set[str] | None = None) -> list[Table]:
    """One ranking per threat model of a text grid's cells (see the module docstring); with ``stale``
    (keys of stale cells), the label of each row they feed ends in the stale mark."""
    converted = ranking_records(records, rounds)
    reached = {(TEXT_SCOPE, key): [] for key in stale_ranked(records, converted, stale)} if stale else {}
    fed = [(TEXT_SCOPE, r) for r in converted]
    tables = []
    for threat, rows, active, header, body in threat_rankings(converted):
        header = [text_header(h) for h in header]
        body = [[_cell_text(c) for c in row] for row in body]
        note = _note_text(selection_note(rows, adapted_to_defense))
        note += (
            f" A model state's round: 0 untrained, {rounds} after FL training under the defense. ROUGE-2 "
            "and ROUGE-1: F-measures after pairing each batch's sequences with their reconstructions; the "
            "no-information guess: the public split's most frequent words at the text's true length."
        )
        if active:
            note += (
                " Caught by guard: the share of victims (each a client's batch of texts) whose guard refused "
                "the tampered model (they share nothing: the guess is scored for their texts) · the ROUGE-2 "
                "of the texts of the victims no guard refused."
            )
        note += _gate_warning(converted)
        title = f"Text · {threat[0].upper()}{threat[1:]} (catalogue {letters(converted, threat)})"
        table = Table(title, header, body, note)
        tables.append(marked_stale(table, stale_labels(fed, reached, threat)) if reached else table)
    return tables


#: the text attacks that read the defense's public parameters, how the note names them, and the defenses
#: they adapt to: DAGER's embedding step (one text per batch) and the imprint's row errors under known
#: noise or fp16 rounding (int8 is not read: a row labelled for it is not counted)
TEXT_ADAPTIVE = {
    "dager": ("dager (batch 1)", ("gaussian-noise", "laplacian-noise", "dp-sgd", "quantization")),
    "sequence-imprint": ("sequence-imprint", ("gaussian-noise", "laplacian-noise", "dp-sgd", "quantization")),
}


def adapted_to_defense(attack: str, defense: str) -> str | None:
    """How the note names the text ``attack`` where it adapts to ``defense`` (a row label; its rungs
    count as it), else None."""
    from leakshield.leaderboard.budgets import family

    name, defenses = TEXT_ADAPTIVE.get(attack, ("", ()))
    return name if family(defense) in defenses and "int8" not in defense else None


#: how far above chance the undefended model's accuracy must be for the utility gate to judge
GATE_MARGIN = 0.02


def _gate_warning(converted: Sequence[CellRecord]) -> str:
    """A sentence per model whose undefended model did not beat chance: the gate's floor is then chance
    itself and a defense that does not train passes it (it is not a proof of utility)."""
    out = ""
    for model in sorted({r.model for r in converted if r.kind == "utility" and r.model}):
        found = [r.metrics for r in converted
                 if r.kind == "utility" and r.model == model and r.defense == "none"]  # fmt: skip
        if not found or any("chance" not in m for m in found):
            continue
        accuracy = sum(m["accuracy"] for m in found) / len(found)
        chance = sum(m["chance"] for m in found) / len(found)
        if accuracy <= chance + GATE_MARGIN:
            out += (f" The undefended {model} did not train ({accuracy:.3f} against chance {chance:.3f}): "
                    "the utility gate cannot tell a defense that does not train from one that does, and "
                    "its ranks say nothing about utility; train longer (training.rounds) or on more text "
                    "(corpus.max_train).")  # fmt: skip
    return out


def text_header(header: str) -> str:
    """An image table's column name in the text section's words (the unit a text, the score ROUGE-2)."""
    header = header.replace("leaked victims", "leaked texts")
    return header.replace("SSIM", LABELS["score"]).replace("PSNR", LABELS["second"])


#: the images' wording in the selection note → the text section's (the unit is one text)
NOTE_WORDS = (
    ("Margin: max(SSIM − the victim's own no-information score, 0) per victim",
     "Margin: max(ROUGE-2 − the ROUGE-2 of the text's own no-information guess, 0) per text"),
    ("Leaked victims: margin > 0 and SSIM ≥ 0.6",
     "Leaked texts: ROUGE-2 ≥ 0.6 and above the ROUGE-2 of the text's own no-information guess"),
    ("leaked a victim", "leaked a text"),
    ("shows the victims its attack was chosen on", "shows the texts its attack was chosen on"),
    ("with fresh victims per seed", "with fresh texts per seed"),
    ("without a leaked victim", "without a leaked text"),
    ("leaks some victim of no defense", "leaks some text of no defense"),
    ("no victim reached SSIM 0.6 above its own guess", "no text reached ROUGE-2 0.6 above its own guess"),
    ("a victim leaked", "a text leaked"),
)  # fmt: skip


def _note_text(note: str) -> str:
    for image, text in NOTE_WORDS:
        note = note.replace(image, text)
    return note


def _cell_text(cell: str) -> str:
    """A ranking cell in the text section's words: its no-information level is the guess."""
    return cell.replace("≈ mean image", "≈ guess")
