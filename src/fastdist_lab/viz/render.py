"""Turn a matplotlib ``Figure`` into PNG bytes or an RGBA pixel array, without pyplot; ``InlineFigure``, the
``Figure`` every picture of the package is, shows itself in a notebook."""

from __future__ import annotations

import io

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def to_png(figure: Figure, dpi: float | None = None) -> bytes:
    """The figure as PNG bytes (fast compression, no timestamp or version metadata)."""
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(
        buffer,
        format="png",
        dpi=dpi if dpi is not None else figure.dpi,
        metadata={"Software": None},
        pil_kwargs={"compress_level": 1},
    )
    return buffer.getvalue()


def to_pixels(figure: Figure) -> np.ndarray:
    """The figure rendered by Agg as an ``(height, width, 4)`` uint8 RGBA array."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


class InlineFigure(Figure):
    """A matplotlib ``Figure`` that displays itself as a PNG when it is the last expression of a notebook cell.

    A ``Figure`` built without pyplot has no display of its own in Jupyter unless an inline backend is set up;
    this one needs nothing (``_repr_png_``). It is a ``Figure`` in every other way: ``savefig``, ``to_png``.
    """

    def _repr_png_(self) -> bytes:
        return to_png(self)
