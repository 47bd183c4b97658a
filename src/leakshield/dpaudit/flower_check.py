"""The DP settings checker for Flower apps: the ServerApp's strategy (and the wrappers around it) and the
ClientApp's mods, read from the objects or from an app folder's ``pyproject.toml``.

Recognised: Flower's ``DifferentialPrivacy{Server,Client}Side{Fixed,Adaptive}Clipping`` strategies, its
``LocalDpMod`` and its clipping mods. Checked: zero noise; ``LocalDpMod`` noise calibrated to a
``sensitivity`` below its ``clipping_norm`` (Flower takes the two separately); its ε spent per round
against the run's; the classic Gaussian calibration used for ε ≥ 1, where it does not hold; client-side
clipping strategies without the clipping mod on the clients; noise sized for more replies than the
strategy samples; an accountant that assumes other sampling than the strategy's; and any other component
named as a privacy mechanism (``privacy``, ``private``, ``dp``, ``differential``), which adds no noise
leakshield recognises and so gives no DP guarantee.

An app folder: ``[tool.flwr.app.components]`` names the apps, ``[tool.flwr.app.config]`` the run
config (``num-server-rounds`` or ``num-rounds``, ``fraction-train``), the federation's
``options.num-supernodes`` the nodes. A ServerApp built with ``server_fn`` is called to get its
strategy; one that builds it in ``@app.main()`` names the function that does (called with the app's
``Context``) in ``[tool.leakshield.check-dp] strategy = "module:function"``."""

from __future__ import annotations

import contextlib
import importlib
import math
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leakshield.dpaudit.findings import Finding
from leakshield.errors import ConfigError

#: words that name a component as a privacy mechanism (CamelCase and snake_case split into words)
PRIVACY_WORDS = frozenset(
    {"dp", "ldp", "cdp", "privacy", "private", "privately", "differential", "differentially"}
    | {"privatize", "privatized", "privatise", "privatised"}
)


def _name(obj: Any) -> str:
    return getattr(obj, "__name__", None) or type(obj).__name__


def named_as_privacy(name: str) -> bool:
    """Whether a class or function name says privacy: ``DPFedAvg``, ``ldp_mod``, ``PercentilePrivacy``."""
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name)
    return any(w.lower() in PRIVACY_WORDS for w in words)


def _kind_of(obj: Any, name: str) -> bool:
    """Whether ``obj`` is ``name`` or an instance of a class so named or derived from one."""
    if _name(obj) == name:
        return True
    return any(c.__name__ == name for c in type(obj).__mro__)


def _flower_dp_strategy(obj: Any) -> bool:
    return any(c.__name__.startswith("DifferentialPrivacy") for c in type(obj).__mro__)


def _strategies(strategy: Any) -> list[Any]:
    chain = []
    while strategy is not None and len(chain) < 20:
        chain.append(strategy)
        strategy = getattr(strategy, "strategy", None)
    return chain


@dataclass
class FlowerApp:
    """What the checker reads of an app: the strategy (None if not readable), the client mods, the
    rounds, the nodes, the share of them sampled a round, and notes on what could not be read."""

    strategy: Any = None
    mods: list[Any] = field(default_factory=list)
    rounds: int | None = None
    nodes: int | None = None
    fraction_train: float | None = None
    notes: list[Finding] = field(default_factory=list)


def _local_dp(mod: Any, rounds: int | None) -> list[Finding]:
    from leakshield.crossdevice.accounting import gaussian_epsilon

    out, where = [], "LocalDpMod"
    clip, sens, eps, delta = (
        float(getattr(mod, k)) for k in ("clipping_norm", "sensitivity", "epsilon", "delta")
    )
    if sens < clip:
        out.append(
            Finding(
                "error",
                f"{where}.sensitivity",
                f"{sens:g} while updates are clipped at {clip:g}: the "
                f"noise is sized for updates {clip / max(sens, 1e-300):.3g}× smaller than the ones "
                "sent, so the stated ε does not hold",
                f"sensitivity = clipping_norm = {clip:g} (an update against none), or {2 * clip:g} "
                "(against any other update)",
            )
        )
    if eps == 0 or not 0 < delta < 1:
        return [
            *out,
            Finding(
                "error",
                where,
                f"epsilon {eps:g}, delta {delta:g}: the noise is infinite or undefined, or δ "
                "guarantees nothing",
                "0 < epsilon < 1, 0 < delta ≪ 1",
            ),
        ]
    if eps >= 1:
        out.append(
            Finding(
                "warning",
                f"{where}.epsilon",
                f"{eps:g}: its noise σ = Δ·√(2 ln(1.25/δ))/ε is the "
                "classic calibration, proven for ε < 1 only (Dwork & Roth, Thm A.1)",
                "ε < 1 per release, or calibrate with an exact Gaussian accountant",
            )
        )
    if rounds and rounds > 1 and sens >= clip:
        z = math.sqrt(2 * math.log(1.25 / delta)) / eps * sens / clip
        total = gaussian_epsilon(z, rounds, delta, "add-remove")
        out.append(
            Finding(
                "warning",
                f"{where}.epsilon",
                f"{eps:g} is spent by every round a client takes part "
                f"in: over {rounds} rounds up to {total:.3g} (exact Gaussian composition, an update "
                "against none; more against any other update)",
                f"report ε = {total:.3g} for the run",
            )
        )
    return out


