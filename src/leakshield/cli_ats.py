"""``leakshield ats``: ATS's policy search (Algorithm 1) from a YAML config, and the transformation
library. The search writes the chosen hybrid policy set and every evaluated policy's scores (CSV)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pydantic

from leakshield.cli_common import add_common_options, set_threads
from leakshield.errors import ConfigError, LeakshieldError
from leakshield.experiment.yaml_files import file_name, read_yaml
from leakshield.registry import format_validation_error

EXAMPLE = """\
name: ats-search-resnet20
seed: 0
dataset: {name: digits, size: 32}        # the search sees the public split only
model: {name: resnet20}
search: {candidates: 100, keep: 2, images_per_class: 2, points: 20}
"""


class SearchConfig(pydantic.BaseModel):
    """A search: the dataset (its public split is searched on), the model the policies are for, the
    search settings (:class:`~leakshield.defenses.ats.search.SearchParams`) and the seed."""

    model_config = pydantic.ConfigDict(extra="forbid", allow_inf_nan=False)
    name: str = "ats-search"
    seed: int = pydantic.Field(default=0, ge=0, lt=2**63)  # torch's seeds are 64-bit
    dataset: dict[str, Any] = pydantic.Field(default_factory=lambda: {"name": "digits"})
    model: dict[str, Any] = pydantic.Field(default_factory=lambda: {"name": "resnet20"})
    search: dict[str, Any] = pydantic.Field(default_factory=dict)

    @pydantic.field_validator("name")
    @classmethod
    def _name_is_a_file_name(cls, value: str) -> str:
        return file_name(value, "the default output folder is runs/<name>")

    @pydantic.field_validator("model", "dataset")
    @classmethod
    def _named(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(value.get("name"), str):
            raise ValueError(
                "needs a 'name' (a registered model or dataset: leakshield list models|datasets)"
            )
        return value


def add_parser(sub: Any) -> None:
    ats = sub.add_parser(
        "ats",
        help="ATS: search transformation policies, or show the 50 transformations",
        description="Automatic Transformation Search (Gao et al.). 'leakshield ats search CONFIG' "
        "runs Algorithm 1 (random policies, accuracy-score filter, privacy-score ranking) on the public "
        "split and writes policies.txt (the hybrid set to put in an 'ats' defense), scores.csv and "
        "summary.json; every policy's scores are cached, so an interrupted search resumes. "
        "'leakshield ats library' lists the transformations.",
        epilog="Example config:\n" + EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = ats.add_subparsers(dest="ats_command", metavar="ACTION", parser_class=type(ats))
    search = actions.add_parser("search", help="search policies from a YAML config")
    search.add_argument("config", type=Path, help="search config (YAML); see 'leakshield ats --help'")
    search.add_argument("--out", type=Path, default=None, help="output folder (default: runs/<name>)")
    search.add_argument("--data-root", type=Path, default=None, help="folder with the dataset's files")
    add_common_options(search)
    actions.add_parser("library", help="list the 50 transformations (index, operation, magnitude)")


def load_search_config(path: Path) -> SearchConfig:
    data = read_yaml(path, "search config")  # the one reader of every command (one line per problem)
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    if not data:  # an empty file is more likely a mistake than a request for the full default search
        raise ConfigError(f"{path}: the search config is empty; write at least 'search: {{}}' to run the "
                          "full default search (ATS's 100 candidates, hours on a CPU)")  # fmt: skip
    try:
        return SearchConfig(**data)
    except (pydantic.ValidationError, TypeError) as exc:
        detail = format_validation_error(exc) if isinstance(exc, pydantic.ValidationError) else str(exc)
        raise ConfigError(f"{path}: {detail}") from None


def cmd_ats(args: argparse.Namespace) -> int:
    if args.ats_command == "library":
        from leakshield.defenses.ats import describe_library

        print("\n".join(describe_library()))
        return 0
    if args.ats_command != "search":
        raise ConfigError("ats: choose an action: search, library")
    return _search(args)


def _search(args: argparse.Namespace) -> int:
    from leakshield.data import load_dataset
    from leakshield.defenses.ats import SearchParams, search_policies
    from leakshield.experiment.code_cache import CodeKeyedCache as ArtifactCache
    from leakshield.experiment.pipeline import resolve_device
    from leakshield.models import MODELS, create_model

    config = load_search_config(args.config)
    try:
        params = SearchParams(**config.search)
    except pydantic.ValidationError as exc:
        raise ConfigError(f"{args.config}: {format_validation_error(exc, 'search')}") from None
    out = args.out or Path("runs") / config.name
    if out.exists() and not out.is_dir():  # say so now, not after the whole search
        raise ConfigError(f"--out {out} is a file; the search writes a folder (policies.txt, scores.csv)")
    set_threads(args.threads, args.matmul_precision)
    dataset = dict(config.dataset)
    name = dataset.pop("name", "digits")
    root = args.data_root or dataset.pop("root", None)
    splits = load_dataset(name, dataset, root=root)
    model_params = dict(config.model)
    model_name = model_params.pop("name")
    try:
        MODELS.validate(model_name, model_params)
    except LeakshieldError as exc:
        raise ConfigError(f"{args.config}: model: {exc}") from None
    device = resolve_device(args.device)
    model = create_model(
        model_name,
        model_params,
        in_shape=splits.info.shape,
        num_classes=splits.info.num_classes,
        seed=config.seed,
    ).to(device)
    out.mkdir(parents=True, exist_ok=True)
    cache = ArtifactCache(args.cache_dir)
    cache.ensure_usable()
    start = time.perf_counter()
    result = search_policies(
        model,
        splits.public.to(device),
        splits.info,
        params,
        seed=config.seed,
        cache=cache,
        progress=not args.quiet,
    )
    elapsed = time.perf_counter() - start
    result.write_csv(out / "scores.csv")
    (out / "policies.txt").write_text(f"{result.chosen}\n")
    computed = [s for s in result.scores if s.passed]
    per_policy = sum(s.seconds for s in result.scores) / max(1, len(result.scores))
    summary = {
        "policies": str(result.chosen),
        "candidates": len(result.scores),
        "passed_accuracy": len(computed),
        "seconds": elapsed,
        "seconds_per_policy_when_computed": per_policy,
        "model": config.model,
        "dataset": config.dataset,
        "search": params.model_dump(mode="json"),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(
        f"{len(result.scores)} policies scored ({len(computed)} passed the accuracy score) in "
        f"{elapsed:.1f} s; {per_policy:.2f} s per policy when computed (cached scores are reused)"
    )
    print(f"policy set: {result.chosen} → {out / 'policies.txt'}; scores: {out / 'scores.csv'}")
    return 0
