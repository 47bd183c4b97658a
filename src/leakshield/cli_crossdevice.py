"""``leakshield cross-device``: DP-FedAvg in a federation of hundreds of clients — accuracy, client-level
ε under both neighbouring relations, and what each observer reads of a sampled client's words or images."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic

from leakshield.artifacts import ArtifactCache
from leakshield.cli_common import add_common_options, positive_int, set_threads
from leakshield.errors import ConfigError
from leakshield.registry import format_validation_error

#: each population's local training (measured: benchmarks/cross_device.py)
DEFAULTS = {
    "text": {"local_lr": 1.0, "width": 4, "local_epochs": 2, "local_batch": 10},
    "digits": {"local_lr": 0.1, "width": 32, "local_epochs": 2, "local_batch": 5},
}


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "cross-device",
        help="DP-FedAvg with hundreds of clients: accuracy, client-level ε (add/remove and replace-one), "
        "what the server and an observer of the global models read",
        description="Trains a cross-device federation: digits dealt to --clients clients by Dirichlet label "
        "shares, or (--data text) the Rotten Tomatoes corpus with one client per movie (301). Each round "
        "samples clients (Poisson at --sample-rate, or a fixed count), trains them locally, clips and "
        "noises their updates (DP-FedAvg, McMahan et al. 2018: --dp central noises the sum, local each "
        "update; --adaptive clipping of Andrew et al. 2021), and steps the server with momentum 0.9. "
        "Prints test accuracy, ε for both adjacencies at δ = min(1e-5, 1/N^1.1), and what the server and "
        "an observer of the global models read from a sampled client at the first and last round beside the "
        "no-information level: the F1 of its word set (text), the PSNR of its images under the analytic "
        "first-layer attack (digits).",
        epilog="Example: leakshield cross-device --data text --corpus rt.csv.bz2 --rounds 300 "
        "--sample-rate 0.3 --dp central --noise-multiplier 0.5 --adaptive  (about 13 s per seed on 2 "
        "CPU cores). The measured curves: benchmarks/cross_device.py and docs/cross-device.md.",
    )
    add_federation_options(p)
    p.add_argument("--seeds", type=positive_int, default=1, help="seeds 0..N-1 (default 1)")
    p.add_argument("--out", type=Path, default=None,
                   help="keep each seed's result as JSON here; a rerun skips the seeds kept")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    add_common_options(p)


def add_federation_options(p: argparse.ArgumentParser) -> None:
    """The population and DP-FedAvg settings (shared by ``cross-device``, ``dp-audit`` and ``check-dp``)."""
    p.add_argument("--data", choices=("digits", "text"), default="digits", help="population (default digits)")
    p.add_argument("--corpus", type=Path, default=None, help="text: the Rotten Tomatoes CSV (bz2 or not)")
    p.add_argument("--clients", type=positive_int, default=None, help="digits: clients (default 150)")
    p.add_argument("--alpha", type=float, default=None, help="digits: Dirichlet α of label shares (0.5)")
    p.add_argument("--rounds", type=positive_int, default=300, help="rounds (default 300)")
    p.add_argument("--sample-rate", type=float, default=0.05, help="q, clients' share per round (0.05)")
    p.add_argument("--sampling", choices=("poisson", "fixed"), default="poisson",
                   help="poisson: each joins with probability q; fixed: round(q·N) clients")  # fmt: skip
    p.add_argument("--dp", choices=("none", "central", "local"), default="central", help="(default central)")
    p.add_argument("--noise-multiplier", type=float, default=1.0, help="z: noise std over the clip (1.0)")
    p.add_argument("--clip", type=float, default=None,
                   help="S, the clip bound (default 0.5; with --adaptive its start, 0.1)")  # fmt: skip
    p.add_argument("--adaptive", action="store_true", help="quantile-based adaptive clipping (central)")
    p.add_argument("--delta", type=float, default=None, help="δ of ε (default min(1e-5, 1/N^1.1))")
    p.add_argument("--local-lr", type=float, default=None, help="clients' SGD step (text 1.0, digits 0.1)")


def settings_from(args: argparse.Namespace) -> Any:
    from leakshield.crossdevice.federation import CrossDeviceSettings

    dp: dict[str, Any] = {"mode": args.dp, "noise_multiplier": args.noise_multiplier,
                          "adaptive": args.adaptive, "delta": args.delta}  # fmt: skip
    dp["clip"] = args.clip if args.clip is not None else (0.1 if args.adaptive else 0.5)
    base = dict(DEFAULTS[args.data])
    if args.local_lr is not None:
        base["local_lr"] = args.local_lr
    try:
        settings = CrossDeviceSettings(rounds=args.rounds, sample_rate=args.sample_rate,
                                       sampling=args.sampling, eval_every=max(1, args.rounds // 10), dp=dp,
                                       **base)  # fmt: skip
    except pydantic.ValidationError as exc:
        raise ConfigError(f"cross-device: {format_validation_error(exc)}") from None
    if settings.sampling == "fixed" and settings.dp.mode == "central":
        from leakshield.crossdevice.accounting import require_dp_accounting

        require_dp_accounting()  # fixed-size ε: refused now, not after the first seed has trained
    return settings


def population_from(args: argparse.Namespace) -> Any:
    from leakshield.crossdevice.population import digit_population, movie_population

    if args.data == "digits":
        if args.corpus is not None:
            raise ConfigError("--corpus: only with --data text")
        clients = 150 if args.clients is None else args.clients
        return digit_population(clients, 0.5 if args.alpha is None else args.alpha, 0)
    if args.clients is not None or args.alpha is not None:
        raise ConfigError("--clients and --alpha: digits only; --data text has one client per movie")
    if args.corpus is None:
        raise ConfigError("--data text needs --corpus: the Rotten Tomatoes CSV (leakshield fetch-corpus)")
    if not args.corpus.is_file():
        raise ConfigError(f"--corpus {args.corpus}: no such file")
    return movie_population(args.corpus, cache=ArtifactCache(args.cache_dir))


def data_identity(args: argparse.Namespace, population: Any) -> dict[str, Any]:
    """What a kept result depends on besides the settings: the population and the code's version."""
    from leakshield import __version__

    if args.data == "digits":
        source: dict[str, Any] = {"alpha": 0.5 if args.alpha is None else args.alpha}
    else:
        source = {"corpus_sha256": hashlib.sha256(args.corpus.read_bytes()).hexdigest()}
    from leakshield.crossdevice import code_stamp

    return {"data": args.data, "clients": population.clients, "leakshield": __version__,
            "code": code_stamp(), **source}  # fmt: skip


