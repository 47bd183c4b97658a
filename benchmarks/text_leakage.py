"""What one FedSGD update of a small untrained BERT leaks about its batch of Rotten Tomatoes reviews: the
bag of words and TAG's reconstruction, at batch 1, 4 and 16, undefended, under Gaussian noise on the
update and under DP-SGD; ROUGE-1/2 (after Hungarian pairing), the bag's recall and precision, and the
seconds per victim, with the no-information guess beside them.

The model: 2 layers, width 64, 2 heads, a 2,000-id WordPiece tokenizer trained on the public split
(movies disjoint from the clients'), reviews cut to 32 tokens; the victims are the train split's first
reviews, in order. Each defense runs through leakshield's defense pipeline (``gaussian-noise`` on the
release, ``dpsgd``'s clipped per-sample gradients with noise). Under noise the bag of words and the
length TAG reads keep the rows noise alone would not explain (a χ² test; the attacker knows the
defense's parameters); undefended, any non-zero row. The bag is scored on words (``[CLS]``, ``[SEP]``
left out); its precision is undefined when it is empty (counted in ``bags_empty``). TAG knows a batch's
labels beyond a batch of one (a single label leaks) and the length it reads from the update (the longest
the model takes, 32, when it reads fewer than 3 positions); the no-information guess gets the same length.
Results go to a JSON file, one entry per cell (defense, batch, TAG steps, victims), and a rerun skips
the cells already there.

    python benchmarks/text_leakage.py --corpus rotten_tomatoes_corpus_full.csv.bz2 --out runs/text.json
        [--iterations 300] [--victims 4] [--batches 1,4,16] [--defenses none,noise 1e-3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses import DefensePipeline
from leakshield.defenses.base import ClientContext
from leakshield.errors import LeakshieldError
from leakshield.text import (
    TextClassifier,
    bag_of_words,
    deduplicated,
    embedding_parameter,
    no_information_text,
    read_rotten_tomatoes_csv,
    split_by_group,
    tag_attack,
    text_scores,
    train_tokenizer,
)
from leakshield.text.tag import leaked_length
from leakshield.text.tokenizer import PAD, SPECIALS

WORDS = len(SPECIALS)  # ids from here on are words and word pieces

#: name → (defense entries, the noise's standard deviation per entry of a batch's update, or None)
DEFENSES = {
    "none": ([], lambda batch: None),
    "noise 1e-3": ([{"name": "gaussian-noise", "params": {"sigma": 1e-3}}], lambda batch: 1e-3),
    "noise 1e-2": ([{"name": "gaussian-noise", "params": {"sigma": 1e-2}}], lambda batch: 1e-2),
    # DP-SGD: σ·C on the sum of B clipped per-sample gradients, divided by B
    "dp-sgd 1.1": (
        [{"name": "dpsgd", "params": {"noise_multiplier": 1.1, "clip": 1.0}}],
        lambda batch: 1.1 / batch,
    ),
}


def update_of(model, ids, labels, entries, seed: int) -> dict[str, torch.Tensor]:
    """The client's released update of one minibatch through the defense pipeline."""
    placeholder = ImageSet(torch.zeros(len(ids), 1, 1, 1), labels)  # the text defenses read no pixels
    info = DatasetInfo("rotten-tomatoes", (1, 1, 1), 2, (0.0,), (1.0,))
    context = ClientContext(0, 0, placeholder, info, torch.Generator().manual_seed(seed), seed=seed)
    pipeline = DefensePipeline.from_config(entries)
    torch.manual_seed(seed)  # DP-SGD draws its noise from the global generator
    gradient = pipeline.gradient(model, ids, labels, context.at_step(placeholder, 0))
    return pipeline.release_hook(gradient, context)


