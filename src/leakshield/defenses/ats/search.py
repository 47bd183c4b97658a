"""ATS's policy search (Gao et al., ATS, Algorithm 1): draw C_max random policies of at most 3 entries,
drop those that distort images too much (FSIM below a threshold, Sec. 4.3), keep those whose accuracy
score — on a model initialized afresh for each policy — passes T_acc, rank them by privacy score and keep
the n best that share no library entry (Sec. 4.5); their hybrid is the policy set clients train with
(Algorithm 2).

The privacy score needs a briefly trained model (the paper: 50 epochs on 10 % of the training data); it
is trained once from the given model and cached as an artifact. Every policy's scores are cached too,
keyed by the policy, the score settings, the data and the two models, so an interrupted search resumes
where it stopped and a larger C_max reuses the smaller one's work (the candidates are the same prefix).
"""

from __future__ import annotations

import copy
import csv
import hashlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pydantic
import torch
from torch import nn
from tqdm.auto import tqdm

from leakshield.artifacts import Artifact, ArtifactCache, FitKey, data_fingerprint
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.ats.candidates import (
    candidates,
    disjoint_best,
    mean_fsim,
    policy_seed,
    reinitialized,
)
from leakshield.defenses.ats.policy import MAX_OPS, Policy, PolicySet
from leakshield.defenses.ats.scores import (
    GradSimRule,
    accuracy_score,
    privacy_score,
    training_accuracy_score,
)
from leakshield.registry import Params


class PrivacyModelParams(Params):
    """The briefly trained model of the privacy score: SGD (momentum 0.9) on ``fraction`` of the search
    data for ``epochs`` epochs (the paper: 10 % of the training set, 50 epochs)."""

    fraction: float = pydantic.Field(default=1.0, gt=0, le=1)
    epochs: int = pydantic.Field(default=50, ge=0)
    lr: float = pydantic.Field(default=0.01, gt=0)
    batch_size: int = pydantic.Field(default=32, ge=1)


class SearchParams(Params):
    """candidates: C_max random policies of at most ``ops`` entries (k, 1–3; the paper 1500, its code
    samples 1600), drawn uniformly from that search space; exact_ops: always ``ops`` entries (an
    earlier leakshield default). fsim_threshold: drop policies whose mean FSIM (transformed vs original)
    is below it before scoring (Sec. 4.3 gives no value; 0.3 lies below every published policy on the
    embedded digits and CIFAR-10; None: no filter). keep: n, the size of the final hybrid set;
    disjoint: its policies share no library entry (Sec. 4.5). accuracy: ``training`` (mean training
    accuracy over 10 rounds, the experiments' score, Sec. 5.1) or ``jacobian`` (Eq. 12–14); reinit: a
    fresh random model M^r per policy (Algorithm 1, line 3; PyTorch's default initialization of each
    layer, seeded by the policy), else one shared copy of the given model. accuracy_threshold: T_acc
    (the paper: −85 for the Jacobian score on ResNet20-4, CIFAR-100; it depends on the model and the
    number of classes); without it the best ``accuracy_share`` of the candidates pass. include:
    policies always scored (e.g. the paper's). images_per_class (paper 10), points K (20), alpha/beta
    (0.7/0.3), gradsim (``global``: Eq. 5's one cosine; ``per-layer``: the authors' code): the privacy
    score. normalize: min–max normalize the mean and the variance across the candidates before
    combining them (as in the authors' ranking); else Eq. 10 on the raw values. vectorized: per-sample
    gradients in one pass (False: one gradient per point, faster than ``torch.func`` for some conv nets
    on CPU)."""

    candidates: int = pydantic.Field(default=100, ge=1)
    ops: int = pydantic.Field(default=MAX_OPS, ge=1, le=MAX_OPS)
    exact_ops: bool = False
    fsim_threshold: float | None = pydantic.Field(default=0.3, ge=0, le=1)
    keep: int = pydantic.Field(default=2, ge=1)
    disjoint: bool = True
    accuracy: Literal["jacobian", "training"] = "training"
    reinit: bool = True
    accuracy_threshold: float | None = None
    accuracy_share: float = pydantic.Field(default=0.5, gt=0, le=1)
    accuracy_batches: int = pydantic.Field(default=10, ge=1)
    include: list[str] = pydantic.Field(default_factory=list)
    images_per_class: int = pydantic.Field(default=10, ge=1)
    points: int = pydantic.Field(default=20, ge=2)
    alpha: float = pydantic.Field(default=0.7, ge=0, le=1)
    beta: float = pydantic.Field(default=0.3, ge=0, le=1)
    gradsim: GradSimRule = "global"
    normalize: bool = True
    vectorized: bool = True
    privacy_model: PrivacyModelParams = pydantic.Field(default_factory=PrivacyModelParams)

    @pydantic.field_validator("include")
    @classmethod
    def _valid_policies(cls, value: list[str]) -> list[str]:
        for text in value:
            Policy.parse(text)
        return value


