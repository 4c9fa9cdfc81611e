"""DistributedConfig: the spec's worked example, every validation rule, and garbage input."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastdist_lab import DistributedConfig, LayoutError, PhaseType
from fastdist_lab.config import (
    DEFAULT_SEED_SHIFTS,
    DIM_NAMES,
    INPUT_FIELDS,
    MAX_SEED,
    DistributedBackend,
    DistributedDimNames,
)

EXAMPLE = dict(
    world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2, rank=5
)


def test_worked_example_coordinates():
    c = DistributedConfig(**EXAMPLE)
    assert (c.tensor_rank, c.data_rank, c.pipeline_rank) == (1, 2, 0)
    assert (c.sequence_data_rank, c.batch_data_rank) == (0, 1)
    assert (c.model_parallel, c.data_parallel, c.batch_data_parallel, c.num_nodes, c.local_rank) == (4, 4, 2, 2, 5)


@pytest.mark.parametrize(
    "name,size,rank,global_ranks",
    [
        ("world", 16, 5, range(0, 16)),
        ("data", 4, 2, range(1, 9, 2)),
        ("pipeline", 2, 0, range(5, 21, 8)),
        ("tensor", 2, 1, range(4, 6)),
        ("sequence_data", 2, 0, range(5, 9, 2)),
        ("batch_data", 2, 1, range(1, 9, 4)),
        ("tensor_and_sequence_data", 4, 1, range(4, 8)),
        ("tensor_and_data", 8, 5, range(0, 8)),
        ("model_and_sequence_data", 8, 1, (4, 5, 6, 7, 12, 13, 14, 15)),
    ],
)
def test_worked_example_dims(name, size, rank, global_ranks):
    dim = DistributedConfig(**EXAMPLE).distributed_dims[name]
    assert dim.name == name
    assert (dim.size, dim.rank) == (size, rank)
    assert type(dim.global_ranks) is type(global_ranks)
    assert dim.global_ranks == global_ranks


def test_nine_dims_in_order_and_names():
    c = DistributedConfig(**EXAMPLE)
    assert tuple(c.distributed_dims) == DIM_NAMES
    assert DistributedDimNames.model_and_sequence_data == "model_and_sequence_data"
    assert len(DIM_NAMES) == 9


def test_size_one_dims_are_one_element_tuples_and_hashable():
    c = DistributedConfig(world_size=4, local_world_size=4, rank=3)
    assert c.distributed_dims["tensor"].global_ranks == (3,)
    assert c.distributed_dims["pipeline"].global_ranks == (3,)
    assert c.distributed_dims["data"].global_ranks == range(0, 4)
    for dim in c.distributed_dims.values():
        hash(dim.global_ranks)


def test_world_of_one():
    c = DistributedConfig(world_size=1, rank=0, local_world_size=1)
    assert c.distributed_dims["world"].global_ranks == (0,)
    assert all(d.size == 1 and d.rank == 0 for d in c.distributed_dims.values())


def test_defaults_match_spec(monkeypatch):
    for var in ("WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    c = DistributedConfig()
    assert (c.world_size, c.rank, c.local_world_size) == (1, 0, 1)
    assert (c.tensor_parallel, c.pipeline_parallel, c.sequence_data_parallel) == (1, 1, 1)
    assert c.backend is DistributedBackend.nccl and c.timeout == 60 and c.seed == 1234
    assert not c.reproducible_init and not c.pipeline_first and not c.sequence_tensor_parallel
    for name, value in DEFAULT_SEED_SHIFTS.items():
        assert getattr(c, name) == value
    assert DEFAULT_SEED_SHIFTS["test_seed_shift"] == 220111337975202516901860145957
    assert MAX_SEED == 2**64


def test_defaults_from_environment(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    c = DistributedConfig(tensor_parallel=2)
    assert (c.world_size, c.rank, c.local_world_size, c.local_rank, c.num_nodes) == (8, 3, 4, 3, 2)


def test_sequence_tensor_parallel_forced_off_without_tensor_parallel():
    assert (
        DistributedConfig(world_size=2, local_world_size=2, sequence_tensor_parallel=True).sequence_tensor_parallel
        is False
    )
    c = DistributedConfig(world_size=2, local_world_size=2, tensor_parallel=2, sequence_tensor_parallel=True)
    assert c.sequence_tensor_parallel is True


def test_pipeline_first_coordinates():
    c = DistributedConfig(
        world_size=16,
        local_world_size=8,
        tensor_parallel=2,
        pipeline_parallel=2,
        sequence_data_parallel=2,
        pipeline_first=True,
        rank=5,
    )
    # rank 5: tensor 1, (5 // 2) = 2 -> data 1, pipeline 0
    assert (c.tensor_rank, c.data_rank, c.pipeline_rank, c.sequence_data_rank, c.batch_data_rank) == (1, 1, 0, 1, 0)
    assert c.distributed_dims["model_and_sequence_data"].global_ranks == range(0, 8)
    assert c.distributed_dims["pipeline"].global_ranks == range(5, 9, 2)


def test_backend_and_phase_parsing():
    assert DistributedConfig(backend="GLOO").backend is DistributedBackend.gloo
    assert PhaseType.parse("TRAINING") is PhaseType.training
    assert PhaseType.parse("Inference") is PhaseType.inference
    assert PhaseType.parse(PhaseType.test) is PhaseType.test
    with pytest.raises(LayoutError, match="phase"):
        PhaseType.parse("warmup")


def test_config_is_read_only_and_comparable():
    c = DistributedConfig(**EXAMPLE)
    with pytest.raises(AttributeError):
        c.world_size = 4
    assert c == DistributedConfig(**EXAMPLE)
    assert set(c.fields()) == set(INPUT_FIELDS)
    assert DistributedConfig(**c.fields()) == c


@pytest.mark.parametrize(
    "fields,words",
    [
        (dict(world_size=0), ["world_size=0"]),
        (dict(world_size=-3), ["world_size=-3"]),
        (dict(world_size=8, rank=8, local_world_size=8), ["rank=8", "world_size=8"]),
        (dict(world_size=8, rank=-1, local_world_size=8), ["rank=-1"]),
        (dict(world_size=8, local_world_size=0), ["local_world_size=0"]),
        (dict(world_size=8, local_world_size=3), ["local_world_size=3", "world_size=8"]),
        (dict(world_size=8, local_world_size=2, tensor_parallel=4), ["tensor_parallel=4", "local_world_size=2"]),
        (dict(world_size=8, local_world_size=8, tensor_parallel=0), ["tensor_parallel=0"]),
        (dict(world_size=8, local_world_size=8, pipeline_parallel=0), ["pipeline_parallel=0"]),
        (dict(world_size=8, local_world_size=8, pipeline_parallel=3), ["pipeline_parallel=3", "world_size=8"]),
        (dict(world_size=12, local_world_size=12, tensor_parallel=2, pipeline_parallel=4), ["world_size=12"]),
        (dict(world_size=8, local_world_size=8, sequence_data_parallel=0), ["sequence_data_parallel=0"]),
        (
            dict(world_size=8, local_world_size=8, sequence_data_parallel=3),
            ["sequence_data_parallel=3", "data_parallel=8"],
        ),
        (dict(world_size=8, local_world_size=8, backend="mpi"), ["backend='mpi'"]),
        (dict(world_size=8, local_world_size=8, timeout=0), ["timeout=0"]),
        (dict(world_size=8, local_world_size=8, timeout=math.nan), ["timeout=nan"]),
        (dict(world_size=8, local_world_size=8, seed=1.5), ["seed=1.5"]),
        (dict(world_size=8, local_world_size=8, tp_seed_shift="x"), ["tp_seed_shift='x'"]),
        (dict(world_size=2.0), ["world_size=2.0"]),
        (dict(world_size=True), ["world_size=True"]),
        (dict(world_size=8, local_world_size=8, pipeline_first="yes"), ["pipeline_first='yes'"]),
    ],
)
def test_every_rule_raises_layout_error_naming_field(fields, words):
    with pytest.raises(LayoutError) as info:
        DistributedConfig(**fields)
    assert isinstance(info.value, ValueError)
    for word in words:
        assert word in str(info.value)


def test_several_violations_are_all_named():
    with pytest.raises(LayoutError) as info:
        DistributedConfig(world_size=0, tensor_parallel=-1, local_world_size=0)
    message = str(info.value)
    assert "world_size=0" in message and "tensor_parallel=-1" in message and "local_world_size=0" in message


def test_numpy_integers_are_accepted():
    np = pytest.importorskip("numpy")
    c = DistributedConfig(
        world_size=np.int64(8), local_world_size=np.int32(8), tensor_parallel=np.int64(2), rank=np.int64(3)
    )
    assert c.tensor_rank == 1 and type(c.world_size) is int


def test_huge_world_is_valid_for_one_rank():
    world = 2**70
    c = DistributedConfig(world_size=world, local_world_size=2**10, tensor_parallel=2, rank=world - 1)
    assert c.distributed_dims["world"].global_ranks == range(world)
    assert c.distributed_dims["data"].global_ranks[c.data_rank] == world - 1


garbage = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.just([1, 2]),
    st.just(object()),
)


@given(
    world_size=garbage,
    rank=garbage,
    local_world_size=garbage,
    tensor_parallel=garbage,
    pipeline_parallel=garbage,
    sequence_data_parallel=garbage,
    timeout=garbage,
    seed=garbage,
)
def test_garbage_never_raises_anything_but_layout_error(**fields):
    try:
        DistributedConfig(**fields)
    except LayoutError:
        pass


@given(
    world=st.sampled_from([0, -1, 1, 2, 3, 4, 6, 8, 12, 16, 2**40]),
    local=st.integers(-2, 20),
    tp=st.integers(-2, 9),
    pp=st.integers(-2, 9),
    sdp=st.integers(-2, 9),
    rank=st.integers(-2, 20),
)
def test_small_integers_either_build_or_raise_layout_error(world, local, tp, pp, sdp, rank):
    try:
        c = DistributedConfig(
            world_size=world,
            local_world_size=local,
            tensor_parallel=tp,
            pipeline_parallel=pp,
            sequence_data_parallel=sdp,
            rank=rank,
        )
    except LayoutError:
        return
    for dim in c.distributed_dims.values():
        assert dim.global_ranks[dim.rank] == rank
