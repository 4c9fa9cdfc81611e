"""One set-up priced on plain numbers (``memory.as_numbers``, what ``estimate`` does) gives exactly the row the
same formulas give on arrays of set-ups (what ``search`` does); the step-time placement of a one-layout estimate is
computed when first read (issue 26: both made ``estimate`` as fast as before ``Setups``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdist_lab import Layout
from fastdist_lab.cost import Training, Transformer, estimate
from fastdist_lab.cost.formulas.memory import as_numbers, rank_peaks, stage_memory
from fastdist_lab.cost.formulas.schedules import stage_counts
from fastdist_lab.cost.formulas.setup_columns import PlacementOnDemand, Setups, placement
from fastdist_lab.cost.formulas.sizes import Sizes
from fastdist_lab.errors import CostError

MODEL = Transformer.preset("llama2-7b")
SCHEDULES = [("1f1b", 1), ("gpipe", 1), ("interleaved-1f1b", 2), ("zero-bubble", 1), ("zero-bubble", 2)]


def one(tp: int, pp: int, sdp: int, bdp: int, training: Training) -> Setups:
    """The one-row ``Setups`` that ``estimate`` builds for this layout."""
    world = tp * pp * sdp * bdp
    layout = Layout(world_size=world, local_world_size=world, tensor_parallel=tp, pipeline_parallel=pp,
                    sequence_data_parallel=sdp)  # fmt: skip
    return Setups.single(layout, MODEL, training, Sizes.of(layout, MODEL, training).sequence_parallel)


def stacked(rows: list[Setups]) -> Setups:
    """The set-ups of ``rows`` (sharing model, schedule and pipeline) as one ``Setups`` with a row each."""
    arrays = {
        field.name: np.concatenate([getattr(row, field.name) for row in rows])
        for field in dataclasses.fields(Setups)
        if isinstance(getattr(rows[0], field.name), np.ndarray) and field.name != "chunk_layers"
    }
    return dataclasses.replace(rows[0], **arrays)


@st.composite
def row_sets(draw):
    """1-4 set-ups of llama2-7b sharing a pipeline size and schedule, differing in everything per set-up."""
    schedule, v = draw(st.sampled_from(SCHEDULES))
    pp = draw(st.sampled_from([1, 2, 4])) if v == 1 else draw(st.sampled_from([2, 4]))
    microbatches = draw(st.sampled_from([pp, 2 * pp, 4 * pp]))
    rows = []
    for _ in range(draw(st.integers(1, 4))):
        training = Training(
            micro_batch_size=draw(st.integers(1, 3)),
            num_microbatches=microbatches,
            zero_stage=draw(st.integers(0, 3)),
            sequence_tensor_parallel=draw(st.booleans()),
            recompute=draw(st.sampled_from(["none", "selective", "full"])),
            flash_attention=draw(st.booleans()),
            schedule=schedule,
            virtual_pipeline_stages=v,
        )
        tp, sdp = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2, 4]))
        rows.append(one(tp, pp, sdp, draw(st.sampled_from([1, 2, 3])), training))
    return rows


@settings(max_examples=150, deadline=None)
@given(row_sets())
def test_one_setup_on_numbers_is_its_row_of_the_array_formulas(rows):
    table = stage_memory(stacked(rows))
    for index, row in enumerate(rows):
        numbers = as_numbers(row)
        assert isinstance(numbers.tensor_parallel, int) and isinstance(numbers.chunk_layers, np.ndarray)
        alone = stage_memory(numbers)
        assert set(alone) == set(table)
        for name, values in alone.items():
            expected = table[name] if name in ("layers", "moe_layers") else table[name][index]
            assert values.shape == expected.shape and values.dtype == expected.dtype, name
            assert np.array_equal(values, expected), name


def test_a_changed_number_changes_the_row():
    """The comparison above can fail: the same set-up with another tensor-parallel size gives another row."""
    row = as_numbers(one(2, 2, 1, 2, Training(num_microbatches=4)))
    other = dataclasses.replace(row, tensor_parallel=4)
    assert not np.array_equal(stage_memory(row)["parameters"], stage_memory(other)["parameters"])


def test_as_numbers_takes_one_setup():
    rows = [one(2, 2, 1, 2, Training(num_microbatches=4)), one(4, 2, 1, 1, Training(num_microbatches=4))]
    with pytest.raises(CostError, match="one set-up, got 2"):
        as_numbers(stacked(rows))


def test_rank_peaks_are_the_schedule_tables_maxima():
    for schedule in ("1f1b", "gpipe", "zero-bubble"):
        peaks = rank_peaks(schedule, 4, 8)
        assert peaks.tolist() == [int(counts.max()) for counts in stage_counts(schedule, 4, 8, 1)]
        assert not peaks.flags.writeable


def test_an_estimates_placement_is_computed_when_first_read():
    layout = Layout(world_size=64, local_world_size=8, tensor_parallel=2, pipeline_parallel=4, pipeline_first=True)
    report = estimate(layout, "llama2-7b")
    lazy = report.setups.placement
    assert isinstance(lazy, PlacementOnDemand)
    assert lazy._value is None  # not computed by estimate itself
    eager = placement(2, 4, 1, layout.data_parallel, 8, True)
    assert list(lazy) == list(eager) and len(lazy) == len(eager)
    for name, value in eager.items():
        if name == "pipeline_links":
            assert np.array_equal(lazy[name], value)
        else:
            assert np.array_equal(lazy[name].nodes, value.nodes) and np.array_equal(lazy[name].per_node, value.per_node)