def _dp_strategy(s: Any, mods: list[Any], sampled: int | None) -> list[Finding]:
    out, name = [], type(s).__name__
    z = float(getattr(s, "noise_multiplier", 0.0))
    if z == 0:
        out.append(
            Finding(
                "error",
                f"{name}.noise_multiplier",
                "0: the strategy clips but adds no noise, so ε = ∞",
                "a noise_multiplier > 0",
            )
        )
    if "ClientSide" in name and not any(
        _kind_of(m, "fixedclipping_mod") or _kind_of(m, "adaptiveclipping_mod") for m in mods
    ):
        out.append(
            Finding(
                "error",
                name,
                "client-side clipping, but the ClientApp has no fixedclipping_mod or "
                "adaptiveclipping_mod: updates leave unclipped and the noise bounds nothing",
                "add fixedclipping_mod (or adaptiveclipping_mod) to the ClientApp's mods",
            )
        )
    m = getattr(s, "num_sampled_clients", None)
    if sampled is not None and m is not None and int(m) > sampled:
        out.append(
            Finding(
                "error",
                f"{name}.num_sampled_clients",
                f"{m}: the noise σ·S/{m} is sized for {m} "
                f"replies while the strategy samples {sampled}, {int(m) / sampled:.3g}× too little "
                "noise on the mean",
                f"num_sampled_clients = {sampled}",
            )
        )
    if getattr(s, "accountant", None) is None:  # the adaptive wrappers take none at all
        takes = hasattr(s, "accountant")
        out.append(
            Finding(
                "warning",
                name,
                "computes no ε: the strategy adds noise but reports no ε; it samples a fixed number of "
                "nodes without replacement, so a Poisson ε does not apply",
                ("pass accountant= (Flower's fixed-clipping accounting, no amplification), or " * takes)
                + "account replace-one for fixed-size sampling (leakshield cross-device --sampling fixed)",
            )
        )
    return out


def _sampled(chain: list[Any], nodes: int | None, fraction_train: float | None) -> int | None:
    """Nodes a round samples, as Flower does: max(int(nodes·fraction), the minimum), at most all; the
    strategy's own fraction before the run config's."""
    frac, least = None, 2
    for s in chain:
        if frac is None:
            frac = getattr(s, "fraction_train", getattr(s, "fraction_fit", None))
            least = int(getattr(s, "min_train_nodes", getattr(s, "min_fit_clients", 2)))
    frac = frac if frac is not None else fraction_train
    if not nodes or frac is None:
        return None
    return min(nodes, max(int(nodes * float(frac)), least))


def check_flower(
    strategy: Any = None,
    mods: list[Any] | tuple[Any, ...] = (),
    *,
    rounds: int | None = None,
    nodes: int | None = None,
    fraction_train: float | None = None,
) -> list[Finding]:
    """Findings for a Flower strategy (with its wrappers) and a ClientApp's mods."""
    mods = list(mods)
    out: list[Finding] = []
    chain = _strategies(strategy)
    sampled = _sampled(chain, nodes, fraction_train)
    noised = False
    for s in chain:
        name = type(s).__name__
        if _flower_dp_strategy(s):
            noised = noised or float(getattr(s, "noise_multiplier", 0)) > 0
            out += _dp_strategy(s, mods, sampled)
        elif named_as_privacy(name):
            out.append(
                Finding(
                    "error",
                    name,
                    "named as a privacy mechanism, but it is no DP strategy leakshield "
                    "recognises and adds no calibrated noise: it gives no (ε, δ) guarantee",
                    "wrap the strategy in DifferentialPrivacyServerSideFixedClipping, or use "
                    "LocalDpMod on the clients; audit it with leakshield dp-audit",
                )
            )
    for mod in mods:
        name = _name(mod)
        if _kind_of(mod, "LocalDpMod"):
            noised = True
            out += _local_dp(mod, rounds)
        elif _kind_of(mod, "fixedclipping_mod") or _kind_of(mod, "adaptiveclipping_mod"):
            continue
        elif named_as_privacy(name):
            out.append(
                Finding(
                    "error",
                    name,
                    "named as a privacy mechanism, but it is no DP mod leakshield "
                    "recognises and adds no calibrated noise: it gives no (ε, δ) guarantee",
                    "use Flower's LocalDpMod, or server-side DP; audit it with leakshield dp-audit",
                )
            )
    if not noised and not any(f.level == "error" for f in out):
        out.append(Finding("info", "app", "no DP component: the federation makes no DP claim"))
    return out


