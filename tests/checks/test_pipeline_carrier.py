"""torch's pipelining on the pool's groups: what torch 2.13 lacks (no point-to-point in its threaded groups), the
pair-broadcast carrier that stands in for it, c10d's registry entered and left, and the schedule names."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.distributed

from fastdist_lab import Layout, LayoutError, SimulatedCluster
from fastdist_lab.checks.pipeline_carrier import (
    PairBroadcast,
    Solo,
    pipeline_carrier,
    registered,
    require_pipelining,
)
from fastdist_lab.cost import SCHEDULE_KINDS, check_schedule
from fastdist_lab.runtime.inprocess import threaded_group


def test_torchs_threaded_group_has_no_point_to_point():
    """Pinned (torch 2.13): why threads need another carrier for the pipeline's transfers."""
    errors = []

    def member(rank: int) -> None:
        group = threaded_group("fastdist-test-p2p", rank, 2)
        try:
            if rank == 0:
                group.send([torch.ones(2)], 1, 0)
            else:
                group.recv([torch.zeros(2)], 0, 0)
        except Exception as error:  # noqa: BLE001 - what torch raises is the point
            errors.append(type(error).__name__)

    threads = [threading.Thread(target=member, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(errors) == 2 and not any(thread.is_alive() for thread in threads)


def test_pipelining_and_the_registry_are_there():
    pipelining = require_pipelining()
    assert all(hasattr(pipelining, kind.torch_class) for kind in SCHEDULE_KINDS.values())
    from torch.distributed import distributed_c10d

    assert isinstance(distributed_c10d._world.pg_group_ranks, dict)


def _fifo(ctx):
    config = ctx.config
    members = tuple(config.distributed_dims["pipeline"].global_ranks)
    carrier = pipeline_carrier(ctx.pool, ctx.distributed.pipeline_group, members, config.pipeline_rank)
    kind = type(carrier).__name__
    from torch.distributed import distributed_c10d

    with registered(carrier, members):
        registered_there = carrier in distributed_c10d._world.pg_group_ranks
        if config.pipeline_rank == 0:
            for value in range(3):
                torch.distributed.isend(torch.full((2,), float(value)), group=carrier, group_dst=1).wait()
            got = None
        else:
            buffers = [torch.zeros(2) for _ in range(3)]
            works = [torch.distributed.irecv(buffer, group=carrier, group_src=0) for buffer in buffers]
            for work in reversed(works):  # waited out of order: still received in the order sent
                work.wait()
            got = [float(buffer[0]) for buffer in buffers]
    left = carrier not in distributed_c10d._world.pg_group_ranks
    return kind, registered_there, left, got, (members[0], members[1]) in ctx.pool.groups


def test_pair_broadcasts_carry_a_pipelines_transfers_in_order():
    with SimulatedCluster(2, "threads", timeout=30, progress=False) as cluster:
        cluster.apply(Layout(world_size=2, pipeline_parallel=2, backend="gloo"))
        values = cluster.run(_fifo).values
    assert values[0][:3] == ("PairBroadcast", True, True) and values[1][3] == [0.0, 1.0, 2.0]
    assert values[0][4] and values[1][4]  # the (sender, receiver) group came from each rank's pool


def test_a_pipeline_of_one_rank_carries_through_a_queue():
    solo = Solo()
    assert isinstance(pipeline_carrier(None, None, (3,), 0), Solo)
    solo.send([torch.ones(2)], 0).wait()
    buffer = torch.zeros(2)
    solo.recv([buffer], 0).wait()
    assert buffer.tolist() == [1.0, 1.0] and (solo.rank(), solo.size()) == (0, 1)
    assert PairBroadcast(None, (4, 7), 1).size() == 2


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("zero-bubbles", 2, 4, 2), "schedule='zero-bubbles' must be one of 'gpipe', '1f1b'"),
        (("1f1b", 4, 2, 1), "schedule='1f1b' needs num_microbatches >= pipeline_parallel=4 to run, got 2"),
        (("gpipe", 2, 0, 1), "num_microbatches=0 must be"),
        (("interleaved-1f1b", 2, 4, 0), "virtual_pipeline_stages=0 must be"),
        (("1f1b", 4, 4, 2), "schedule='1f1b' runs one stage per rank: virtual_pipeline_stages=2 must be 1"),
    ],
)
def test_bad_schedules_are_named(arguments, message):
    """The one ``check_schedule`` (``cost``), as the training step calls it: what torch would refuse to run."""
    with pytest.raises(LayoutError, match="^" + message):
        check_schedule(*arguments, run=True, error=LayoutError)


def test_stages_per_schedule():
    assert check_schedule("1f1b", 4, 4, 1, run=True) == 4 and check_schedule("zero-bubble", 4, 4, 2) == 8
    assert check_schedule("interleaved-1f1b", 4, 8, 2) == 8 and check_schedule("looped-bfs", 2, 1, 3) == 6
