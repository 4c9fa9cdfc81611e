"""Browser steps for the rank grid you can point at: click a cell, hover one, read verdicts off the picture.

Where a rank's cell is comes from the same ``GridGeometry`` the kernel uses (``fastdist_lab.viz.grid_picture``),
scaled from the picture's own pixels to the size the browser shows it at. What the grid shows is read back from
its pixels (drawn into a canvas), never from the kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fastdist_lab import Layout
from fastdist_lab.seeds import generator_seeds
from fastdist_lab.viz import GridGeometry, GridPicture, Marks, grid_picture
from fastdist_lab.viz.picture import GOOD, RANK_FRAME

# (naturalWidth, naturalHeight, clientWidth, clientHeight) of the picture
PICTURE_SIZE = "(img) => [img.naturalWidth, img.naturalHeight, img.clientWidth, img.clientHeight]"

# How many pixels of a box (natural pixels) are within ``tol`` of an RGB colour.
COUNT_COLOR = """(img, args) => {
  const [x0, y0, x1, y1, r, g, b, tol] = args;
  const canvas = document.createElement('canvas');
  canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
  const ctx = canvas.getContext('2d');
  ctx.drawImage(img, 0, 0);
  const data = ctx.getImageData(x0, y0, x1 - x0, y1 - y0).data;
  let count = 0;
  for (let i = 0; i < data.length; i += 4) {
    if (Math.abs(data[i] - r) <= tol && Math.abs(data[i + 1] - g) <= tol && Math.abs(data[i + 2] - b) <= tol) count++;
  }
  return count;
}"""


def rgb255(color: tuple[float, float, float]) -> list[int]:
    """A float RGB colour as 0-255 integers."""
    return [int(round(c * 255)) for c in color]


def count_color(img: Any, box: tuple[int, int, int, int], color: tuple[float, float, float], tol: int = 40) -> int:
    """Pixels of ``box`` (x0, y0, x1, y1 in the picture's pixels) close to ``color``."""
    return int(img.evaluate(COUNT_COLOR, [*box, *rgb255(color), tol]))


def expected_picture(
    layout: Layout, dim: str, verdicts: bool = False, ranks: tuple[int, int] | None = None
) -> GridPicture:
    """The picture the kernel draws, as far as where its cells are: the same ``grid_picture`` (with a one-line
    headline and a note line per cell when ``verdicts``; the highlighted rank does not move the cells)."""
    marks = None
    if verdicts:
        n = layout.world_size
        marks = Marks(notes=["\u2713 ok"] * n, bad=np.zeros(n, dtype=bool), headline="verdict")
    return grid_picture(layout, dim, marks=marks, ranks=ranks)


def check_height(img: Any, expected: GridPicture) -> GridGeometry:
    """The shown picture is as high as ``expected`` (its rows of cells are where expected); its geometry."""
    natural_h = img.evaluate(PICTURE_SIZE)[1]
    assert natural_h == expected.size[1], f"the picture is {natural_h} px high, expected {expected.size[1]}"
    return expected.geometry


def scaled_center(img: Any, geometry: GridGeometry, rank: int) -> dict[str, float]:
    """Where to click in the shown picture (CSS pixels from its corner) to point at ``rank``'s cell."""
    natural_w, natural_h, shown_w, shown_h = img.evaluate(PICTURE_SIZE)
    x, y = geometry.center(rank)
    return {"x": x * shown_w / natural_w, "y": y * shown_h / natural_h}


def click_cell_and_check(
    page: Any,
    img: Any,
    layout: Layout,
    dim: str,
    rank: int,
    act: Callable[[Callable[[], None], str], None],
    wait_until: Callable[..., Any],
) -> None:
    """Click ``rank``'s cell; then its cell has the red frame, the highlight box says ``rank`` and the side card
    shows its node and GPU, its coordinates and the seed of every generator. ``act(do, what)`` runs ``do`` and
    waits until the kernel has handled it."""
    geometry = check_height(img, expected_picture(layout, dim))
    act(lambda: img.click(position=scaled_center(img, geometry, rank)), f"a click on rank {rank}'s cell")
    x0, y0, x1, y1 = geometry.box(rank)
    left_edge = (x0 + 2, y0 + 6, x0 + 5, y1 - 6)  # the red frame sits just inside the cell
    wait_until(
        page,
        lambda: count_color(img, left_edge, RANK_FRAME) >= (y1 - y0 - 12),
        60,
        f"a red frame on rank {rank}'s cell (found {count_color(img, left_edge, RANK_FRAME)} red pixels)",
    )
    box = page.locator(".fdl-rank input").first
    assert box.input_value() == str(rank), f"the highlight box shows {box.input_value()}, not {rank}"
    card = page.locator(".fdl-rank-card").first
    wait_until(page, lambda: f"rank {rank}" in card.inner_text(), 30, f"the card of rank {rank}")
    text = card.inner_text()
    c = layout.coordinates
    assert f"node {c['node'][rank]}, GPU {c['local_rank'][rank]}" in text, text
    for generator, seed in generator_seeds(layout.config(rank)).items():
        assert generator in text and str(seed) in text, f"seed of {generator} ({seed}) missing from the card"
    assert str(c["tensor_rank"][rank]) in text and "tensor_and_data" in text, text


def hover_cell_and_check(page: Any, img: Any, layout: Layout, dim: str, rank: int, wait_until: Callable) -> None:
    """Move the mouse over ``rank``'s cell: the hover line names the rank and its coordinates."""
    geometry = expected_picture(layout, dim).geometry
    img.hover(position=scaled_center(img, geometry, rank))
    line = page.locator(".fdl-grid-hover").first
    wait_until(page, lambda: f"rank {rank} " in line.inner_text(), 30, f"the hover line to name rank {rank}")


def read_verdicts(img: Any, layout: Layout, dim: str) -> dict[int, bool] | None:
    """Per rank, whether its cell on the grid carries the green ``✓ ok`` verdict (None while the picture shown
    has no verdict line)."""
    expected = expected_picture(layout, dim, verdicts=True)
    if img.evaluate(PICTURE_SIZE)[1] != expected.size[1]:
        return None
    geometry = expected.geometry
    out = {}
    for rank in range(layout.world_size):
        x0, y0, x1, y1 = geometry.box(rank)
        bottom = (x0 + 2, y0 + (y1 - y0) // 2, x1 - 2, y1 - 2)  # the verdict is the cell's last line
        out[rank] = count_color(img, bottom, GOOD, tol=35) >= 6
    return out


BIG_WORLDS = [
    {
        "world_size": 256,
        "local_world_size": 8,
        "tensor_parallel": 2,
        "pipeline_parallel": 4,
        "sequence_data_parallel": 2,
    },
    {
        "world_size": 4096,
        "local_world_size": 8,
        "tensor_parallel": 2,
        "pipeline_parallel": 4,
        "sequence_data_parallel": 2,
    },
    {
        "world_size": 16384,
        "local_world_size": 8,
        "tensor_parallel": 8,
        "pipeline_parallel": 4,
        "sequence_data_parallel": 2,
    },
]
"""The worlds the browser test shows (the last one is zoomed into by a double-click)."""


def check_big_worlds(
    page: Any,
    picture: Callable[[], Any],
    set_layout: Callable[[dict[str, int]], None],
    shot: Callable[..., Any],
    act: Callable[[Callable[[], None], str], None],
    wait_until: Callable[..., Any],
) -> None:
    """Show 256, 4,096 and 16,384 ranks: each grid fits 1,000 pixels and is shown 1:1 (not shrunk); at 16,384 ranks
    a cell is a node, and a double-click on node 100 zooms to one cell per rank around it."""
    for target in BIG_WORLDS:
        set_layout(target)
        layout = Layout(**target)
        expected = expected_picture(layout, "tensor")
        wait_until(
            page,
            lambda: picture().evaluate(PICTURE_SIZE)[1] == expected.size[1],  # noqa: B023
            90,
            f"the grid of {layout.world_size} ranks",
        )
        natural_w, _, shown_w, _ = picture().evaluate(PICTURE_SIZE)
        assert natural_w <= 1000 and shown_w == natural_w, (
            f"{layout.world_size} ranks: {natural_w} px shown at {shown_w}"
        )
        shot(f"grid_{layout.world_size}_ranks", picture())
    geometry = expected.geometry
    assert geometry.per_cell == 8, "16,384 ranks: a cell is not a node"
    natural_w, natural_h, shown_w, shown_h = picture().evaluate(PICTURE_SIZE)
    x, y = geometry.center(800)
    act(lambda: picture().dblclick(position={"x": x * shown_w / natural_w, "y": y * shown_h / natural_h}), "zoom")
    zoomed = expected_picture(layout, "tensor", ranks=(768, 1024))
    wait_until(page, lambda: picture().evaluate(PICTURE_SIZE)[1] == zoomed.size[1], 60, "the zoom to nodes 96-127")
    shot("grid_16384_zoomed_nodes_96_127", picture())
