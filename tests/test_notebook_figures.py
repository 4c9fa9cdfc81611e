"""Every figure stored in the notebooks shows something: a PNG output has pixels other than its background, and no
output is matplotlib's text of an empty figure (``<Figure size 500x565 with 0 Axes>``). A student opening a
notebook sees its stored outputs first; an empty picture there teaches nothing."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
EMPTY_FIGURE = re.compile(r"<\w*Figure size [\d.]+x[\d.]+ with 0 Axes>")
MIN_DRAWN = 0.005
"""The least share of a picture's pixels that must differ from its background (its most common colour)."""


def drawn_share(png: bytes) -> float:
    """The share of the picture's pixels that differ from its most common colour."""
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).reshape(-1, 3)
    colours, counts = np.unique(pixels, axis=0, return_counts=True)
    return 1.0 - counts.max() / len(pixels)


def figure_problems(notebook: dict, name: str = "notebook") -> list[str]:
    """Every empty or blank figure among ``notebook``'s stored outputs, in words (cell index and why)."""
    problems = []
    for index, cell in enumerate(notebook["cells"]):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            texts = [output.get("text", ""), data.get("text/plain", "")]
            text = "".join("".join(t) if isinstance(t, list) else t for t in texts)
            if EMPTY_FIGURE.search(text):
                problems.append(f"{name} cell {index}: an empty figure ({EMPTY_FIGURE.search(text).group()})")
            if "image/png" in data:
                share = drawn_share(base64.b64decode("".join(data["image/png"])))
                if share < MIN_DRAWN:
                    problems.append(f"{name} cell {index}: a blank picture ({share:.2%} of its pixels drawn)")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_stored_figure_is_empty(path):
    assert figure_problems(json.loads(path.read_text()), path.name) == []


def test_the_notebooks_hold_pictures():
    pictures = sum("image/png" in o.get("data", {}) for p in NOTEBOOKS
                   for c in json.loads(p.read_text())["cells"] for o in c.get("outputs", []))  # fmt: skip
    assert pictures >= 10


def _png(draw: bool) -> str:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(2, 2))
    if draw:
        figure.add_subplot().plot([0, 1], [0, 1])
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode()


def test_an_empty_figure_and_a_blank_picture_are_reported():
    notebook = {"cells": [
        {"cell_type": "code", "outputs": [{"output_type": "execute_result",
                                           "data": {"text/plain": "<Figure size 500x565 with 0 Axes>"}}]},
        {"cell_type": "code", "outputs": [{"output_type": "stream", "text": ["<Figure size 640x480 with 0 Axes>\n"]}]},
        {"cell_type": "code", "outputs": [{"output_type": "display_data", "data": {"image/png": _png(False)}}]},
        {"cell_type": "code", "outputs": [{"output_type": "display_data", "data": {"image/png": _png(True)}}]},
    ]}  # fmt: skip
    problems = figure_problems(notebook)
    assert [p.split(":")[0] for p in problems] == ["notebook cell 0", "notebook cell 1", "notebook cell 2"]
    assert "blank picture (0.00% of its pixels drawn)" in problems[2]
