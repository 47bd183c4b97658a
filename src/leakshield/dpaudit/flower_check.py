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

import importlib
import math
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leakshield.dpaudit.findings import Finding
from leakshield.errors import ConfigError

_PRIVACY_NAME = re.compile(r"(privacy|private|differential|(^|[^a-z])dp([^a-z]|$))", re.IGNORECASE)


def _name(obj: Any) -> str:
    return getattr(obj, "__name__", None) or type(obj).__name__


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
                f"sensitivity = clipping_norm = {clip:g}",
            )
        )
    if eps == 0 or delta == 0:
        return [
            *out,
            Finding(
                "error",
                where,
                f"epsilon {eps:g}, delta {delta:g}: the noise is infinite or undefined",
                "0 < epsilon < 1, 0 < delta",
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
                f"in: over {rounds} rounds up to {total:.3g} (exact Gaussian composition, zero-out "
                "adjacency)",
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
        _name(m) in ("fixedclipping_mod", "adaptiveclipping_mod") for m in mods
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
    accountant = getattr(s, "accountant", None)
    method = getattr(getattr(getattr(accountant, "config", None), "sampling_method", None), "value", None)
    if accountant is None:
        out.append(
            Finding(
                "warning",
                name,
                "no accountant: the strategy adds noise but computes no ε; Flower "
                "samples a fixed number of nodes without replacement, so a Poisson ε does not apply",
                "account replace-one for fixed-size sampling (leakshield cross-device "
                "--sampling fixed), or pass an accountant",
            )
        )
    elif method == "poisson":
        out.append(
            Finding(
                "warning",
                f"{name}.accountant",
                "assumes Poisson sampling; the strategy samples a fixed number of nodes without replacement",
                "sampling_method='without-replacement'",
            )
        )
    return out


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
    frac = fraction_train
    chain = _strategies(strategy)
    for s in chain:
        frac = frac if frac is not None else getattr(s, "fraction_train", getattr(s, "fraction_fit", None))
    sampled = max(int(nodes * frac), 1) if nodes and frac else None
    noised = False
    for s in chain:
        name = type(s).__name__
        if name.startswith("DifferentialPrivacy"):
            noised = noised or float(getattr(s, "noise_multiplier", 0)) > 0
            out += _dp_strategy(s, mods, sampled)
        elif _PRIVACY_NAME.search(name):
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
        if name == "LocalDpMod":
            noised = True
            out += _local_dp(mod, rounds)
        elif name in ("fixedclipping_mod", "adaptiveclipping_mod"):
            continue
        elif _PRIVACY_NAME.search(name):
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


def _import(target: str, base: Path) -> Any:
    module, _, attr = target.partition(":")
    if not attr:
        raise ConfigError(f"{target}: expected 'module:attribute'")
    sys.path.insert(0, str(base))
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{target}: cannot import from {base} ({exc})") from None
    finally:
        sys.path.remove(str(base))
    return obj


def _context(run_config: dict[str, Any]) -> Any:
    from flwr.app import Context, RecordDict

    return Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config=dict(run_config))


def load_flower_app(folder: Path) -> FlowerApp:
    """Read a Flower app folder's strategy, mods and run settings (see the module docstring)."""
    project = folder / "pyproject.toml"
    if not project.is_file():
        raise ConfigError(f"{folder}: no pyproject.toml (a Flower app folder has one)")
    try:
        toml = tomllib.loads(project.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{project}: {exc}") from None
    flwr = toml.get("tool", {}).get("flwr", {})
    components = flwr.get("app", {}).get("components", {})
    run_config = dict(flwr.get("app", {}).get("config", {}))
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
    if "clientapp" in components:
        client = _import(components["clientapp"], folder)
        app.mods = list(getattr(client, "_mods", []))
    hook = toml.get("tool", {}).get("leakshield", {}).get("check-dp", {}).get("strategy")
    if hook:
        app.strategy = _import(hook, folder)(_context(run_config))
    elif "serverapp" in components:
        server = _import(components["serverapp"], folder)
        server_fn = getattr(server, "_server_fn", None)
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
