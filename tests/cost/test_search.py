"""The layout search: every row is what ``estimate(...).step`` says for it, ranked, fitting, within the limits;
and where groups sit on nodes, computed from strides, is what the ``Layout``'s real groups say."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdist_lab import Layout
from fastdist_lab.cost import (
    LIMITS,
    SCHEDULES,
    SETUP_COLUMNS,
    STEP_COLUMNS,
    TRUST_COLUMNS,
    Hardware,
    LayoutSearch,
    Training,
    Transformer,
    estimate,
    nodes_spanned,
    placement,
    search,
)
from fastdist_lab.errors import CostError

SMALL = Transformer.preset("llama2-7b", num_layers=8)


@pytest.fixture(scope="module")
def found() -> LayoutSearch:
    return search(SMALL, 32, hardware="h100-sxm-80gb", global_batch_size=64, top=None)


def test_every_row_is_the_step_of_its_layout_and_training(found):
    frame = found.frame
    assert list(frame.columns) == [*SETUP_COLUMNS, *STEP_COLUMNS, "peak_memory_bytes", *TRUST_COLUMNS]
    assert len(found) == len(frame) > 100 and found.searched >= len(found) + found.dropped
    for i in np.linspace(0, len(frame) - 1, 12).astype(int):
        report = found.estimate(int(i))
        step = report.step("h100-sxm-80gb")
        row = frame.iloc[int(i)]
        assert step.seconds == pytest.approx(row["seconds"], rel=1e-12)
        assert step.breakdown["seconds"].tolist() == pytest.approx(row[list(STEP_COLUMNS[4:])].tolist(), rel=1e-9)
        assert report.peak_bytes == row["peak_memory_bytes"]
        assert report.layout.world_size == 32 and report.sizes.microbatches == row["num_microbatches"]


def test_ranked_fitting_and_within_the_batch(found):
    frame = found.frame
    assert (np.diff(frame["seconds"].to_numpy()) >= 0).all()
    assert (frame["peak_memory_bytes"] <= Hardware.preset("h100-sxm-80gb").usable_bytes).all()
    assert (frame["global_batch_size"] == 64).all()
    products = frame["tensor_parallel"] * frame["pipeline_parallel"] * frame["data_parallel"]
    assert (products == 32).all()
    assert set(frame["schedule"]) == set(LIMITS["schedule"]) == set(SCHEDULES) - {"looped-bfs"}  # when not asked
    assert set(frame["recompute"]) == {"none", "full"}  # selective is what the fused attention already does
    assert not frame.duplicated(list(SETUP_COLUMNS)).any()


def test_the_top_rows_with_pruning_are_the_top_rows_of_everything(found):
    top = search(SMALL, 32, hardware="h100-sxm-80gb", global_batch_size=64, top=25)
    assert len(top) == 25
    assert top.frame["seconds"].tolist() == pytest.approx(found.frame["seconds"].head(25).tolist())


def test_limits_narrow_the_search():
    calls = []
    result = search(SMALL, 32, hardware="a100-sxm-80gb", global_batch_size=64, tensor_parallel=(4,),
                    recompute="full", zero_stage=(1,), schedule=("1f1b",), pipeline_first=False,
                    progress=lambda done, total, message: calls.append((done, total)))  # fmt: skip
    frame = result.frame
    assert set(frame["tensor_parallel"]) == {4} and set(frame["recompute"]) == {"full"}
    assert set(frame["zero_stage"]) <= {0, 1} and set(frame["schedule"]) == {"1f1b"}
    assert calls and calls[-1][0] == calls[-1][1]
    training = result.training(0)
    assert isinstance(training, Training) and training.recompute == "full"
    assert isinstance(result.layout(0), Layout) and "LayoutSearch(" in repr(result)


def test_a_batch_that_does_not_divide():
    # 5,128 GPUs: 641 is prime, so no data-parallel size divides 2,520 sequences (Calculon's 530B example).
    mtnlg = Transformer(hidden_size=20480, num_layers=105, num_attention_heads=128, vocab_size=50257,
                        seq_length=2048)  # fmt: skip
    with pytest.raises(CostError, match="allow_smaller_batch=True"):
        search(mtnlg, 5128, hardware="a100-sxm-80gb", global_batch_size=2520)
    result = search(mtnlg, 5128, hardware="a100-sxm-80gb", global_batch_size=2520, allow_smaller_batch=True, top=5)
    assert len(result) == 5 and (result.frame["global_batch_size"] <= 2520).all()
    per_sequence = result.frame["seconds"] / result.frame["global_batch_size"]
    assert (np.diff(per_sequence.to_numpy()) >= -1e-12).all()  # ranked by throughput when batches differ


def test_bad_arguments_are_named():
    for kwargs, message in [
        (dict(gpus=12, gpus_per_node=8), "gpus=12 must be a multiple of gpus_per_node=8"),
        (dict(gpus=8, colour="red"), "unknown search limit"),
        (dict(gpus=8, hardware=Hardware(100, 10)), "has no peak_tflops"),
        (dict(gpus=0), "gpus=0"),
    ]:
        arguments = {"hardware": "h100-sxm-80gb", "global_batch_size": 8, **kwargs}
        with pytest.raises(CostError, match=message):
            search(SMALL, **arguments)
    with pytest.raises(CostError, match="row 99"):
        search(SMALL, 8, hardware="h100-sxm-80gb", global_batch_size=8, top=3).layout(99)


@settings(deadline=None, max_examples=80)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 3, 4, 8]), st.sampled_from([1, 2, 4]),
       st.integers(1, 4), st.sampled_from([2, 4, 8, 16]), st.booleans())  # fmt: skip
def test_placement_from_strides_matches_the_layouts_groups(tp, pp, sdp, bdp, local, first):
    world = tp * pp * sdp * bdp
    if local % tp or (world % local and world > local):
        return
    local = min(local, world)
    layout = Layout(world_size=world, local_world_size=local, tensor_parallel=tp, pipeline_parallel=pp,
                    sequence_data_parallel=sdp, pipeline_first=first)  # fmt: skip
    placed = placement(tp, pp, sdp, layout.data_parallel, local, first)
    for dim in ("tensor", "sequence_data", "data"):
        assert placed[dim].nodes[0] == nodes_spanned(layout.groups(dim), local), dim
    groups = layout.groups("pipeline")
    nodes = groups // local
    crossing = (nodes != np.roll(nodes, -1, axis=1)).any(axis=0)
    assert placed["pipeline_links"][0].tolist() == crossing.tolist()
    report = estimate(layout, Transformer(hidden_size=64, num_layers=8, num_attention_heads=8, vocab_size=256,
                                          seq_length=64 * sdp * tp))  # fmt: skip
    assert report.setups.placement["data"].nodes[0] == placed["data"].nodes[0]
    as_arrays = placement(np.array([tp]), pp, np.array([sdp]), np.array([layout.data_parallel]), np.array([local]),
                          np.array([first]))  # fmt: skip  (the search's path; one set-up as ints is estimate's)
    for dim in ("tensor", "sequence_data", "data"):
        assert placed[dim].nodes.tolist() == as_arrays[dim].nodes.tolist(), dim
        assert placed[dim].per_node.tolist() == as_arrays[dim].per_node.tolist(), dim
    assert placed["pipeline_links"].tolist() == as_arrays["pipeline_links"].tolist()
