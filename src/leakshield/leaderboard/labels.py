"""Point labels that overlap neither one another nor the points (the privacy–utility frontier).

Each group of nearby points gets one block of names. The block goes to the first of a ring of places
around the group's first point (right, then above or below it, then left, then the same farther out)
whose box, measured with the figure's renderer, meets no marker and no block placed before it and stays
inside the axes; a block moved off its point is joined to it by a thin line. Where no place is free the
block takes the one it overlaps least.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: (dx, dy) in points from the anchor, with the alignment that keeps the block on that side of it
_RING = [(8, 0, "left", "center"), (8, 10, "left", "bottom"), (8, -10, "left", "top"),
         (-8, 0, "right", "center"), (-8, 10, "right", "bottom"), (-8, -10, "right", "top"),
         (0, 12, "center", "bottom"), (0, -12, "center", "top")]  # fmt: skip
#: the ring again at these multiples of its offsets, for crowded corners
_REACH = (1, 2, 3, 4, 6, 8, 10, 14)
#: the line joining a block moved off its point to that point
LEADER = {"arrowstyle": "-", "lw": 0.5, "color": "#7f8c8d"}
#: half the side of the square a marker occupies, in points (the frontier's markers: size 36, 6 pt wide,
#: with their edge)
MARKER_HALF = 3.5


def marker_half(figure: Any) -> float:
    """:data:`MARKER_HALF` in the pixels of ``figure``."""
    return MARKER_HALF * figure.dpi / 72


def _overlap(a: Any, b: Any) -> float:
    """The area two display boxes share (0 when they do not meet)."""
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(width, 0.0) * max(height, 0.0)


def _outside(box: Any, frame: Any) -> float:
    """How much of ``box`` lies outside ``frame`` (its area minus the shared area)."""
    return box.width * box.height - _overlap(box, frame)


def place_labels(
    ax: Any, groups: Sequence[tuple[tuple[float, float], str]], points: Sequence[tuple[float, float]]
) -> list[Any]:
    """Annotate ``ax`` with each group's text at its anchor (data coordinates), avoiding the markers at
    ``points`` and the blocks placed before it; returns the display boxes of the placed blocks (in the
    order of ``groups``). Call after the axes' limits are final: placing measures in display space."""
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    ax.figure.canvas.draw()  # the limits and the layout the boxes are measured in
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = []
    for x, y in points:
        px, py = ax.transData.transform((x, y))
        half = marker_half(ax.figure)
        taken.append(Bbox.from_extents(px - half, py - half, px + half, py + half))
    placed = []
    for anchor, text in groups:
        best, best_cost = None, float("inf")
        for reach in _REACH:
            for dx, dy, ha, va in _RING:
                offset = (dx * reach, dy * reach)
                leader = None if (reach, dx, dy) == (1, 8, 0) else LEADER
                label = ax.annotate(text, anchor, xytext=offset, textcoords="offset points", ha=ha, va=va,
                                    fontsize=8, zorder=5, arrowprops=leader)  # fmt: skip
                label.update_positions(renderer)  # measured at its offset: the text, not its leader
                box = Text.get_window_extent(label, renderer).expanded(1.03, 1.08)
                cost = sum(_overlap(box, other) for other in taken) + 10 * _outside(box, frame)
                if cost < best_cost:
                    if best is not None:
                        best[0].remove()
                    best, best_cost = (label, box), cost
                else:
                    label.remove()
                if best_cost == 0:
                    break
            if best_cost == 0:
                break
        assert best is not None
        taken.append(best[1])
        placed.append(best[1])
    return placed
