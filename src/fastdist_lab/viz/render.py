"""Turn a matplotlib ``Figure`` into PNG bytes or an RGBA pixel array, without pyplot."""

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
