"""Pipeline schedule tables: equal to torch.distributed.pipelining's own schedule classes, and what they imply."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fastdist_lab.cost import SCHEDULE_KINDS, SCHEDULES, Training, check_schedule, estimate, schedule, stage_counts
from fastdist_lab.errors import CostError

TORCH_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B", "looped-bfs": "LoopedBFS",
               "zero-bubble": "InterleavedZeroBubble"}  # fmt: skip
COMPUTE = ("FORWARD", "FULL_BACKWARD", "BACKWARD_INPUT", "BACKWARD_WEIGHT")


@pytest.fixture(scope="module")
def torch_ops():
    """torch's private schedule visualiser (``_schedule_visualizer.get_schedule_ops``), behind a feature check."""
    try:
        from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops
    except ImportError as error:  # pragma: no cover - depends on the torch build
        pytest.fail(f"torch {torch.__version__} has no pipelining._schedule_visualizer.get_schedule_ops: {error}")
    logging.getLogger("torch.distributed.pipelining").setLevel(logging.ERROR)

    def ops(kind: str, pp: int, m: int, v: int) -> list[list[str]] | None:
        try:
            table = get_schedule_ops(TORCH_NAMES[kind], pp, m, v)
        except (ValueError, AssertionError):
            return None  # torch refuses these sizes
        return [[str(a) for a in rank if a is not None and a.computation_type.name in COMPUTE] for rank in table]

    return ops


def mismatches(ours, theirs: list[list[str]]) -> list[int]:
    """The ranks whose actions differ."""
    return [rank for rank in range(len(theirs)) if ours.actions(rank) != theirs[rank]]


SIZES = [(kind, pp, m, v)
         for kind in TORCH_NAMES
         for pp in (1, 2, 3, 4, 6, 8)
         for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24)
         for v in ((1,) if kind in ("gpipe", "1f1b") else (2, 3, 4))]  # fmt: skip


@pytest.mark.parametrize("kind", list(TORCH_NAMES))
def test_tables_equal_torchs_schedule_classes(torch_ops, kind):
    compared = 0
    for k, pp, m, v in (size for size in SIZES if size[0] == kind):
        theirs = torch_ops(k, pp, m, v)
        if theirs is None:
            if k == "1f1b" and m < pp:
                continue  # torch's Schedule1F1B refuses fewer micro-batches than ranks; Megatron-LM runs them
            with pytest.raises(CostError):  # we refuse what torch refuses
                schedule(k, pp, m, v)
            continue
        ours = schedule(k, pp, m, v)
        wrong = mismatches(ours, theirs)
        if k == "1f1b":
            # torch 2.13's Schedule1F1B._get_pipeline_order numbers the last rank's forwards from 1 (F1 .. Fm), while
            # Schedule1F1B._step_microbatches runs F0 first ("Last stage has 1 warmup"): pinned, ours runs F0.
            last = pp - 1
            assert wrong in ([], [last])
            relabelled = [f"{last}F{int(a.split('F')[1]) + 1}" if "F" in a else a for a in ours.actions(last)]
            assert relabelled == theirs[last], (pp, m)
            wrong = [r for r in wrong if r != last]
        assert wrong == [], (k, pp, m, v)
        compared += 1
    assert compared > 20