def run_seed(population: Any, settings: Any, seed: int, device: str, quiet: bool) -> dict[str, Any]:
    from tqdm import tqdm

    from leakshield.crossdevice.federation import run_federation
    from leakshield.crossdevice.leakage import leakage

    bar = tqdm(total=settings.rounds, desc=f"seed {seed}", disable=quiet, leave=False)
    result = run_federation(population, settings, seed, capture=(0, settings.rounds - 1),
                            progress=lambda r: bar.update(1), device=device)  # fmt: skip
    bar.close()
    leaks = [vars(w) for c in result.captured for w in leakage(population, c)]
    return {"seed": seed, "accuracy": result.final_accuracy, "curve": result.accuracy,
            "epsilon": result.epsilon, "delta": result.delta, "rounds_per_second": result.rounds_per_second,
            "leakage": leaks}  # fmt: skip


def cmd_cross_device(args: argparse.Namespace) -> int:
    from leakshield.experiment.world import resolve_device

    set_threads(args.threads, args.matmul_precision)
    device = str(resolve_device(args.device))
    settings = settings_from(args)
    population = population_from(args)
    config = {**data_identity(args, population), "settings": settings.model_dump(mode="json")}
    results = per_seed(args.out, args.seeds, config, "result",
                       lambda seed: run_seed(population, settings, seed, device, args.quiet))  # fmt: skip
    if args.json:  # ∞ as the string "inf": JSON has no infinity
        print(json.dumps(_finite({"config": config, "results": results}), indent=1))
        return 0
    print(summary(args, population, results))
    return 0


def per_seed(out: Path | None, seeds: int, config: dict[str, Any], key: str,
             run: Callable[[int], dict[str, Any]]) -> list[dict[str, Any]]:  # fmt: skip
    """Each seed's result: read back from OUT/seedN.json when kept there under the same ``config``
    (as ``{"config": …, key: result}``), else ``run(seed)``, kept atomically (a killed run resumes)."""
    results = []
    for seed in range(seeds):
        path = out / f"seed{seed}.json" if out is not None else None
        if path is not None and path.is_file():
            kept = _restored(json.loads(path.read_text()))
            if kept.get("config") == config:
                results.append(kept[key])
                continue
        result = run(seed)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(_finite({"config": config, key: result})))
            tmp.replace(path)
        results.append(result)
    return results


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "inf", "-inf", "nan": JSON has none of them
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _restored(value: Any) -> Any:
    """The inverse of :func:`_finite`."""
    if value in ("inf", "-inf", "nan"):
        return float(value)
    if isinstance(value, dict):
        return {k: _restored(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_restored(v) for v in value]
    return value


def _eps(value: float | None, dp: str) -> str:
    if value is not None and math.isinf(value):
        return "∞ (no noise)" if dp == "none" else "∞ (the bound exceeds 100: vacuous)"
    return f"{value:.3g}"


def epsilon_line(args: argparse.Namespace, results: list[dict[str, Any]]) -> str:
    """ε for each relation that applies (the largest over seeds: local ε follows who took part most),
    and whom it protects against."""
    names = ("add-remove", "replace-one", "zero-out")
    worst = {
        n: max(r["epsilon"][n] for r in results) for n in names if results[0]["epsilon"].get(n) is not None
    }
    parts = ", ".join(f"{n} {_eps(v, args.dp)}" for n, v in worst.items())
    if args.sampling == "fixed" and args.dp == "central":
        parts += " (fixed-size sampling is accounted under replace-one only)"
    whom = {
        "central": "observers of the global models; the server sees each clipped update in the clear",
        "local": "everyone, the server included (add/remove is not defined: the server sees who sent)",
        "none": "nobody",
    }[args.dp]
    return f"client-level ε at δ {results[0]['delta']:.2e}: {parts}; protects against {whom}"


def summary(args: argparse.Namespace, population: Any, results: list[dict[str, Any]]) -> str:
    acc = [r["accuracy"] for r in results]
    spread = f" (seeds {', '.join(f'{a:.3f}' for a in acc)})" if len(acc) > 1 else ""
    first = results[0]
    lines = [
        f"{population.name}: {population.clients} clients, q {args.sample_rate} ({args.sampling}), "
        f"{args.rounds} rounds, DP {args.dp}" + (f" z {args.noise_multiplier}" if args.dp != "none" else ""),
        f"test accuracy {statistics.fmean(acc):.3f}{spread}; {first['rounds_per_second']:.0f} rounds/s",
        epsilon_line(args, results),
    ]
    for w in (w for r in results[:1] for w in r["leakage"]):
        what = "words" if w["metric"] == "word F1" else "images"
        lines.append(
            f"{what} of a sampled client read by the {w['observer']} at round {w['round']} (seed 0): "
            f"{w['metric']} {w['score']:.3f} over {w['clients']} clients "
            f"(no-information {w['reference']:.3f})"
        )
    return "\n".join(lines)
