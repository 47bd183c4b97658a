"""The privacy–utility scatter plot (matplotlib, Agg backend, no display needed)."""

from __future__ import annotations

import io
import statistics
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from leakshield.metrics.registry import METRICS
from leakshield.report.tables import Row


def privacy_utility_png(rows: list[Row], baseline: dict[str, float], metric: str = "ssim") -> bytes | None:
    """Mean ``metric`` of each attack against test accuracy, one point per model · defense · attack
    (averaged over rounds and seeds); None when no cell has both numbers."""
    groups: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        if metric in r.metrics and "accuracy" in r.metrics:
            key = (r.coords["model"], r.coords["defense"], r.coords["attack"])
            groups[key].append((r.metrics["accuracy"], r.metrics[metric]))
    if not groups:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=110)
    attacks = sorted({k[2] for k in groups}, key=str)
    markers, colours = "osD^vP*X", plt.get_cmap("tab10").colors
    labelled: set = set()
    for (model, defense, attack), points in sorted(groups.items(), key=lambda kv: str(kv[0])):
        x = statistics.fmean(p[0] for p in points)
        y = statistics.fmean(p[1] for p in points)
        i = attacks.index(attack)
        ax.scatter(
            [x],
            [y],
            marker=markers[i % len(markers)],
            color=colours[i % len(colours)],
            s=60,
            label=None if attack in labelled else str(attack),
        )
        labelled.add(attack)
        ax.annotate(f"{model}·{defense}", (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    if metric in baseline:
        ax.axhline(
            baseline[metric], color="grey", linestyle="--", linewidth=1, label="no-information baseline"
        )
    ax.set_xlabel("test accuracy after FL training (higher = more useful)")
    ax.set_ylabel(f"attack {metric.upper()} (lower = more private)")
    ax.set_title("Privacy–utility trade-off")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def sweep_png(
    rows: list[Row], title: str, parameter: str, points: dict[str, float], metrics: list[str]
) -> bytes | None:
    """One panel per metric against the parameter value of each defense in ``points`` (means over the
    other dimensions); privacy metrics draw one line per attack. None when no row has the numbers."""
    kinds = {m: (METRICS.find(m).kind if METRICS.find(m) else "privacy") for m in metrics}
    panels = []
    for metric in metrics:
        lines: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in rows:
            label = r.coords["defense"]
            if label in points and metric in r.metrics:
                line = str(r.coords["attack"]) if kinds[metric] != "utility" else "defense"
                lines[line][points[label]].append(r.metrics[metric])
        if lines:
            panels.append((metric, lines))
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), dpi=110, squeeze=False)
    for ax, (metric, lines) in zip(axes[0], panels, strict=True):
        for name, values in sorted(lines.items()):
            xs = sorted(values)
            ax.plot(xs, [statistics.fmean(values[x]) for x in xs], marker="o", label=name)
        ax.set_xlabel(parameter)
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        if len(lines) > 1 or kinds[metric] != "utility":
            ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()
