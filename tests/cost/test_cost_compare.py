"""compare(): layouts side by side on the headline figures of one step, read from each layout's own report."""

from __future__ import annotations

import pytest

from fastdist_lab import Layout, compare
from fastdist_lab.cost import COMPARE_COLUMNS, Training, compare_reports, estimate, layout_name
from fastdist_lab.errors import CostError

TRAINING = Training(num_microbatches=8, distributed_optimizer=True)


def layouts_64() -> tuple[Layout, Layout, Layout]:
    base = dict(world_size=64, local_world_size=8, tensor_parallel=2, pipeline_parallel=4)
    return (
        Layout(**base),
        Layout(**base, pipeline_first=True),
        Layout(world_size=64, local_world_size=8, tensor_parallel=8),
    )


def test_compare_reads_each_layouts_report():
    layouts = layouts_64()
    frame = compare(*layouts, model="llama2-7b", training=TRAINING, hardware="dgx-a100")
    assert list(frame.columns) == list(COMPARE_COLUMNS)
    assert frame.index.tolist() == ["tp2 pp4 dp8 data-first", "tp2 pp4 dp8 pipeline-first", "tp8 pp1 dp8 data-first"]
    for (_, row), layout in zip(frame.iterrows(), layouts):
        report = estimate(layout, "llama2-7b", TRAINING)
        comm = report.communication
        assert row["peak_bytes"] == report.peak_bytes and row["most_loaded_stage"] == report.most_loaded_stage
        assert row["bytes_per_step"] == comm["bytes_per_step"].sum()
        assert row["inter_node_bytes_per_step"] == comm.loc[comm["inter_node"], "bytes_per_step"].sum()
        time = report.communication_time("dgx-a100")
        assert row["communication_seconds"] == pytest.approx(time["seconds"].sum())
        assert row["dominant"] == time.index[time["dominant"]][0]
    # the same sizes in the other order: the same memory and bytes, other groups across nodes
    first, second = frame.iloc[0], frame.iloc[1]
    assert first["peak_bytes"] == second["peak_bytes"] and first["bytes_per_step"] == second["bytes_per_step"]
    assert first["inter_node_dims"] == "pipeline, data" and second["inter_node_dims"] == "data"
    assert first["inter_node_bytes_per_step"] > second["inter_node_bytes_per_step"]
    assert frame.attrs["hardware"].name == "dgx-a100"


def test_compare_names_and_bad_inputs():
    a, b, _ = layouts_64()
    assert compare(a, b, names=["A", "B"]).index.tolist() == ["A", "B"]
    twice = compare(a, a)
    assert twice.index.tolist() == ["tp2 pp4 dp8 data-first", "tp2 pp4 dp8 data-first (2)"]
    with pytest.raises(CostError, match="two or more layouts, got 1"):
        compare(a)
    with pytest.raises(CostError, match=r"names=\['A'\] must name each of the 2 layouts"):
        compare(a, b, names=["A"])
    for names, shown in ((7, "7"), ("AB", "'AB'"), (["A", 2], r"\['A', 2\]"), ([["A"], "B"], r"\[\['A'\], 'B'\]")):
        with pytest.raises(CostError, match=rf"names={shown} must"):
            compare(a, b, names=names)
    with pytest.raises(CostError, match="model='gpt5'"):
        compare(a, b, model="gpt5")
    reports = [estimate(a, "llama2-7b"), estimate(b, "llama2-7b")]
    assert compare_reports(reports).index.tolist() == [layout_name(a), layout_name(b)]
    sdp = Layout(world_size=16, local_world_size=8, sequence_data_parallel=4, pipeline_first=True)
    assert layout_name(sdp) == "tp1 pp1 dp16 (sdp4) pipeline-first"
