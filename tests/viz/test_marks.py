"""Results on the grid: each rank's verdict from a verification (broken inputs show), real-draw differences."""

from __future__ import annotations

import numpy as np

from fastdist_lab import Layout
from fastdist_lab.checks.group_check import group_problems
from fastdist_lab.runtime import RankResult, RankResults, Verification
from fastdist_lab.runtime.verification import expected_groups
from fastdist_lab.streams import StreamReport, predict
from fastdist_lab.viz import grid_picture, stream_marks, stream_picture, verdict_marks
from fastdist_lab.viz.canvas import rgb8
from fastdist_lab.viz.picture import BAD, GOOD

LAYOUT = Layout(world_size=8, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)


def verification(layout: Layout, wrong_tensor_gather: int | None = None, wrong_seeds: int | None = None):
    """A verification aggregated from the rows each rank's real check returns (``Distributed``'s dims as
    Fast-LLM's per-rank config computes them); one rank's tensor all-gather or seeds broken on request."""
    records = []
    for rank in range(layout.world_size):
        dims = []
        for name, dim in layout.config(rank).distributed_dims.items():
            members = list(dim.global_ranks)
            gathered = members[::-1] if rank == wrong_tensor_gather and name == "tensor" else members
            dims.append({"dim": name, "members": members, "gathered": gathered, "sum": sum(members)})
        value = {"rank": rank, "dims": dims, "seeds_ok": rank != wrong_seeds}
        records.append(RankResult(rank, "ok", value))
    return Verification.from_rank_rows(
        expected_groups(layout), RankResults(records), layout.fields(), "gloo", judge=group_problems
    )


def color_count(picture, rank: int, color) -> int:
    """Pixels of ``rank``'s cell close to ``color`` (its 2-pixel rim left out: a neighbour's outline may lie there)."""
    x0, y0, x1, y1 = picture.geometry.box(rank)
    cell = picture.pixels[y0 + 2 : y1 - 2, x0 + 2 : x1 - 2].reshape(-1, 3).astype(int)
    return int((np.abs(cell - rgb8(color).astype(int)).max(axis=1) <= 30).sum())


def test_every_cell_of_a_good_verification_says_ok_in_green():
    marks = verdict_marks(verification(LAYOUT))
    assert marks.ok and set(marks.notes) == {"\u2713 ok"} and marks.red_groups == ()
    picture = grid_picture(LAYOUT, "tensor", marks=marks)
    assert all(color_count(picture, rank, GOOD) > 5 and color_count(picture, rank, BAD) == 0 for rank in range(8))
    assert "Verification OK" in picture.title


def test_a_broken_group_is_red_on_the_grid_and_names_its_dim():
    broken = verification(LAYOUT, wrong_tensor_gather=5, wrong_seeds=2)
    assert not broken.ok
    marks = verdict_marks(broken)
    tensor_group = LAYOUT.group_of("tensor", 5).tolist()
    assert marks.red_groups == (tuple(tensor_group),)
    assert [marks.notes[r] for r in (2, 4, 5)] == ["\u2717 seeds", "\u2717 tp", "\u2717 tp"]
    assert list(np.flatnonzero(marks.bad)) == sorted({2, *tensor_group})
    picture = grid_picture(LAYOUT, "data", highlight=5, marks=marks)
    for rank in range(8):
        assert (color_count(picture, rank, BAD) > 5) == (rank in {2, *tensor_group}), rank
    assert "Verification FAILED" in picture.title
    big = Layout(world_size=1024, local_world_size=8, tensor_parallel=2, pipeline_parallel=2)
    aggregated = grid_picture(big, "tensor", marks=verdict_marks(verification(big, wrong_tensor_gather=9)))
    assert aggregated.geometry.per_cell == 8
    assert color_count(aggregated, 8, BAD) > 10 and color_count(aggregated, 16, BAD) == 0


def test_real_draws_that_differ_are_marked_on_the_stream_grid():
    predicted = predict(LAYOUT, draws=2)
    values = predicted.values.copy()
    values[6, predicted.generator_index("tp")] += 1.0  # rank 6's tp stream drew other numbers
    real = StreamReport(LAYOUT, 0, "training", predicted.seeds, predicted.devices, values, source="real")
    marks = stream_marks(predicted, real)
    assert list(np.flatnonzero(marks.bad)) == [6] and marks.notes[6] == "\u2260 tp"
    assert "differ from the prediction on 1 rank" in marks.headline
    picture = stream_picture(predicted, "tp", marks=marks)
    assert color_count(picture, 6, BAD) > 5 and color_count(picture, 5, BAD) == 0
    same = stream_marks(predicted, predicted)
    assert same.ok and "match the prediction exactly" in same.headline


def test_the_stream_grid_colours_ranks_by_stream():
    report = predict(LAYOUT, draws=1)
    picture = stream_picture(report, "tp", highlight=0)
    ids = report.stream_ids[:, report.generator_index("tp")]
    geometry = picture.geometry
    for a in range(8):
        for b in range(8):
            xa, ya, _, _ = geometry.box(a)
            xb, yb, _, _ = geometry.box(b)
            same_colour = tuple(picture.pixels[ya + 7, xa + 7]) == tuple(picture.pixels[yb + 7, xb + 7])
            if a != 0 and b != 0:  # rank 0's cell carries the red frame
                assert same_colour == (ids[a] == ids[b])
