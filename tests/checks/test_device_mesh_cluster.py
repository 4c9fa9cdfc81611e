"""The exported mesh spec as a real torch ``DeviceMesh`` on an 8-rank gloo ``LocalCluster``."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from fastdist_lab import Layout, LocalCluster
from fastdist_lab.checks import device_mesh_check
from fastdist_lab.errors import ConventionError


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(8, backend="gloo", local_world_size=4, timeout=60) as running:
        yield running


def layout(pipeline_first: bool, tp: int = 2, pp: int = 2, sdp: int = 2) -> Layout:
    return Layout(
        world_size=8,
        local_world_size=4,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        sequence_data_parallel=sdp,
        pipeline_first=pipeline_first,
        backend="gloo",
    )


@pytest.mark.parametrize("pipeline_first", [False, True])
def test_real_device_mesh_reproduces_layout_groups(cluster, pipeline_first):
    table = device_mesh_check(cluster, layout(pipeline_first))
    assert list(table.index) == list(layout(pipeline_first).dim_names)
    assert table["ok"].all(), table["first_mismatch"].tolist()
    assert table.loc["data", "flattened"] and not table.loc["tensor", "flattened"]
    assert table.loc["model_and_sequence_data", "group_size"] == 8


def test_applied_layout_and_a_second_check_reuse_the_workers(cluster):
    cluster.apply(layout(False, tp=2, pp=1, sdp=2))
    assert device_mesh_check(cluster)["ok"].all()
    # the temporary default group is gone again: the pool's own groups still work
    verification = cluster.apply(layout(True, tp=1, pp=2, sdp=2))
    assert verification.ok
    assert cluster.run(lambda ctx: dist.is_initialized()).values == [False] * 8


def test_fastest_first_names_given_to_torch_break_the_groups(cluster):
    wrong = ((2, 2, 2), ("tensor", "sequence_data", "pipeline"))  # torch wants slowest first
    lay = Layout(world_size=8, local_world_size=4, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    with pytest.raises(ConventionError, match="must be the axes"):
        device_mesh_check(cluster, lay, spec=wrong)
    wrong = ((2, 1, 2, 2), ("tensor", "batch_data", "sequence_data", "pipeline"))
    table = device_mesh_check(cluster, lay, spec=wrong)
    assert not table.loc["tensor", "ok"] and "rank 0: torch group [0, 4]" in table.loc["tensor", "first_mismatch"]
    assert table.loc["batch_data", "ok"]  # size 1 everywhere: trivially the same