@dataclass
class PolicyScore:
    """One evaluated candidate: its FSIM, its accuracy score (NaN when FSIM dropped it), whether it
    passed both filters, and its privacy score parts."""

    policy: str
    accuracy: float
    fsim: float = float("nan")
    passed: bool = False
    auc_mean: float = float("nan")
    auc_var: float = float("nan")
    privacy: float = float("nan")
    seconds: float = 0.0


@dataclass
class SearchResult:
    """Every candidate's scores (in draw order) and the chosen hybrid policy set."""

    scores: list[PolicyScore]
    chosen: PolicySet

    def write_csv(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        ranked = sorted(self.scores, key=lambda s: (not s.passed, s.privacy if s.passed else 0.0))
        chosen = {str(p) for p in self.chosen.policies}
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(
                [
                    "policy",
                    "fsim",
                    "accuracy_score",
                    "passed",
                    "auc_mean",
                    "auc_var",
                    "privacy_score",
                    "chosen",
                    "seconds",
                ]
            )
            for s in ranked:
                writer.writerow(
                    [
                        s.policy,
                        f"{s.fsim:.4g}",
                        f"{s.accuracy:.6g}",
                        int(s.passed),
                        f"{s.auc_mean:.6g}",
                        f"{s.auc_var:.6g}",
                        f"{s.privacy:.6g}",
                        int(s.policy in chosen),
                        f"{s.seconds:.3f}",
                    ]
                )


def model_fingerprint(model: nn.Module) -> str:
    """SHA-256 (16 hex digits) of a model's state dict (names, shapes and values)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
        digest.update(t.numpy().tobytes())
    return digest.hexdigest()[:16]


def sample_per_class(data: ImageSet, num_classes: int, per_class: int, seed: int) -> ImageSet:
    """``per_class`` images of every class present (seeded), classes in order."""
    gen = torch.Generator().manual_seed(seed)
    picks: list[int] = []
    for c in range(num_classes):
        idx = (data.y.cpu() == c).nonzero().flatten()
        picks += idx[torch.randperm(len(idx), generator=gen)[:per_class]].tolist()
    return data.subset(picks)


def train_privacy_model(
    model: nn.Module, data: ImageSet, info: DatasetInfo, params: PrivacyModelParams, seed: int
) -> nn.Module:
    """A copy of ``model`` trained with SGD on a seeded ``fraction`` of ``data``."""
    net = copy.deepcopy(model).train()
    device = next(net.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    subset = data.subset(
        torch.randperm(len(data), generator=gen)[: max(1, round(params.fraction * len(data)))]
    )
    x, y = info.normalize(subset.x.to(device)), subset.y.to(device)
    opt = torch.optim.SGD(net.parameters(), lr=params.lr, momentum=0.9)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(params.epochs):
            order = torch.randperm(len(x), generator=gen).to(device)
            for start in range(0, len(x), params.batch_size):
                batch = order[start : start + params.batch_size]
                loss = torch.nn.functional.cross_entropy(net(x[batch]), y[batch])
                opt.zero_grad()
                loss.backward()
                opt.step()
    return net.eval()


def cached_privacy_model(
    model: nn.Module, data: ImageSet, info: DatasetInfo, params: SearchParams, seed: int, cache: ArtifactCache
) -> nn.Module:
    key = FitKey(
        component="ats:privacy-model",
        params=params.privacy_model.model_dump(mode="json"),
        scope="public",
        data=data_fingerprint(data),
        seed=seed,
        context={"model": model_fingerprint(model)},
    )

    def fit() -> Artifact:
        trained = train_privacy_model(model, data, info, params.privacy_model, seed)
        return Artifact({k: v.detach().cpu() for k, v in trained.state_dict().items()})

    artifact = cache.get_or_fit(key, fit)
    net = copy.deepcopy(model)
    net.load_state_dict({k: v.to(next(model.parameters()).device) for k, v in artifact.tensors.items()})
    return net.eval()


def _normalized(values: list[float]) -> list[float]:
    lo, hi = min(values), max(values)
    return [0.0 if hi == lo else (v - lo) / (hi - lo) for v in values]


def search_policies(
    model: nn.Module,
    data: ImageSet,
    info: DatasetInfo,
    params: SearchParams,
    *,
    seed: int = 0,
    cache: ArtifactCache | None = None,
    progress: bool = False,
) -> SearchResult:
    """Algorithm 1 on ``data`` (the public split) for ``model`` (its random initialization scores
    accuracy; a briefly trained copy scores privacy)."""
    cache = cache or ArtifactCache()
    pool = candidates(params.include, params.candidates, params.ops, params.exact_ops, seed)
    random_model = copy.deepcopy(model).eval()
    private_model = cached_privacy_model(model, data, info, params, seed, cache)
    images = sample_per_class(data, info.num_classes, params.images_per_class, seed)
    context = {"random": model_fingerprint(random_model), "trained": model_fingerprint(private_model)}
    settings = params.model_dump(
        mode="json",
        exclude={
            "candidates",
            "keep",
            "disjoint",
            "include",
            "accuracy_threshold",
            "accuracy_share",
            "fsim_threshold",
            "normalize",
        },
    )

    def cached(kind: str, policy: Policy, compute: Any) -> dict[str, Any]:
        key = FitKey(
            f"ats:{kind}",
            {"policy": str(policy), **settings},
            "public",
            data_fingerprint(data),
            seed,
            context=context,
        )

        def fit() -> Artifact:
            start = time.perf_counter()
            values = compute()
            return Artifact({}, {**values, "seconds": time.perf_counter() - start})

        return dict(cache.get_or_fit(key, fit).metadata)

    def accuracy_of(policy: Policy) -> dict[str, Any]:
        net = reinitialized(random_model, policy_seed(policy, seed)) if params.reinit else random_model
        if params.accuracy == "jacobian":
            return {
                "accuracy": accuracy_score(
                    net, policy, data, info, batches=params.accuracy_batches, seed=seed
                )
            }
        return {"accuracy": training_accuracy_score(net, policy, images, info, seed=seed)}

    def privacy_of(policy: Policy) -> dict[str, Any]:
        score = privacy_score(
            private_model,
            policy,
            images,
            info,
            points=params.points,
            seed=seed,
            vectorized=params.vectorized,
            rule=params.gradsim,
        )
        return {"auc_mean": score.mean, "auc_var": score.var, "auc": score.auc.tolist()}

    results: list[PolicyScore] = []
    undistorted: list[PolicyScore] = []
    for policy in tqdm(pool, desc="ATS FSIM and accuracy scores", disable=not progress, leave=False):
        record = PolicyScore(str(policy), float("nan"))
        results.append(record)
        if params.fsim_threshold is not None:
            record.fsim = float(
                cached("fsim", policy, lambda p=policy: {"fsim": mean_fsim(p, images, seed)})["fsim"]
            )
            if record.fsim < params.fsim_threshold:
                continue
        meta = cached("accuracy", policy, lambda p=policy: accuracy_of(p))
        record.accuracy, record.seconds = float(meta["accuracy"]), float(meta["seconds"])
        undistorted.append(record)
    if not undistorted:
        raise ValueError(f"fsim_threshold: no candidate keeps a mean FSIM of {params.fsim_threshold:g}")
    threshold = params.accuracy_threshold
    if threshold is None:
        ordered = sorted((r.accuracy for r in undistorted), reverse=True)
        threshold = ordered[max(0, math.ceil(params.accuracy_share * len(ordered)) - 1)]
    passing = [r for r in undistorted if r.accuracy >= threshold]
    bar = tqdm(passing, desc="ATS privacy scores", disable=not progress)
    best: list[tuple[float, str]] = []
    for record in bar:
        meta = cached(
            "privacy", Policy.parse(record.policy), lambda p=record.policy: privacy_of(Policy.parse(p))
        )
        record.passed = True
        record.auc_mean, record.auc_var = float(meta["auc_mean"]), float(meta["auc_var"])
        record.seconds += float(meta["seconds"])
        best = sorted([*best, (record.auc_mean, record.policy)])[: params.keep]
        bar.set_postfix_str("best AUC " + ", ".join(f"{p} {v:.3f}" for v, p in best))
    if not passing:
        raise ValueError(f"accuracy_threshold: no candidate reaches {threshold:g}")
    means = [r.auc_mean for r in passing]
    variances = [r.auc_var for r in passing]
    if params.normalize:
        means, variances = _normalized(means), _normalized(variances)
    for record, m, v in zip(passing, means, variances, strict=True):
        record.privacy = params.alpha * m + params.beta * v
    ranked = sorted(passing, key=lambda r: r.privacy)
    kept = disjoint_best([r.policy for r in ranked], params.keep, params.disjoint)
    return SearchResult(results, PolicySet(tuple(Policy.parse(text) for text in kept)))
