"""Pins the behaviour of torch's private in-process process groups that simulated worlds rely on
(``runtime.inprocess``), and the feature check that refuses a torch without them.

If one of these fails after a torch upgrade, simulated worlds need looking at before ``TESTED_TORCH`` moves on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from fastdist_lab.runtime import inprocess

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _in_threads(size: int, body) -> list:
    """Run ``body(rank)`` in ``size`` threads at once; returns each thread's value (re-raises the first error)."""
    values: list = [None] * size
    errors: list[BaseException] = []

    def one(rank: int) -> None:
        try:
            values[rank] = body(rank)
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            errors.append(error)

    threads = [threading.Thread(target=one, args=(rank,), name=f"pin-inprocess-{rank}") for rank in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a threaded collective did not return"
    if errors:
        raise errors[0]
    return values


def test_the_tested_torch_is_the_one_installed():
    assert torch.__version__.startswith(inprocess.TESTED_TORCH), (torch.__version__, inprocess.TESTED_TORCH)
    backends = inprocess.require_inprocess()
    assert backends is inprocess.require_inprocess()  # imported and checked once


def test_threaded_groups_reduce_and_gather_across_threads_under_their_name():
    size = 4

    def rank_body(rank: int) -> tuple[list[int], list[int], list[int]]:
        # Two groups of the same size under different names run side by side without mixing their collectives.
        first = inprocess.threaded_group("pin/first", rank, size)
        second = inprocess.threaded_group("pin/second", size - 1 - rank, size)
        assert (first.rank(), first.size(), first.pg_name) == (rank, size, "pin/first")
        total = torch.tensor([1, rank], dtype=torch.int64)
        first.allreduce([total]).wait()
        other = torch.tensor([10 * rank], dtype=torch.int64)
        second.allreduce([other]).wait()
        gathered = [torch.zeros(1, dtype=torch.int64) for _ in range(size)]
        second.allgather([gathered], [torch.tensor([rank])]).wait()
        return total.tolist(), other.tolist(), torch.cat(gathered).tolist()

    try:
        values = _in_threads(size, rank_body)
    finally:
        torch.autograd.set_multithreading_enabled(True)  # creating threaded groups turns it off
    for total, other, gathered in values:
        assert total == [size, sum(range(size))]
        assert other == [10 * sum(range(size))]
        assert gathered == [size - 1 - slot for slot in range(size)]  # group-rank order of the second group


def test_fake_groups_have_a_rank_and_a_size_and_collectives_that_return_at_once():
    group = inprocess.fake_group(3, 8)
    assert (group.rank(), group.size()) == (3, 8)
    tensor = torch.arange(4)
    work = group.allreduce([tensor])
    assert work.wait() is True
    assert tensor.tolist() == [0, 1, 2, 3]  # nothing was reduced: fake collectives compute nothing
    gathered = [torch.zeros(1, dtype=torch.int64) for _ in range(8)]
    group.allgather([gathered], [torch.tensor([3])]).wait()  # returns at once, no other member exists


def test_the_fake_store_is_a_store_that_holds_nothing():
    store = inprocess.fake_store()
    assert isinstance(store, dist.Store)
    with pytest.raises(RuntimeError):
        store.set("key", "value")


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_a_fake_default_group_builds_and_slices_a_device_mesh_without_a_gpu(device_type):
    from torch.distributed.device_mesh import init_device_mesh

    assert not dist.is_initialized()
    dist.init_process_group("fake", store=inprocess.fake_store(), rank=13, world_size=16)
    try:
        mesh = init_device_mesh(device_type, (2, 2, 4), mesh_dim_names=("pp", "dp", "tp"))
        assert mesh.device_type == device_type
        assert dist.get_process_group_ranks(mesh["tp"].get_group()) == [12, 13, 14, 15]
        assert dist.get_process_group_ranks(mesh["dp"].get_group()) == [9, 13]
        assert dist.get_process_group_ranks(mesh["pp"].get_group()) == [5, 13]
        assert mesh["tp"].get_local_rank() == 1
        flat = mesh["dp", "tp"]._flatten("dp_tp")
        assert dist.get_process_group_ranks(flat.get_group()) == list(range(8, 16))
    finally:
        dist.destroy_process_group()


FEATURE_CHECK = textwrap.dedent(
    """
    import json, sys
    import torch
    from fastdist_lab import InProcessUnavailable, SimulatedCluster
    from fastdist_lab.runtime import inprocess

    def attempt():
        inprocess._backends = None  # the check caches its answer; each case starts afresh
        try:
            SimulatedCluster(8, local_world_size=8, progress=False).close()
        except InProcessUnavailable as error:
            return str(error)
        return None

    out = {"version": torch.__version__}
    # First, before anything imported them (a package keeps its imported submodules as attributes).
    sys.modules["torch.testing._internal.distributed.fake_pg"] = None
    out["unimportable"] = attempt()
    del sys.modules["torch.testing._internal.distributed.fake_pg"]
    from torch.testing._internal.distributed import fake_pg, multi_threaded_pg
    saved = multi_threaded_pg.ProcessLocalGroup._cur_coll_on_pgs
    del multi_threaded_pg.ProcessLocalGroup._cur_coll_on_pgs
    out["changed"] = attempt()
    multi_threaded_pg.ProcessLocalGroup._cur_coll_on_pgs = saved
    saved = fake_pg.FakeStore
    del fake_pg.FakeStore
    out["no_fake_store"] = attempt()
    fake_pg.FakeStore = saved
    out["restored"] = attempt()
    print(json.dumps(out))
    """
)


def test_a_torch_without_the_in_process_groups_is_refused_with_its_version():
    # In a fresh interpreter: the feature check caches its answer in this one.
    done = subprocess.run(
        [sys.executable, "-c", FEATURE_CHECK],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])},
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["restored"] is None  # the same torch, intact, is accepted
    for case, missing in (
        ("changed", "_cur_coll_on_pgs"),
        ("no_fake_store", "FakeStore"),
        ("unimportable", "cannot import torch.testing._internal.distributed"),
    ):
        message = out[case]
        assert message is not None, case
        assert "\n" not in message, message
        assert f"this torch ({out['version']})" in message and missing in message, message
        assert f"tested with torch {inprocess.TESTED_TORCH}" in message, message
