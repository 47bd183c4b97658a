"""The DP settings checker for leakshield's own configurations: a cross-device federation's ``dp``
settings with the ε a deployment claims for them, and the defenses of an experiment config. Each finding
is one line with its fix (:class:`~leakshield.dpaudit.findings.Finding`); Flower apps are checked by
:mod:`leakshield.dpaudit.flower_check`.

What is checked: noise that is absent or zero where DP is set; noise without a clipping bound (no
sensitivity, so no ε); a claimed ε below the accountant's — and whether it is one round's ε reported as
the run's; δ large enough to publish a client; the accounting unit (a client or one example) and the
adjacency; the sampling the accountant assumes against the one the federation runs."""

from __future__ import annotations

import math
from typing import Any

from leakshield.dpaudit.findings import Finding


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=0.05)


def check_cross_device(settings: Any, clients: int, claimed_epsilon: float | None = None) -> list[Finding]:
    """Findings for a :class:`~leakshield.crossdevice.federation.CrossDeviceSettings` run on ``clients``
    clients, against ``claimed_epsilon`` if the deployment states one."""
    from leakshield.crossdevice.federation import client_epsilon, default_delta

    dp, out = settings.dp, []
    claim = f"the claimed ε = {claimed_epsilon:g}" if claimed_epsilon is not None else ""
    if dp.mode == "none":
        if claimed_epsilon is not None:
            out.append(
                Finding(
                    "error",
                    "dp.mode",
                    f"none: no clipping and no noise, so ε = ∞ and {claim} cannot hold",
                    "dp.mode: central with noise_multiplier > 0",
                )
            )
        return [*out, Finding("info", "dp.mode", "none: the run is not differentially private")]
    if dp.noise_multiplier == 0:
        return [
            *out,
            Finding(
                "error",
                "dp.noise_multiplier",
                "0: clipping without noise is not DP (ε = ∞)",
                "a noise_multiplier > 0 (about 1 for ε of a few over hundreds of rounds)",
            ),
        ]
    delta = dp.delta if dp.delta is not None else default_delta(clients)
    import torch

    # local noise: the worst case, a client in every round (the run's busiest client is not known here)
    most = torch.tensor([settings.rounds])
    total = client_epsilon(settings, clients, most, delta)
    one = client_epsilon(settings.model_copy(update={"rounds": 1}), clients, torch.tensor([1]), delta)
    relation = "replace-one" if total.get("add-remove") is None else "add-remove"
    run_eps, round_eps = total[relation], one[relation]
    assert run_eps is not None and round_eps is not None
    if claimed_epsilon is not None and claimed_epsilon < run_eps * (1 - 0.01):
        if _close(claimed_epsilon, round_eps):
            out.append(
                Finding(
                    "error",
                    "claimed ε",
                    f"{claimed_epsilon:g} is one round's ε ({round_eps:.3g}); "
                    f"the run's {settings.rounds} rounds spend {run_eps:.3g} ({relation})",
                    f"report ε = {run_eps:.3g}",
                )
            )
        else:
            out.append(
                Finding(
                    "error",
                    "claimed ε",
                    f"{claimed_epsilon:g} is below the accountant's "
                    f"{run_eps:.3g} ({relation}, δ = {delta:.2g}) for these settings",
                    f"report ε = {run_eps:.3g}, or raise noise_multiplier",
                )
            )
    if delta * clients >= 0.1:
        out.append(
            Finding(
                "warning",
                "dp.delta",
                f"{delta:.2g} with {clients} clients: N·δ = "
                f"{delta * clients:.2g}, a guarantee that allows publishing a client outright",
                f"δ ≤ {0.01 / clients:.2g}",
            )
        )
    if dp.mode == "central":
        out.append(
            Finding(
                "info",
                "dp.mode",
                "central: the server adds the noise; it protects the published "
                "models, not a client's update from the server, which sees it clipped only",
            )
        )
    else:
        out.append(
            Finding(
                "info",
                "dp.mode",
                "local: each client noises its own update; ε is per client for "
                "the rounds it took part in, without amplification (the server knows who sent)",
            )
        )
    if dp.mode == "local":
        pass  # no amplification by sampling: the note on sampling does not apply
    elif settings.sampling == "fixed":
        out.append(
            Finding(
                "info",
                "sampling",
                "fixed-size: ε is replace-one (Wang et al.'s RDP bound); "
                "add/remove is not defined for a fixed-size sample",
            )
        )
    else:
        out.append(
            Finding(
                "info",
                "sampling",
                "Poisson: ε assumes each client joins each round by an "
                "independent coin of probability q; a deployment that picks a fixed number per "
                "round must not report this ε",
            )
        )
    out.append(
        Finding(
            "info",
            "unit",
            f"a client (all its data), {relation}: ε = {run_eps:.3g} over "
            f"{settings.rounds} rounds, {round_eps:.3g} for one",
        )
    )
    return out


def _noise_scale(defense: Any) -> float | None:
    for name in ("sigma", "scale"):
        if hasattr(defense.params, name):
            return float(getattr(defense.params, name))
    return None


def check_experiment(config: Any) -> list[Finding]:
    """Findings for the defenses of an experiment config (as
    :func:`leakshield.experiment.config.load_config` reads it)."""
    from leakshield.defenses.base import DefensePipeline

    out: list[Finding] = []
    for setting in config.defenses:
        where = f"defenses[{setting.display}]"
        defenses = DefensePipeline.from_config(setting.entries).defenses
        clipped = False
        for d in defenses:
            if d.name == "clipping":
                clipped = True
            elif d.name in ("dp-fedavg", "dp-sgd"):
                z = float(d.params.noise_multiplier)  # type: ignore[attr-defined]
                if z == 0:
                    out.append(
                        Finding(
                            "error",
                            f"{where}.noise_multiplier",
                            f"{d.name} with 0: clipping without noise is not DP (ε = ∞)",
                            "a noise_multiplier > 0",
                        )
                    )
                elif d.name == "dp-sgd":
                    out.append(
                        Finding(
                            "info",
                            where,
                            "dp-sgd's ε is per example (record-level): a client with "
                            "n examples is protected only as a group, up to about n·ε; use "
                            "dp-fedavg for client-level ε",
                        )
                    )
                elif getattr(d.params, "mode", "") == "central":
                    out.append(
                        Finding(
                            "info",
                            where,
                            "dp-fedavg central: client-level ε protects the "
                            "published models; the server sees the clipped updates",
                        )
                    )
                clipped = True
            elif d.name in ("gaussian-noise", "laplacian-noise"):
                scale = _noise_scale(d)
                if not clipped:
                    out.append(
                        Finding(
                            "warning",
                            where,
                            f"{d.name} (scale {scale:g}) without a clipping bound "
                            "before it: the update's sensitivity is unbounded, so the noise gives no "
                            "ε",
                            "clip first, or use dp-fedavg (clipping, noise and accounting)",
                        )
                    )
                else:
                    zero = scale == 0
                    out.append(
                        Finding(
                            "error" if zero else "warning",
                            where,
                            f"{d.name} after clipping with scale 0: no noise, so no ε"
                            if zero
                            else f"{d.name} after clipping: a DP mechanism in form, but no accountant "
                            "reports its ε here",
                            "use dp-fedavg, which accounts it",
                        )
                    )
    return out
