"""The set-ups a layout search found, as a scatter: predicted step time across, memory per GPU up.

``plot_search(result, highlight=i)`` draws one point per row of ``LayoutSearch.frame`` (coloured by pipeline schedule,
``viz.colors``), the memory a GPU can use as a dashed line, and row ``highlight`` ringed with its number;
``point_pixels(figure)`` says where each row's point lies in the figure's PNG (``to_png``), so a click on the
picture finds its row. ``SearchPicture`` (the lab's *Advisor*) draws the scatter once and rings a row in its pixels
(``viz.canvas``), a few milliseconds instead of a new drawing per click.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..setup import SCHEDULES
from ..setup.hardware import GiB
from .canvas import blend, png_bytes
from .colors import group_colors
from .render import InlineFigure, to_pixels
from .text import atlas

RING_RADIUS = 8.5
"""Pixels from a highlighted point's centre to the middle of its ring."""

_EDGE = (0.25, 0.25, 0.25)


def plot_search(result: Any, highlight: int | None = None, title: str | None = None) -> Figure:
    """Memory per GPU (the most loaded pipeline rank) against predicted step time of every row of ``result`` (a
    ``LayoutSearch``); row ``highlight`` ringed and numbered. The first collection of the axes holds the rows'
    points in row order (``point_pixels`` reads it)."""
    frame = result.frame
    x = frame["seconds"].to_numpy(dtype=float)
    y = frame["peak_memory_bytes"].to_numpy(dtype=float) / GiB
    colors = group_colors(len(SCHEDULES))
    kinds = [SCHEDULES.index(kind) for kind in frame["schedule"]]
    figure = InlineFigure(figsize=(6.4, 3.6), dpi=80.0)
    ax = figure.add_axes((0.11, 0.15, 0.62, 0.74))
    ax.scatter(x, y, s=36, c=colors[kinds], edgecolors=[_EDGE], linewidths=0.6, zorder=3)
    usable = result.hardware.usable_bytes
    top = max([*y, usable / GiB if usable else 0.0, 1.0])
    if usable:
        ax.axhline(usable / GiB, color=_EDGE, linestyle="--", linewidth=0.8, zorder=1)
        ax.text(1.0, usable / GiB, f" usable {usable / GiB:.0f} GiB", transform=ax.get_yaxis_transform(),
                fontsize=7, va="center", ha="left", clip_on=False)  # fmt: skip
    low, high = (float(x.min()), float(x.max())) if len(x) else (0.0, 1.0)
    pad = max((high - low) * 0.08, high * 0.002, 1e-6)
    ax.set_xlim(max(0.0, low - pad), high + pad)
    ax.set_ylim(0, top * 1.08)
    if highlight is not None and 0 <= highlight < len(frame):
        ax.scatter([x[highlight]], [y[highlight]], s=150, facecolors="none", edgecolors="black", linewidths=1.6,
                   zorder=4)  # fmt: skip
        ax.annotate(f"#{highlight}", (x[highlight], y[highlight]), xytext=(7, 7), textcoords="offset points",
                    fontsize=8, weight="bold", zorder=5)  # fmt: skip
    ax.set_xlabel("predicted step time (s)", fontsize=8)
    ax.set_ylabel("memory per GPU (GiB)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, linewidth=0.3, alpha=0.5)
    shown = sorted(set(kinds))
    handles = [Line2D([], [], marker="o", linestyle="", markerfacecolor=colors[k], markeredgecolor=_EDGE,
                      label=SCHEDULES[k]) for k in shown]  # fmt: skip
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.9), fontsize=7, frameon=False,
                  title="schedule", title_fontsize=7)  # fmt: skip
    if title is None:
        title = f"{len(frame)} best set-ups on {result.gpus} x {result.hardware.name}"
    ax.set_title(title, fontsize=9, loc="left")
    return figure


def point_pixels(figure: Figure) -> np.ndarray:
    """``(rows, 2)`` pixel positions (x from the left, y from the top) of the rows' points of a ``plot_search``
    figure in its PNG at the figure's own resolution."""
    ax = figure.axes[0]
    points = np.asarray(ax.collections[0].get_offsets(), dtype=float).reshape(-1, 2)
    if not len(points):
        return points
    pixels = ax.transData.transform(points)
    pixels[:, 1] = figure.bbox.height - pixels[:, 1]
    return pixels


class SearchPicture:
    """The ``plot_search`` scatter of ``result`` as RGB ``pixels``, drawn once, with ``points`` (``point_pixels``);
    ``png(highlight)`` is the PNG with row ``highlight`` ringed and numbered, composed in the pixels."""

    def __init__(self, result: Any, title: str | None = None) -> None:
        figure = plot_search(result, title=title)
        self.pixels = np.ascontiguousarray(to_pixels(figure)[..., :3])
        self.points = point_pixels(figure)
        self.dpi = figure.dpi
        figure.clear()

    def png(self, highlight: int | None = None) -> bytes:
        """The PNG, row ``highlight`` (None: none) ringed in black with ``#row`` beside it."""
        if highlight is None:
            return png_bytes(self.pixels)
        image = self.pixels.copy()
        x, y = self.points[highlight]
        rows, cols = np.mgrid[0 : image.shape[0], 0 : image.shape[1]]
        distance = np.hypot(cols - x, rows - y)
        ink = np.clip(1.6 - np.abs(distance - RING_RADIUS), 0.0, 1.0)  # a ring about 2 pixels wide, smooth edges
        alpha = (ink * 255).astype(np.uint8)
        atlas(8.0, self.dpi).stamp(alpha, [f"#{highlight}"], x + RING_RADIUS + 3, y - RING_RADIUS - 2, align="left")
        blend(image, alpha, (0.0, 0.0, 0.0))
        return png_bytes(image)

    def _repr_png_(self) -> bytes:
        return self.png()  # the last expression of a notebook cell shows the scatter itself