def cell(name: str, batch: int, victims: int, iterations: int, setting) -> dict:
    tokenizer, train, public_ids, model = setting
    entries, noise_of = DEFENSES[name]
    rows, bag_recall, bag_precision, seconds, length_read = [], [], [], [], []
    for v in range(victims):
        texts = train.texts[v * batch : (v + 1) * batch]
        ids = tokenizer.encode(texts, 32)
        labels = torch.tensor(train.labels[v * batch : (v + 1) * batch])
        update = update_of(model, ids, labels, entries, seed=v)
        noise = noise_of(batch)
        words = {
            i
            for i in bag_of_words(update[embedding_parameter(model)], noise_std=noise).tolist()
            if i >= WORDS
        }
        truth = {i for i in ids.flatten().tolist() if i >= WORDS}  # words: no [CLS], [SEP] or [PAD]
        bag_recall.append(len(words & truth) / len(truth))
        if words:
            bag_precision.append(len(words & truth) / len(words))
        start = time.perf_counter()
        known = None if batch == 1 else labels
        try:
            read = leaked_length(model, update, noise)
        except LeakshieldError:  # no position row above the noise
            read = 0
        length_read.append(read == int((ids != PAD).sum(1).max()))
        length = read if read >= 3 else model.max_length  # nothing read: the longest the model takes
        result = tag_attack(
            model, update, batch=batch, labels=known, iterations=iterations, seed=v, length=length
        )
        seconds.append((time.perf_counter() - start) / batch)
        decoded = [tokenizer.decode(r) for r in result.ids]
        true_texts = [tokenizer.decode(r) for r in ids]
        rows += text_scores(decoded, true_texts)
        guess = no_information_text(public_ids, result.length, tokenizer)  # the length TAG read
        for k in range(batch):
            rows[-batch + k]["floor_rouge1"] = text_scores([guess], [true_texts[k]])[0]["rouge1"]
    mean = {key: statistics.fmean(r[key] for r in rows) for key in rows[0]}
    return {"defense": name, "batch": batch, "victims": victims, "sequences": len(rows),
            "iterations": iterations,
            "tag_rouge1": mean["rouge1"], "tag_rouge2": mean["rouge2"], "tag_exact": mean["exact"],
            "floor_rouge1": mean["floor_rouge1"], "bag_recall": statistics.fmean(bag_recall),
            "bag_precision": statistics.fmean(bag_precision) if bag_precision else None,
            "bags_empty": victims - len(bag_precision), "lengths_read": statistics.fmean(length_read),
            "seconds_per_sequence": statistics.fmean(seconds),
            "rouge1_each": [r["rouge1"] for r in rows]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True, help="rotten_tomatoes_corpus_full.csv.bz2")
    parser.add_argument("--out", type=Path, default=Path("runs/text_leakage.json"))
    parser.add_argument("--iterations", type=int, default=300, help="TAG's steps")
    parser.add_argument("--victims", type=int, default=4, help="batches per cell at batch 1 (fewer above)")
    parser.add_argument("--batches", default="1,4,16")
    parser.add_argument("--defenses", default=",".join(DEFENSES))
    args = parser.parse_args()
    corpus, _ = deduplicated(read_rotten_tomatoes_csv(args.corpus))
    splits = split_by_group(corpus, 0.2, 0.2, seed=0)
    tokenizer = train_tokenizer(splits.public.texts, "wordpiece", 2000)
    model = TextClassifier("bert", tokenizer.vocab_size, 32, 2, width=64, heads=2, seed=0).eval()
    setting = (tokenizer, splits.train, tokenizer.encode(splits.public.texts, 32), model)
    done = json.loads(args.out.read_text()) if args.out.is_file() else []
    for name in args.defenses.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            victims = max(1, args.victims // batch) if batch > 1 else args.victims
            key = (name, batch, args.iterations, victims)
            if any((d["defense"], d["batch"], d["iterations"], d["victims"]) == key for d in done):
                continue
            found = cell(name, batch, victims, args.iterations, setting)
            done.append(found)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(done, indent=1))
            print(json.dumps({k: v for k, v in found.items() if k != "rouge1_each"}), flush=True)


if __name__ == "__main__":
    main()
