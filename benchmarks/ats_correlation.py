"""ATS Fig. 5 (Gao et al., CVPR 2021): does the privacy score S_pri (Eq. 10) predict how well the attack
does? The paper: Pearson r = 0.755 between S_pri and the PSNR of IG (2,500 steps) over 100 random
policies, S_pri from 10 images per class.

For each random policy (the same seeded sequence on every run):

- S_pri with both GradSim rules: Eq. 5's one cosine (``global``, the paper) and the authors' code's
  per-layer cosine (``per-layer``), on the briefly trained model the search uses, 10 images per class;
- IG (signed Adam, cosine, ``--iterations`` steps) on ``--victims`` victims, batch 1, labels known, eval
  mode, on that same model; its PSNR against the *transformed* image the attack sees (the paper's);
- the PSNR of a trivial reconstruction against the same transformed images: the public split's mean
  image (leakshield's no-information guess). A policy that darkens or flattens images raises any dark
  guess's PSNR, attack or not; the partial correlation of S_pri and the attack's PSNR with this one held
  fixed says whether S_pri predicts more than that.

Each policy's result is one JSON line of ``--out`` (``--shard I/N``: of ``OUT-I-of-N.jsonl`` beside it,
one thread each), written as it finishes, so an interrupted run resumes where it stopped (rerun the same
command; a policy any shard finished is not redone). ``--dry-run`` times one policy (S_pri in full, IG
for ``--dry-steps`` steps) and prints how many policies fit in ``--minutes``. The rows (Pearson's r, the
partial r and Spearman's ρ, each with its 95 % interval, and the verdicts by the reproductions page's
rule) follow a run without shards, and ``--rows`` prints them from every file once all have finished:

    python benchmarks/ats_correlation.py --dry-run
    python benchmarks/ats_correlation.py --policies N --out runs/ats-fig5.jsonl
    python benchmarks/ats_correlation.py --policies N --shard 0/2 &   # and 1/2: two cores
    python benchmarks/ats_correlation.py --policies N --rows
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from pathlib import Path

import torch

from leakshield.artifacts import ArtifactCache
from leakshield.attacks import create_attack
from leakshield.data import load_dataset
from leakshield.defenses import DefensePipeline, create_defense
from leakshield.defenses.ats import privacy_score
from leakshield.defenses.ats.policy import random_policy
from leakshield.defenses.ats.search import SearchParams, cached_privacy_model, sample_per_class
from leakshield.fl import HonestClient, LocalTraining, ThreatModel, observe_victim
from leakshield.leaderboard.correlation import partial, pearson, spearman
from leakshield.leaderboard.verdicts import Claim, interval_row
from leakshield.metrics import match_reconstructions, psnr
from leakshield.models import create_model

RULES = ("global", "per-layer")
#: Fig. 5's claim: r 0.755, a correlation counts as the paper's size down to 0.655; the null is none
CLAIM = Claim(0.755, 0.1, 0.0, one_sided=True)
SETTINGS = ("model", "size", "victims", "iterations", "images_per_class", "seed")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="resnet20")
    parser.add_argument("--size", type=positive, default=16)
    parser.add_argument("--policies", type=positive, default=20, help="random policies to score and attack")
    parser.add_argument("--victims", type=positive, default=16, help="victims attacked per policy")
    parser.add_argument("--iterations", type=positive, default=2500, help="IG steps (the paper: 2,500)")
    parser.add_argument(
        "--images-per-class", type=positive, default=10, help="S_pri's images (the paper: 10)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/ats-fig5.jsonl"), help="results, resumable")
    parser.add_argument("--dry-run", action="store_true", help="time one policy and estimate the count")
    parser.add_argument("--dry-steps", type=positive, default=50, help="IG steps timed by --dry-run")
    parser.add_argument("--minutes", type=float, default=60.0, help="the budget --dry-run sizes against")
    parser.add_argument("--rows", action="store_true", help="print the rows of --out and stop")
    parser.add_argument(
        "--threads", type=positive, default=None, help="torch threads (default: 1 with shards, else torch's)"
    )
    parser.add_argument(
        "--shard",
        type=shard,
        default=(0, 1),
        help="I/N: run the policies k with k mod N = I (N one-thread processes use N cores)",
    )
    return parser.parse_args()


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise argparse.ArgumentTypeError(f"{text!r}; give I/N with 0 ≤ I < N, e.g. 0/2")
    return int(index), int(count)


class Fig5:
    """The fixed parts of the measurement: model, score images, victims and the policy sequence."""

    def __init__(self, args: argparse.Namespace) -> None:
        torch.manual_seed(args.seed)
        data = load_dataset("digits", {"size": args.size})
        self.info = data.info
        params = SearchParams(images_per_class=args.images_per_class)
        model = create_model(
            args.model, {}, in_shape=self.info.shape, num_classes=self.info.num_classes, seed=args.seed
        )
        self.model = cached_privacy_model(model, data.public, self.info, params, args.seed, ArtifactCache())
        self.images = sample_per_class(data.public, self.info.num_classes, params.images_per_class, args.seed)
        self.guess = data.public.x.mean(dim=0, keepdim=True)  # the trivial reconstruction
        gen = torch.Generator().manual_seed(args.seed + 7)
        order = torch.randperm(len(data.train), generator=gen)[: args.victims]
        self.victims = [data.train.subset([i]) for i in order]
        self.gen, self.drawn = gen, []
        self.seed = args.seed

    def policy(self, k: int):
        """The k-th random policy of the sequence (the same k gives the same policy on every run)."""
        while len(self.drawn) <= k:
            self.drawn.append(random_policy(self.gen))
        return self.drawn[k]

    def scores(self, policy) -> dict[str, float]:
        return {
            rule: privacy_score(
                self.model, policy, self.images, self.info, seed=self.seed, rule=rule
            ).combined()
            for rule in RULES
        }

    def attack(self, k: int, policy, iterations: int) -> tuple[list[float], list[float]]:
        """Per victim: IG's PSNR and the trivial guess's PSNR, both against the transformed image."""
        pipe = DefensePipeline([create_defense("ats", {"policies": str(policy)})])
        views, truths = [], []
        for v, batch in enumerate(self.victims):
            client = HonestClient(0, batch, LocalTraining(), pipe, self.info, model_mode="eval")
            seen = observe_victim(
                [self.model],
                batch,
                client,
                threat=ThreatModel(labels_known=True),
                generators=[torch.Generator().manual_seed(1000 * k + v)],
            )
            views.append(seen.views[0])
            truths.append(seen.trace.defended_x)
        attack = create_attack("adam-cosine", {"iterations": iterations})
        recs = attack.reconstruct_many(views, seeds=[1000 * k + v for v in range(len(views))])
        ig, trivial = [], []
        for rec, truth in zip(recs, truths, strict=True):
            matched = rec.images[match_reconstructions(rec.images, truth, "ssim")]
            ig.append(float(psnr(matched, truth).mean()))
            trivial.append(float(psnr(self.guess.expand_as(truth), truth).mean()))
        return ig, trivial


def shard_file(out: Path, index: int, count: int) -> Path:
    """Where shard ``index`` of ``count`` writes (``out`` itself when there is one shard)."""
    return out if count == 1 else out.with_name(f"{out.stem}-{index}-of-{count}{out.suffix}")


def load(path: Path, settings: dict, repair: bool = False) -> list[dict]:
    """The finished policies of one file. A last line cut short by a crash (unparsable, or without its
    newline) is left out, and with ``repair`` cut from the file, so that the next entry starts afresh."""
    if not path.is_file():
        return []
    lines = path.read_text().splitlines(keepends=True)
    try:
        entries = [json.loads(line) for line in lines[:-1]]
    except json.JSONDecodeError as error:
        raise SystemExit(f"{path}: a damaged line before the last ({error}); pass another --out") from None
    with contextlib.suppress(json.JSONDecodeError):  # a last line cut short by a crash: left out
        entries += [json.loads(lines[-1])] if lines and lines[-1].endswith("\n") else []
    if lines and len(entries) < len(lines) and repair:
        path.write_text("".join(lines[:-1]))
    if entries and entries[0] != {"settings": settings}:
        raise SystemExit(f"{path}: written with other settings {entries[0]}; pass another --out")
    return entries[1:]


def load_all(out: Path, settings: dict) -> list[dict]:
    """Every finished policy of ``out`` and its shards' files, in policy order (each policy once)."""
    found = {}
    for path in [out, *sorted(out.parent.glob(f"{out.stem}-*-of-*{out.suffix}"))]:
        for entry in load(path, settings):
            found.setdefault(entry["k"], entry)
    return [found[k] for k in sorted(found)]


