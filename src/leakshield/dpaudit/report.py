"""The audit as a report section: the verdict, a table of ε per observer (accountant, estimate with its
interval, lower bound) and the two cosine histograms (inserted against held-out canaries) behind them."""

from __future__ import annotations

import base64
import html
import io
import math

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot as plt

from leakshield.dpaudit.audit import DPAudit, Reading


def _eps(value: float) -> str:
    return "∞" if math.isinf(value) else f"{value:.3g}"


def histograms_png(audit: DPAudit) -> bytes:
    """The inserted and held-out canaries' cosines, one panel per whole-run observer."""
    fig, axes = plt.subplots(1, len(audit.scores), figsize=(5.2 * len(audit.scores), 3.2))
    for ax, (observer, s) in zip(axes, audit.scores.items(), strict=True):
        lo, hi = min(s["in"] + s["out"]), max(s["in"] + s["out"])
        bins = [lo + (hi - lo) * i / 40 for i in range(41)] if hi > lo else 40
        ax.hist(s["out"], bins=bins, alpha=0.6, label=f"held out ({len(s['out'])})", color="tab:gray")
        ax.hist(s["in"], bins=bins, alpha=0.6, label=f"inserted ({len(s['in'])})", color="tab:red")
        ax.set_title(f"{observer}: cosine with each canary", fontsize=10)
        ax.set_xlabel("cosine")
        ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def _row(r: Reading) -> str:
    e, b = r.estimate, r.lower_bound
    return (
        f"<tr><td>{html.escape(r.observer)}</td><td>{_eps(r.accountant)}</td>"
        f"<td>{e.epsilon:.3g} [{e.low:.3g}, {e.high:.3g}]</td><td>{b.epsilon:.3g}</td>"
        f"<td>{b.correct}/{b.guesses}</td></tr>"
    )


def audit_html(audit: DPAudit, command: str = "") -> str:
    """The section (an HTML fragment); ``command``: the one that reproduces it."""
    png = base64.b64encode(histograms_png(audit)).decode()
    conf = audit.final.estimate
    shown = [audit.final, audit.all_rounds, *audit.rounds[:: max(1, len(audit.rounds) // 5)]]
    colour = {"refuted": "#b00020", "suspect": "#b26a00", "consistent": "#1b5e20"}.get(audit.verdict, "#333")
    return f"""<section class="dp-audit">
<h2>DP audit, seed {audit.settings.get("seed", 0)}:
<span style="color:{colour}">{html.escape(audit.verdict)}</span></h2>
<p>{html.escape(audit.reason)}. Claimed ε {_eps(audit.claimed_epsilon)}, the accountant's
{_eps(audit.accountant_epsilon)} (add/remove of one client, δ {audit.delta:.2g});
accuracy {audit.accuracy:.3f}.</p>
<table><thead><tr><th>observer</th><th>accountant ε</th><th>estimate [interval]</th>
<th>lower bound</th><th>right / guesses</th></tr></thead><tbody>
{"".join(_row(r) for r in shown)}
</tbody></table>
<p>Estimate: Andrew et al. 2024 (Gaussian fits: inserted μ {conf.mu_in:.3g} σ {conf.sd_in:.3g}, held out
μ {conf.mu_out:.3g} σ {conf.sd_out:.3g} for the final model), bootstrap interval. Lower bound: Steinke et
al. 2023, one run, confidence {audit.final.lower_bound.confidence:.3g} for each whole-run row,
{audit.rounds[0].lower_bound.confidence:.3g} for a round's (uncorrected across rounds: about one round in
twenty of a mechanism that meets its ε exactly may exceed it by chance).</p>
<img alt="cosines of inserted and held-out canaries" src="data:image/png;base64,{png}">
{f"<p>Reproduce: <code>{html.escape(command)}</code></p>" if command else ""}
</section>"""


def audit_page(audits: list[DPAudit], command: str = "") -> str:
    """A standalone page of one section per seed."""
    body = "\n".join(audit_html(a, command) for a in audits)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>leakshield DP audit</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}
td:first-child,th:first-child{{text-align:left}}img{{max-width:100%}}</style></head>
<body><h1>Does this federation's DP do what it says?</h1>{body}</body></html>"""
