"""``leakshield list WHAT``: what is registered (datasets, models, defenses, attacks with their threat
models, the threat catalogue, aggregators, metrics, ATS's transformations)."""

from __future__ import annotations

import argparse
import difflib

from leakshield.errors import LeakshieldError

LISTABLE = (
    "datasets", "models", "defenses", "attacks", "threats", "aggregators", "metrics", "transformations",
)  # fmt: skip


def cmd_list(args: argparse.Namespace) -> int:
    what = args.what
    if what not in LISTABLE:
        close = difflib.get_close_matches(what, LISTABLE, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise LeakshieldError(f"cannot list {what!r}{hint}; allowed: {', '.join(LISTABLE)}")
    if what == "transformations":
        from leakshield.defenses.ats import describe_library

        print("ATS's library (Gao et al., Table 1): index operation(magnitude level: value)")
        print("\n".join(describe_library()))
        return 0
    if what == "threats":
        from leakshield.attacks import ATTACKS
        from leakshield.threats import catalogue_lines

        print("\n".join(catalogue_lines((e.name, e.threat) for e in ATTACKS)))
        return 0
    if what == "metrics":
        from leakshield.metrics import METRICS

        for spec in METRICS:
            better = "higher" if spec.higher_is_better else "lower"
            unit = f", {spec.unit}" if spec.unit else ""
            print(f"{spec.name:<15} {spec.summary} ({spec.kind}{unit}; {better} is better)")
        return 0
    registry = _registry(what)
    width = max(len(e.name) for e in registry) + 2
    for entry in registry:
        aliases = f" (aliases: {', '.join(entry.aliases)})" if entry.aliases else ""
        print(f"{entry.name:<{width}}{entry.summary}{aliases}")
        if entry.reference:
            print(f"{'':<{width}}  ↳ {entry.reference}")
        if entry.targets:
            print(f"{'':<{width}}  ↳ adaptive: meets {', '.join(entry.targets)} in a grid")
        if args.verbose and entry.threat is not None:
            print(f"{'':<{width}}  ↳ threat: {entry.threat.describe()}")
        if args.verbose and what == "datasets" and entry.factory.__doc__:
            for line in entry.factory.__doc__.strip().splitlines():
                print(f"{'':<{width}}  {line.strip()}")
        if args.verbose:
            for field, info in entry.params.model_fields.items():
                print(f"{'':<{width}}    {field} = {info.default!r}")
    return 0


def _registry(what: str):
    if what == "datasets":
        from leakshield.data import DATASETS

        return DATASETS
    if what == "models":
        from leakshield.models import MODELS

        return MODELS
    if what == "defenses":
        from leakshield.defenses import DEFENSES

        return DEFENSES
    if what == "aggregators":
        from leakshield.fl import AGGREGATORS

        return AGGREGATORS
    from leakshield.attacks import ATTACKS

    return ATTACKS