def test_zero_bubble_with_one_stage_per_rank_equals_torchs_rank_operations():
    from torch.distributed.pipelining.schedules import ScheduleInterleavedZeroBubble

    for pp in range(1, 9):
        for m in range(1, 25):
            rounds = max(1, m // pp)
            if m % rounds:
                continue
            state = SimpleNamespace(n_local_stages=1, microbatches_per_round=m // rounds, pp_group_size=pp,
                                    _n_microbatches=m)  # fmt: skip
            ours = schedule("zero-bubble", pp, m, 1)
            for rank in range(pp):
                theirs = ScheduleInterleavedZeroBubble._calculate_single_rank_operations(state, rank)
                assert ours.actions(rank) == [str(a) for a in theirs if a is not None]


def test_looped_bfs_with_one_stage_per_rank_equals_torchs_rank_operations():
    """torch's visualiser builds multi-stage schedules with two stages per rank at least; the class runs one."""
    from torch.distributed.pipelining.schedules import ScheduleLoopedBFS

    for pp in range(1, 7):
        for m in range(1, 13):
            state = SimpleNamespace(_stages=[None], pp_group_size=pp, _n_microbatches=m)
            ours = schedule("looped-bfs", pp, m, 1)
            for rank in range(pp):
                theirs = ScheduleLoopedBFS._calculate_single_rank_operations(state, rank)
                assert ours.actions(rank) == [str(a) for a in theirs if a is not None]


def test_every_schedule_is_torchs_class_priced_and_runnable():
    import torch.distributed.pipelining as pipelining

    from fastdist_lab import Layout

    assert set(SCHEDULES) == set(TORCH_NAMES) == set(SCHEDULE_KINDS)
    layout = Layout(world_size=8, pipeline_parallel=4, sequence_data_parallel=1)
    seconds = {}
    for name, kind in SCHEDULE_KINDS.items():
        assert kind.torch_class == f"Schedule{TORCH_NAMES[name]}" and hasattr(pipelining, kind.torch_class)
        v = kind.min_virtual_stages
        seconds[name] = estimate(layout, "llama2-7b", Training(schedule=name, virtual_pipeline_stages=v,
                                                               num_microbatches=8)).step().seconds  # fmt: skip
    assert all(value > 0 for value in seconds.values())
    assert seconds["zero-bubble"] < seconds["1f1b"] <= seconds["gpipe"] * (1 + 1e-9)


def test_check_schedule_names_the_bad_value_in_one_line():
    assert check_schedule("looped-bfs", 4, 3, 2) == 8 and check_schedule("1f1b", 4, 2) == 4
    for args, kwargs, message in [
        (("zero-bubbles", 2, 2), {}, "schedule='zero-bubbles' must be one of 'gpipe'"),
        (("1f1b", 4, 2), {"run": True}, "needs num_microbatches >= pipeline_parallel=4 to run, got 2"),
        (("gpipe", 2, 0), {}, "num_microbatches=0"),
        (("zero-bubble", 2, 4, 0), {}, "virtual_pipeline_stages=0"),
    ]:
        with pytest.raises(CostError, match=message) as caught:
            check_schedule(*args, **kwargs)
        assert "\n" not in str(caught.value)
    with pytest.raises(CostError, match="virtual_pipeline_stages=3 must be 1"):
        Training(schedule="gpipe", virtual_pipeline_stages=3)


def test_a_broken_table_is_reported(torch_ops):
    ours = schedule("interleaved-1f1b", 4, 8, 2)
    theirs = torch_ops("interleaved-1f1b", 4, 8, 2)
    assert mismatches(ours, theirs) == []
    broken = [list(rank) for rank in theirs]
    broken[2][3], broken[2][4] = broken[2][4], broken[2][3]
    assert mismatches(ours, broken) == [2]


def test_notation_and_errors():
    table = schedule("1f1b", 2, 3)
    assert table.actions(1) == ["1F0", "1B0", "1F1", "1B1", "1F2", "1B2"]
    assert table.actions(0)[:3] == ["0F0", "0F1", "0B0"]
    assert str(table.steps(0)[0]) == "0F0" and table.num_stages == 2
    assert schedule("interleaved-1f1b", 2, 4, 2).actions(1)[0] == "1F0"
    assert "W" in "".join(schedule("zero-bubble", 2, 4, 1).actions(0))
    frame = schedule("gpipe", 2, 2).frame()
    assert list(frame.columns) == ["rank", "position", "stage", "kind", "microbatch"] and len(frame) == 8
    for args, message in [
        (("pipedream", 2, 2), "schedule='pipedream'"),
        (("interleaved-1f1b", 2, 4, 1), "needs virtual_pipeline_stages >= 2"),
        (("1f1b", 2, 4, 2), "runs one stage per rank"),
        (("interleaved-1f1b", 4, 9, 2), "num_microbatches=9 to be a multiple of its 2 rounds"),
        (("gpipe", 0, 4), "pipeline_parallel=0"),
    ]:
        with pytest.raises(CostError, match=message):
            schedule(*args)
    with pytest.raises(CostError, match="rank=5"):
        table.actions(5)


def test_in_flight_micro_batches():
    for pp, m in [(4, 8), (4, 2), (8, 16)]:
        assert schedule("1f1b", pp, m).in_flight().tolist() == [min(m, pp - r) for r in range(pp)]
        assert schedule("gpipe", pp, m).in_flight().tolist() == [m] * pp
    # Interleaved 1F1B, m >= 2 pp: rank 0 holds its warm-up (v - 1) pp + 2 (pp - 1) chunks plus one.
    for pp, v in [(4, 2), (4, 3), (8, 2)]:
        counts = schedule("interleaved-1f1b", pp, 2 * pp, v).in_flight()
        assert counts[0::pp].sum() == (v - 1) * pp + 2 * (pp - 1) + 1


def full_counts(kind: str, pp: int, m: int, v: int) -> list[np.ndarray]:
    table = schedule(kind, pp, m, v)
    releasing = "W" if kind == "zero-bubble" else "B"
    out = []
    for rank, actions in enumerate(table.table):
        held, rows = np.zeros(v, dtype=int), []
        for a in actions:
            held[(a.stage - rank) // pp] += 1 if a.kind == "F" else -1 if a.kind == releasing else 0
            rows.append(held.copy())
        out.append(np.array(rows))
    return out


@given(st.sampled_from(list(TORCH_NAMES)), st.integers(1, 8), st.integers(1, 48), st.integers(1, 4),
       st.lists(st.floats(0.1, 10), min_size=4, max_size=4))  # fmt: skip
def test_stage_counts_without_the_table_have_the_tables_peak(kind, pp, m, v, weights):
    v = 1 if kind in ("gpipe", "1f1b") else max(v, 2 if kind == "interleaved-1f1b" else 1)
    try:
        schedule(kind, pp, m, v)
    except CostError:
        return
    fast, slow = stage_counts(kind, pp, m, v), full_counts(kind, pp, m, v)
    w = np.array(weights[:v])
    for rank in range(pp):
        assert (fast[rank] @ w).max() == pytest.approx((slow[rank] @ w).max())