def rows(done: list[dict], out: Path, args: argparse.Namespace) -> None:
    n = len(done)
    if n < 5:
        raise SystemExit(f"{out}: {n} policies; the rows need at least 5")
    psnrs = [d["psnr"] for d in done]
    trivial = [d["trivial_psnr"] for d in done]
    if [d["k"] for d in done] != list(range(n)):
        missing = sorted(set(range(max(d["k"] for d in done) + 1)) - {d["k"] for d in done})
        raise SystemExit(f"{out}: policies {missing} are not finished (a shard still running?)")
    options = (
        f"--victims {args.victims} --iterations {args.iterations} --images-per-class {args.images_per_class}"
    )
    command = f"`python benchmarks/ats_correlation.py --policies {n} {options}`"
    where = f"{args.victims} victims, {args.iterations} steps, {args.images_per_class} images per class"
    print(f"{n} policies; {where}")
    print(
        f"PSNR of IG vs transformed: {min(psnrs):.2f}–{max(psnrs):.2f} dB "
        f"(mean {statistics.fmean(psnrs):.2f})"
    )
    print(f"PSNR of the trivial guess: {min(trivial):.2f}–{max(trivial):.2f} dB; r(trivial, IG) = "
          f"{pearson(trivial, psnrs).r:.3f}")  # fmt: skip
    names = {"global": "Eq. 5's single cosine", "per-layer": "the code's per-layer cosine"}
    for rule in RULES:
        s_pri = [d["s_pri"][rule] for d in done]
        print(f"S_pri ({names[rule]}) spans {min(s_pri):.3f}–{max(s_pri):.3f}")
    header = ("claim (paper)", "command", "measured (95 % interval, n)", "rule: paper ± tolerance · null")
    print("| " + " | ".join((*header, "verdict")) + " |\n|---|---|---|---|---|")
    for rule in RULES:
        s_pri, name = [d["s_pri"][rule] for d in done], names[rule]
        for label, found, kind in (
            ("Pearson r", pearson(s_pri, psnrs), "policies"),
            ("partial r, the trivial guess's PSNR held fixed", partial(s_pri, psnrs, trivial), "policies"),
            ("Spearman ρ", spearman(s_pri, psnrs), "policies; Bonett–Wright interval"),
        ):
            claim = (
                f"S_pri predicts IG's PSNR against the transformed image (Fig. 5: r 0.755); {label}, "
                f"GradSim by {name}"
            )
            print(interval_row(claim, command, CLAIM, found.r, found.interval, n, f"{kind}; {where}"))


