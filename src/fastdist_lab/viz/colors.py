"""The one palette of every picture: light qualitative colours for group and stream ids, extended by
golden-ratio hues for many ids (black text stays readable on each)."""

from __future__ import annotations

import colorsys

import numpy as np

from .canvas import hex_rgb

_PALETTE_HEX: tuple[str, ...] = (
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d",
    "#9edae5", "#d9d9d9", "#8dd3c7", "#ffffb3", "#bebada", "#fdb462", "#b3de69", "#fccde5",
    "#ccebc5", "#ffed6f", "#80b1d3", "#fb8072",
)  # fmt: skip

PALETTE: np.ndarray = np.array([hex_rgb(c) for c in _PALETTE_HEX])
"""The 20 light colours used first (text in black stays readable on each)."""

TEXT_DARK = hex_rgb("#222222")
"""Text and margins."""
GOOD, BAD = hex_rgb("#1b7f3b"), hex_rgb("#c0001a")
"""A check's verdict: passed (green), failed (red)."""
RANK_FRAME = hex_rgb("#d62728")
"""The frame of the highlighted rank."""
GROUP_LINE = hex_rgb("#111111")
"""The outline of the highlighted rank's group."""
NODE_LINE, NODE_LINE_DENSE = hex_rgb("#333333"), hex_rgb("#777777")
"""The lines between nodes (lighter where the nodes are many and thin)."""

DISTINCT_COLORS = len(PALETTE)
"""How many categories a picture can colour so that the eye tells them apart: beyond, colours repeat or blur, and
a picture colours by something with fewer values (``viz.layout_picture``)."""


def group_colors(count: int) -> np.ndarray:
    """``count`` RGB colours (float array ``(count, 3)``), neighbours in index order clearly distinct."""
    if count <= len(PALETTE):
        return PALETTE[:count].copy()
    golden = 0.6180339887498949
    index = np.arange(count)
    hues = (index * golden) % 1.0
    saturation = 0.35 + 0.2 * ((index // 7) % 3) / 2
    value = 0.98 - 0.12 * ((index // 3) % 2)
    return np.array([colorsys.hsv_to_rgb(h, s, v) for h, s, v in zip(hues, saturation, value)])


def fade(rgb: np.ndarray, mask: np.ndarray, amount: float = 0.65) -> np.ndarray:
    """Blend the colours where ``mask`` is True towards white by ``amount`` (0 keeps, 1 gives white)."""
    out = rgb.copy()
    out[mask] = out[mask] * (1 - amount) + amount
    return out


def gradient_colors(count: int) -> np.ndarray:
    """``count`` RGB colours from light to dark along one hue (the first palette colour's), for ordered values
    such as a rank's position in its group: neighbours are close, the ends far apart."""
    light = np.array([0.93, 0.96, 1.0])
    dark = np.array([0.16, 0.38, 0.66])
    steps = np.linspace(0.0, 1.0, max(count, 1))[:, None]
    return light * (1 - steps) + dark * steps


def text_color(rgb: np.ndarray | tuple[float, float, float]) -> tuple[float, float, float]:
    """A darker shade of a light palette colour, readable as text on white and recognisably the same hue."""
    return tuple(float(c) * 0.55 for c in rgb)  # type: ignore[return-value]


ACTION_COLORS: dict[str, tuple[float, float, float]] = {
    "F": tuple(PALETTE[0]),  # light blue: forward
    "B": tuple(PALETTE[1]),  # light orange: backward
    "I": tuple(PALETTE[1]),  # backward of the input: the backward's colour
    "W": tuple(PALETTE[13]),  # backward of the weights: a darker orange
}
"""The colours of a pipeline schedule's actions: forward, backward (split: input, weights)."""

BUBBLE_COLOR: tuple[float, float, float] = tuple(PALETTE[9])
"""The grey of a pipeline rank's idle time (the bubble)."""
