"""``SimulatedCluster`` speaks ``LocalCluster``'s API in both modes: apply, run, streams, errors, deadlines, close.

Small worlds (8-64 ranks) for the behaviour, and one wider world per mode (threads 256, fake 1,024) compared with
the layout group by group. Bigger worlds belong in ``benchmarks/bench_scale.py`` and the at-scale notebook.
"""

from __future__ import annotations

import threading
import time

import pytest

from fastdist_lab import SimulatedCluster
from fastdist_lab.checks import compare_streams, verify_groups
from fastdist_lab.checks.layout_check import check_layout
from fastdist_lab.config import DIM_NAMES
from fastdist_lab.errors import ClusterError, ClusterTimeout, LayoutError
from fastdist_lab.layout import Layout
from fastdist_lab.runtime.verification import MODES

THREAD_PREFIX = "fastdist-sim"
"""The name prefix of every thread of a simulated world (``runtime.rank_threads``)."""
WORLDS = [  # (world size, ranks per node, parallel factors)
    (8, 8, dict(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)),
    (16, 4, dict(tensor_parallel=2, pipeline_parallel=2)),
    (64, 8, dict(tensor_parallel=4, pipeline_parallel=2, sequence_data_parallel=2)),
]


def sim_threads() -> list[threading.Thread]:
    """The live threads of simulated worlds in this process."""
    return [thread for thread in threading.enumerate() if thread.name.startswith(THREAD_PREFIX)]


def assert_groups_match(verification, layout: Layout) -> None:
    """Every row passed, and the rows of each dim are exactly the layout's groups of that dim, in order."""
    assert verification.ok, verification
    for dim in DIM_NAMES:
        rows = [row for row in verification.rows if row["dim"] == dim]
        assert [row["members"] for row in rows] == layout.groups(dim).tolist(), dim
        assert [row["group"] for row in rows] == list(range(len(rows)))


@pytest.fixture(scope="module", params=["threads", "fake"])
def sim8(request):
    """An 8-rank simulated world of each mode, shared by the module's small tests."""
    with SimulatedCluster(8, request.param, local_world_size=8, timeout=30, progress=False) as cluster:
        yield cluster


@pytest.mark.parametrize("mode", ["threads", "fake"])
@pytest.mark.parametrize(("world", "local", "factors"), WORLDS, ids=[str(w[0]) for w in WORLDS])
def test_apply_gives_the_layouts_groups_in_both_orders(mode, world, local, factors):
    with SimulatedCluster(world, mode, local_world_size=local, timeout=60, progress=False) as cluster:
        assert (cluster.mode, cluster.world_size, cluster.local_world_size) == (mode, world, local)
        for pipeline_first in (False, True):
            layout = Layout(world_size=world, local_world_size=local, pipeline_first=pipeline_first, **factors)
            built = cluster.apply(layout)  # the pools' membership, no collective
            assert_groups_match(built, layout)
            assert not built.collectives and "no collective ran" in built.summary()
            verification = verify_groups(cluster, layout)
            assert_groups_match(verification, layout)
            assert verification.mode == mode and cluster.layout is layout
            assert MODES[mode] in verification.summary()
            ranks = verification.results
            checked = [row for record in ranks for row in record.value["dims"] if row["size"] > 1]
            if mode == "fake":
                assert "no collective ran" in verification.summary()
                assert not any("reduced" in row or "gathered" in row for row in checked)
            else:
                assert "real collectives" in verification.summary()
                assert all("reduced" in row for row in checked)