def main() -> None:
    args = parse()
    index, count = args.shard
    if args.threads or count > 1:
        torch.set_num_threads(args.threads or 1)
    settings = {k: getattr(args, k) for k in SETTINGS}
    if args.rows:
        try:
            rows(load_all(args.out, settings), args.out, args)
        except ValueError as error:  # a constant or non-finite series: no correlation to state
            raise SystemExit(f"{args.out}: {error}") from None
        return
    path = shard_file(args.out, index, count)
    done = load(path, settings, repair=True)
    fig = Fig5(args)
    if args.dry_run:
        start = time.perf_counter()
        fig.scores(fig.policy(0))
        scoring = time.perf_counter() - start
        start = time.perf_counter()
        fig.attack(0, fig.policy(0), args.dry_steps)
        attacking = (time.perf_counter() - start) * args.iterations / args.dry_steps
        per_policy = scoring + attacking
        print(
            f"one policy: S_pri (both rules) {scoring:.0f} s + IG {attacking:.0f} s (from {args.dry_steps} "
            f"steps × {args.iterations / args.dry_steps:.0f}) = {per_policy / 60:.1f} min on "
            f"{torch.get_num_threads()} thread(s); {int(args.minutes * 60 // per_policy)} policies fit in "
            f"{args.minutes:.0f} min"
        )
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if not done:
        path.write_text(json.dumps({"settings": settings}) + "\n")
    finished = {d["k"] for d in load_all(args.out, settings)}  # by any shard, or by a run without
    for k in range(args.policies):
        policy = fig.policy(k)  # drawn for every k, so that each shard sees the same sequence
        if k % count != index or k in finished:
            continue
        start = time.perf_counter()
        s_pri = fig.scores(policy)
        ig, trivial = fig.attack(k, policy, args.iterations)
        entry = {
            "k": k,
            "policy": str(policy),
            "s_pri": s_pri,
            "psnr": statistics.fmean(ig),
            "trivial_psnr": statistics.fmean(trivial),
            "psnr_victims": ig,
            "seconds": round(time.perf_counter() - start, 1),
            "threads": torch.get_num_threads(),
        }
        with path.open("a") as handle:
            handle.write(json.dumps(entry) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        done.append(entry)
        print(
            f"[{k + 1}/{args.policies}] {policy!s:<10} S_pri {s_pri['global']:.4f} / "
            f"{s_pri['per-layer']:.4f}  IG {entry['psnr']:6.2f} dB  trivial {entry['trivial_psnr']:6.2f} dB  "
            f"({entry['seconds']:.0f} s)",
            flush=True,
        )
    if count == 1:
        rows(load_all(args.out, settings), args.out, args)
    else:
        print(f"shard {index}/{count} done; the rows: rerun with --rows once every shard has finished")


if __name__ == "__main__":
    main()
