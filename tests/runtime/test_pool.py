"""ProcessGroupPool and Distributed: in-process checks (world of one) and real groups on the shared cluster."""

from __future__ import annotations

import pytest

from fastdist_lab import DistributedConfig
from fastdist_lab.errors import ClusterError
from fastdist_lab.runtime import Distributed, ProcessGroupPool
from fastdist_lab.seeds import generator_seeds


def test_world_of_one_has_no_groups_and_seeds_match():
    import torch

    config = DistributedConfig(world_size=1, rank=0, local_world_size=1, backend="gloo", seed=99)
    distributed = Distributed(config, use_cpu=True)
    assert distributed.world_group is None and distributed.tensor_group is None
    assert distributed.device == torch.device("cpu")
    expected = generator_seeds(config)
    assert distributed.pp_init_generator.initial_seed() == expected["pp_init"]
    assert distributed.tp_init_generator.initial_seed() == expected["tp_init"]
    assert torch.random.default_generator.initial_seed() == expected["default_cpu"]
    distributed.set_step(7, "validation")
    later = generator_seeds(config, 7, "validation")
    assert distributed.pp_generator.initial_seed() == later["pp"]
    assert distributed.tp_generator.initial_seed() == later["tp"]
    distributed.shutdown()


def test_nccl_without_gpus_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this check is about machines without CUDA")
    with pytest.raises(ClusterError, match="NCCL needs one GPU per rank.*use the gloo backend"):
        ProcessGroupPool(0, 1, 1, use_cpu=False, backend="nccl")
    from fastdist_lab import LocalCluster

    with pytest.raises(ClusterError, match="NCCL needs one GPU per rank"):
        LocalCluster(8, backend="nccl", progress=False)


def test_nccl_on_cpu_with_many_ranks_is_refused():
    with pytest.raises(ClusterError, match="use the gloo backend"):
        ProcessGroupPool(0, 2, 2, use_cpu=True, backend="nccl")


def _dedupe(ctx):
    pool = ctx.pool
    as_range = pool.get_process_group(range(0, ctx.world_size), ctx.rank)
    as_tuple = pool.get_process_group(tuple(range(ctx.world_size)), ctx.rank)
    return as_range is as_tuple and as_range is ctx.distributed.world_group


def test_range_and_tuple_with_equal_members_are_one_group(cluster):
    results = cluster.run(_dedupe)
    assert results.ok, results
    assert results.values == [True] * cluster.world_size


def _pool_summary(ctx):
    dims = ctx.config.distributed_dims.values()
    distinct = {tuple(d.global_ranks) for d in dims if d.size > 1}
    return {
        "distinct": len(distinct),
        "mine": sorted(len(m) for m in distinct),
        "pool_has_all": all(m in ctx.pool.groups for m in distinct),
        "types": sorted({type(d.global_ranks).__name__ for d in dims}),
        "msd": list(ctx.config.distributed_dims["model_and_sequence_data"].global_ranks),
    }


def test_non_contiguous_members_are_hashable_tuples(cluster, layout_of):
    # tp 2, pp 2, sdp 1 in 8 ranks: model_and_sequence_data of rank 0 is (0, 1, 4, 5), not a progression.
    verification = cluster.apply(layout_of(tensor_parallel=2, pipeline_parallel=2))
    assert verification.ok, verification
    results = cluster.run(_pool_summary)
    assert results.ok, results
    assert results.values[0]["msd"] == [0, 1, 4, 5]
    assert "tuple" in results.values[0]["types"]
    assert all(value["pool_has_all"] for value in results.values)


def _seeds(ctx, step, phase):
    from fastdist_lab.seeds import generator_seeds

    d = ctx.distributed
    d.set_step(step, phase)
    actual = {"pp": d.pp_generator.initial_seed(), "tp": d.tp_generator.initial_seed()}
    expected = generator_seeds(ctx.config, step, phase)
    return actual == {"pp": expected["pp"], "tp": expected["tp"]}


def test_set_step_seeds_match_generator_seeds_on_every_rank(cluster, layout_of):
    cluster.apply(layout_of(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2))
    for step, phase in ((0, "training"), (5, "validation"), (3, "Test"), (11, "inference")):
        assert cluster.run(_seeds, step, phase).values == [True] * cluster.world_size


def _keys_of_the_store(ctx):
    return sorted(key for key in ctx.pool.store.list_keys() if "/" in key and not key.startswith("efcount"))


def _live_group_names(ctx):
    return [record.name for record in map(ctx.pool.record_of, ctx.pool.groups.values()) if record is not None]


def test_a_released_group_leaves_no_rendezvous_value_in_the_store(cluster, layout_of):
    from fastdist_lab.runtime.members import group_prefix
    from fastdist_lab.runtime.pool import GLOO_KEY

    first = layout_of(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    assert cluster.apply(layout_of(tensor_parallel=4, pipeline_parallel=2)).ok
    assert cluster.apply(layout_of(tensor_parallel=2, pipeline_parallel=4)).ok  # the first layout's groups went
    assert cluster.apply(first).ok
    keys = cluster.run(_keys_of_the_store).values[0]
    live = {name for names in cluster.run(_live_group_names).values for name in names}  # every rank's groups
    assert keys and {key.split("//")[0] for key in keys} == live  # released groups left nothing behind
    assert f"{group_prefix((0, 1, 2, 3, 4, 5, 6, 7))}//{GLOO_KEY.format(0)}" in keys  # torch's naming, pinned