def test_run_gives_each_rank_its_context(sim8, layout_of):
    layout = layout_of(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    sim8.apply(layout)

    def context(ctx):
        return (
            ctx.rank,
            ctx.world_size,
            ctx.config.rank,
            ctx.config.tensor_rank,
            ctx.device.type,
            ctx.distributed.tensor_group.size(),
            ctx.distributed.pool.rank,
        )

    results = sim8.run(context)
    assert results.ok, results
    expected = [(r, 8, r, int(layout.dim_rank("tensor")[r]), "cpu", 2, r) for r in range(8)]
    assert results.values == expected


def test_the_real_streams_match_the_prediction(sim8, layout_of):
    layout = layout_of(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2, pipeline_first=True)
    sim8.apply(layout)
    frame = compare_streams(sim8, step=3, draws=2)
    assert frame.attrs["matches"], frame[~frame["ok"]]
    check = check_layout(sim8, layout)
    assert check.ok and check.mode == sim8.mode
    assert check.streams is not None and check.streams.attrs["matches"]
    assert (check.mesh is not None) == (sim8.mode == "fake")


def _raise_on_rank_2(ctx):
    if ctx.rank == 2:
        raise KeyError("rank 2 refuses")
    return ctx.rank * 10


def test_a_raising_rank_is_reported_for_that_rank(sim8):
    results = sim8.run(_raise_on_rank_2)
    assert not results.ok
    assert [record.rank for record in results if not record.ok] == [2]
    assert results[2].error.type == "KeyError" and "rank 2 refuses" in results[2].error.message
    assert [results[r].value for r in range(8) if r != 2] == [r * 10 for r in range(8) if r != 2]
    with pytest.raises(KeyError, match="rank 2 refuses") as caught:
        results.raise_first()
    assert "on rank 2" in str(caught.value.__cause__)
    assert sim8.running  # a raising rank is an answer: the world goes on


@pytest.mark.parametrize("mode", ["threads", "fake"])
def test_a_hung_rank_times_out_with_its_stack_and_the_next_call_starts_fresh(mode):
    release = threading.Event()

    def hang_on_rank_3(ctx):
        ctx.state["mark"] = True
        if ctx.rank == 3:
            release.wait(60)
        return ctx.rank

    before = len(sim_threads())
    cluster = SimulatedCluster(8, mode, local_world_size=8, timeout=30, progress=False)
    try:
        with pytest.raises(ClusterTimeout) as caught:
            cluster.run(hang_on_rank_3, timeout=1)
        error = caught.value
        assert error.ranks[0] == 3 and (mode == "fake" or error.ranks == [3])  # fake: later ranks wait their turn
        assert "hang_on_rank_3" in error.stacks[3] and "release.wait" in error.stacks[3]
        assert "rank 3 did not answer" in str(error) or "ranks 3-7 did not answer" in str(error)
        assert not cluster.running
        fresh = cluster.run(lambda ctx: (ctx.rank, dict(ctx.state)))
        assert fresh.values == [(rank, {}) for rank in range(8)]  # new ranks: the old state is gone
    finally:
        cluster.close()
        cluster.close()  # idempotent
        release.set()  # the abandoned rank thread leaves its user code, then ends
    for thread in sim_threads()[before:]:
        thread.join(timeout=10)
    assert len(sim_threads()) == before


def test_a_stopped_threaded_world_ends_its_dispatcher_before_stop_returns():
    """Every turn (``runtime.turns``) is held elsewhere (as by stopped ranks that took a turn with their call and
    never ran it), so the dispatcher waits for a turn to hand rank 0 its call when the generation stops. ``stop``
    must end the dispatcher before it returns, not a turn wait later: CI once found a closed world's dispatcher
    still alive (issue 30)."""
    from fastdist_lab.runtime.channel import Call
    from fastdist_lab.runtime.rank_loop import RankContext
    from fastdist_lab.runtime.rank_threads import ThreadPerRank

    runner = ThreadPerRank([RankContext(rank, 2, None) for rank in range(2)], "fastdist-sim-test", None)
    held = [runner.turns.take() for _ in range(runner.turns.count)]
    assert all(held)
    try:
        runner.send(Call(1, (len, ([],))))
        time.sleep(0.1)  # the dispatcher is now waiting (up to TURN_WAIT) for a turn
        assert runner.dispatcher.is_alive()
        runner.stop()
        assert not runner.dispatcher.is_alive(), "stop returned with the dispatcher still waiting for a turn"
        assert not any(thread.is_alive() for thread in runner.threads)
    finally:
        for _ in held:
            runner.turns.give()


@pytest.mark.parametrize("mode", ["threads", "fake"])
def test_close_ends_every_rank_thread_and_the_context_manager_closes(mode):
    before = {thread.ident for thread in sim_threads()}
    with SimulatedCluster(8, mode, local_world_size=8, timeout=30, progress=False) as cluster:
        cluster.apply(Layout(world_size=8, local_world_size=8, tensor_parallel=2))
        started = [thread for thread in sim_threads() if thread.ident not in before]
        assert len(started) == (9 if mode == "threads" else 1)  # a thread per rank and a dispatcher, or one
        assert cluster.running
    assert not cluster.running and cluster.layout is None
    cluster.close()
    for thread in started:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in started)
    with pytest.raises(ClusterError, match="closed"):
        cluster.run(lambda ctx: ctx.rank)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(world_size=8, mode="bogus"), "mode='bogus'"),
        (dict(world_size=8, mode="processes"), "mode='processes'"),
        (dict(world_size=0), "world_size=0"),
        (dict(world_size="8"), "world_size='8'"),
        (dict(world_size=8, local_world_size=3), "local_world_size=3"),
        (dict(world_size=8, timeout=-1), "timeout=-1"),
    ],
)
def test_bad_arguments_name_the_value(kwargs, message):
    before = len(sim_threads())
    with pytest.raises(LayoutError) as caught:
        SimulatedCluster(**kwargs, progress=False)
    assert message in str(caught.value)
    assert len(sim_threads()) == before


def test_a_layout_of_another_world_size_names_it(sim8):
    with pytest.raises(LayoutError, match="world_size=16"):
        sim8.apply(Layout(world_size=16, local_world_size=8))


@pytest.mark.parametrize(
    ("mode", "world", "factors"),
    [
        ("threads", 256, dict(tensor_parallel=8, pipeline_parallel=4, sequence_data_parallel=2)),
        ("fake", 1024, dict(tensor_parallel=8, pipeline_parallel=8, sequence_data_parallel=2)),
    ],
)
def test_a_wider_world_matches_the_layout_group_by_group(mode, world, factors):
    layout = Layout(world_size=world, local_world_size=8, **factors)
    with SimulatedCluster(world, mode, local_world_size=8, progress=False) as cluster:
        verification = cluster.apply(layout)
    assert_groups_match(verification, layout)
    assert verification.mode == mode and len(verification.results) == world