def _import(target: str) -> Any:
    module, _, attr = target.partition(":")
    if not attr:
        raise ConfigError(f"{target}: expected 'module:attribute'")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _context(run_config: dict[str, Any]) -> Any:
    from flwr.app import Context, RecordDict

    return Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config=dict(run_config))


@contextlib.contextmanager
def _app_code(folder: Path) -> Iterator[None]:
    """The app's folder importable first; its modules forgotten afterwards (a second app with the same
    module names is read afresh); any error of the app's code one ConfigError."""
    before = set(sys.modules)
    sys.path.insert(0, str(folder))
    try:
        yield
    except ConfigError:
        raise
    except Exception as exc:  # the app's own code: any error it raises is the app's
        raise ConfigError(f"{folder}: the app's code failed: {type(exc).__name__}: {exc}") from None
    finally:
        sys.path.remove(str(folder))
        for name in set(sys.modules) - before:
            file = getattr(sys.modules[name], "__file__", None) or ""
            if file.startswith(str(folder)):
                del sys.modules[name]


def _run_config(flwr: dict[str, Any]) -> dict[str, Any]:
    """``[tool.flwr.app.config]`` with nested tables flattened to dotted keys, as Flower does."""

    def flat(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in table.items():
            if isinstance(value, dict):
                out.update(flat(value, f"{prefix}{key}."))
            else:
                out[f"{prefix}{key}"] = value
        return out

    return flat(flwr.get("app", {}).get("config", {}))


def load_flower_app(folder: Path) -> FlowerApp:
    """Read a Flower app folder's strategy, mods and run settings (see the module docstring). The app's
    modules are imported and its strategy is built (its ``server_fn`` or the named function is called),
    as ``flwr run`` would; nothing trains."""
    project = folder / "pyproject.toml"
    if not project.is_file():
        raise ConfigError(f"{folder}: no pyproject.toml (a Flower app folder has one)")
    try:
        toml = tomllib.loads(project.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{project}: {exc}") from None
    flwr = toml.get("tool", {}).get("flwr", {})
    components = flwr.get("app", {}).get("components", {})
    run_config = _run_config(flwr)
    app = FlowerApp()
    for key in ("num-server-rounds", "num-rounds"):
        if key in run_config:
            app.rounds = int(run_config[key])
    if "fraction-train" in run_config:
        app.fraction_train = float(run_config["fraction-train"])
    federations = flwr.get("federations", {})
    chosen = federations.get(federations.get("default", ""), {})
    for fed in [chosen, *federations.values()]:
        if isinstance(fed, dict) and "num-supernodes" in fed.get("options", {}):
            app.nodes = int(fed["options"]["num-supernodes"])
            break
    hook = toml.get("tool", {}).get("leakshield", {}).get("check-dp", {}).get("strategy")
    with _app_code(folder):
        if "clientapp" in components:
            app.mods = list(getattr(_import(components["clientapp"]), "_mods", []))
        if hook:
            app.strategy = _import(hook)(_context(run_config))
        elif "serverapp" in components:
            server_fn = getattr(_import(components["serverapp"]), "_server_fn", None)
            if server_fn is not None:
                app.strategy = server_fn(_context(run_config)).strategy
            else:
                app.notes.append(
                    Finding(
                        "warning",
                        "serverapp",
                        "builds its strategy in @app.main(), which the "
                        "checker cannot read without running it: server-side DP is unchecked",
                        "name the function that builds the strategy in [tool.leakshield.check-dp] "
                        'strategy = "module:function"',
                    )
                )
    return app


def check_flower_app(folder: Path) -> list[Finding]:
    """Findings for the Flower app in ``folder``."""
    app = load_flower_app(folder)
    return app.notes + check_flower(
        app.strategy, app.mods, rounds=app.rounds, nodes=app.nodes, fraction_train=app.fraction_train
    )
