"""The search scatter: a Figure without pyplot, each row's point where ``point_pixels`` says (in its schedule's
colour), and ``SearchPicture`` ringing a row in its pixels exactly there."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (tests only: to count figures registered with pyplot)
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from PIL import Image  # noqa: E402

from fastdist_lab.cost import SCHEDULES, search  # noqa: E402
from fastdist_lab.viz import SearchPicture, plot_search, point_pixels, to_pixels, to_png  # noqa: E402
from fastdist_lab.viz.colors import group_colors  # noqa: E402


@pytest.fixture(scope="module")
def result():
    return search("llama2-7b", 64, hardware="h100-sxm-80gb", global_batch_size=256, top=20)


def decode(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)


def test_each_point_lies_where_point_pixels_says_in_its_schedule_colour(result):
    figure = plot_search(result)
    assert isinstance(figure, Figure) and plt.get_fignums() == []
    pixels = decode(to_png(figure))
    points = point_pixels(figure)
    assert points.shape == (len(result), 2)
    colors = np.round(group_colors(len(SCHEDULES)) * 255).astype(int)
    for (x, y), kind in zip(points, result.frame["schedule"]):
        shown = pixels[int(round(y)), int(round(x))]
        assert np.abs(shown - colors[SCHEDULES.index(kind)]).max() <= 3, (kind, shown)
    moved = points + [0, 12]  # a wrong mapping (12 pixels off) finds other colours: the check can fail
    misses = [np.abs(pixels[int(round(y)), int(round(x))] - colors[SCHEDULES.index(kind)]).max() > 3
              for (x, y), kind in zip(moved, result.frame["schedule"])]  # fmt: skip
    assert sum(misses) > len(result) // 2
    texts = [t.get_text() for t in figure.axes[0].texts]
    assert any(t.startswith(" usable ") and t.endswith(" GiB") for t in texts)  # the memory a GPU can use
    assert [t.get_text() for t in figure.axes[0].get_legend().get_texts()] == sorted(
        set(result.frame["schedule"]), key=SCHEDULES.index
    )


def test_search_picture_rings_a_row_in_its_pixels(result):
    picture = SearchPicture(result)
    figure = plot_search(result)
    assert np.array_equal(picture.pixels, to_pixels(figure)[..., :3]) and np.allclose(
        picture.points, point_pixels(figure)
    )
    plain = decode(picture.png())
    assert np.array_equal(plain, picture.pixels)
    ringed = decode(picture.png(5))
    changed = np.argwhere(np.any(ringed != plain, axis=2))
    x, y = picture.points[5]
    distance = np.hypot(changed[:, 1] - x, changed[:, 0] - y)
    assert ((distance > 6) & (distance < 11)).sum() > 30  # the ring around row 5's point
    assert (distance > 11).sum() > 10 and distance.max() < 60  # and its number beside it, nothing far away
    assert (distance < 5).sum() == 0  # the point itself stays visible
