"""``leakshield membership``: would a server learn who was in a client's data? Runs the membership game
of a preset or a YAML config (every defense row on every seed, kept as it finishes: a rerun resumes),
ranks the defenses per threat model on TPR at a low FPR and writes the section (Markdown, HTML with ROC
curves on log axes, JSON)."""

from __future__ import annotations

import argparse
import time
from importlib import resources
from pathlib import Path
from typing import Any

import pydantic
import yaml

from leakshield.cli_common import add_common_options, set_threads
from leakshield.errors import ConfigError
from leakshield.experiment.yaml_files import read_yaml
from leakshield.registry import format_validation_error

EXAMPLE = """\
rounds: 10
seeds: [0, 1, 2]
rows:
  - {label: none}
  - {label: dp-sgd σ 1, stack: [{name: dp-sgd, noise_multiplier: 1.0}]}
  - {label: secure aggregation, secure_aggregation: true}
"""


def presets() -> dict[str, dict[str, Any]]:
    text = resources.files("leakshield").joinpath("configs/membership.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["presets"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "membership",
        help="membership inference: would a server learn who was in a client's data? (ranked defenses)",
        description="The membership game on a federation: each client's pool of records is split at random "
        "into members (trained on) and non-members; the server attacks every client with FedMIA "
        "(Zhu et al., CVPR 2025), the loss threshold (Yeom et al.) and the gradient attacks of Li et al., "
        "each at the first and last round or over all rounds. Each defense's strongest attack is chosen "
        "on half the clients and measured on the other half; TPR at 1 % FPR over seeds ranks the "
        "defenses against no defense (paired t, Holm), per threat model, with accuracy, ε and an audit of "
        "ε against the measured ROC. Writes OUT/membership.md, .html, .json and the ROC figures; every "
        "(defense, seed) is kept under OUT/runs, so an interrupted run resumes.",
        epilog="Example config (fields: leakshield membership --print-config):\n" + EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", type=Path, nargs="?", help="a YAML membership config (else --preset)")
    p.add_argument(
        "--preset",
        choices=sorted(presets()),
        help="a preset of configs/membership.yaml (quick: no defense and 4 others, 3 seeds, 10 rounds, "
        "about 2 min on 2 CPU cores; standard: no defense and 12 others, 6 seeds, 30 rounds, about 33 min)",
    )
    p.add_argument("--out", type=Path, default=None, help="output folder (default: runs/membership-<preset>)")
    p.add_argument("--seeds", type=int, default=None, help="use the first N seeds of the config")
    p.add_argument("--data-root", type=Path, default=None, help="folder with the dataset's files")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan and a time estimate (one- and two-round probes per defense), keep nothing",
    )
    p.add_argument("--print-config", action="store_true", help="print the full config that would run")
    add_common_options(p)


def load_config(args: argparse.Namespace) -> tuple[Any, str, str]:
    """The validated config, the command that reproduces it and where it came from."""
    from leakshield.membership.config import MembershipConfig

    if (args.config is None) == (args.preset is None):
        raise ConfigError("membership: give a config file or --preset (quick, standard), not both")
    if args.preset:
        data, source = dict(presets()[args.preset]), f"--preset {args.preset}"
    else:
        data = read_yaml(args.config, "membership config")
        if not isinstance(data, dict):
            raise ConfigError(f"{args.config}: expected a mapping of membership settings (see --help)")
        source = str(args.config)
    if args.data_root is not None:
        data["data_root"] = str(args.data_root)
    if args.seeds is not None:
        if args.seeds < 1:
            raise ConfigError(f"--seeds {args.seeds}: must be at least 1")
        seeds = data.get("seeds", list(range(6)))
        if not isinstance(seeds, list):
            raise ConfigError(f"{source}: seeds: {seeds!r} is not a list of integers")
        data["seeds"] = seeds[: args.seeds]
    try:
        config = MembershipConfig(**data)
    except pydantic.ValidationError as exc:
        raise ConfigError(f"{source}: {format_validation_error(exc)}") from None
    _check_components(config, source)
    command = f"leakshield membership {source}" + (f" --seeds {args.seeds}" if args.seeds else "")
    return config, command, source


def _check_components(config: Any, source: str) -> None:
    """The model and every defense: one line naming what is wrong."""
    from leakshield.defenses.base import DEFENSES
    from leakshield.errors import LeakshieldError
    from leakshield.models import MODELS

    try:
        MODELS.validate(config.model.name, config.model.params)
        for row in config.rows:
            for entry in row.entries:
                DEFENSES.validate(entry["name"], entry["params"])
    except LeakshieldError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _check_data(config: Any, source: str) -> None:
    """The data is there and holds the pools, before any work: one line naming what is wrong."""
    from leakshield.data import load_dataset
    from leakshield.errors import LeakshieldError

    try:
        train = len(load_dataset(config.dataset, config.dataset_params, root=config.data_root).train)
    except LeakshieldError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    pooled = config.clients * config.records_per_client
    if pooled > train:
        raise ConfigError(f"{source}: clients × records_per_client = {pooled} exceeds the {train} "
                          f"training records of {config.dataset}")  # fmt: skip


def cmd_membership(args: argparse.Namespace) -> int:
    from leakshield.experiment.code_cache import CodeKeyedCache
    from leakshield.experiment.pipeline import resolve_device
    from leakshield.membership.grid import estimate_seconds, run_grid
    from leakshield.membership.report import write

    config, command, source = load_config(args)
    if args.print_config:
        print(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, allow_unicode=True), end="")
        return 0
    _check_data(config, source)
    out = args.out or Path("runs") / f"membership-{args.preset or Path(args.config).stem}"
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; membership writes a folder")
    set_threads(args.threads, args.matmul_precision)
    device = str(resolve_device(args.device))
    cache = CodeKeyedCache(args.cache_dir)
    if args.dry_run:
        seconds = estimate_seconds(config, device=device, cache=cache)
        plan = f"{len(config.rows)} defenses × {len(config.seeds)} seeds, {config.rounds} rounds"
        print(f"membership: {plan}, {config.clients} clients; estimated {seconds / 60:.1f} min here "
              "(one- and two-round probes per defense)")  # fmt: skip
        return 0
    started = time.perf_counter()
    runs = run_grid(config, out, device=device, progress=not args.quiet, cache=cache)
    written = write(config, runs, out, command)
    print(f"membership: wrote {', '.join(str(p) for p in written if p.suffix != '.png')} "
          f"in {time.perf_counter() - started:.0f} s")  # fmt: skip
    print((out / "membership.md").read_text(encoding="utf-8").split("\n## ", 1)[-1][:4000])
    return 0
