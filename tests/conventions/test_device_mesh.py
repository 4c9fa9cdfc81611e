"""DeviceMesh numbering against torch's own: ``torch.arange(n).view(shape)`` and DeviceMesh's layout algebra."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdist_lab import Layout
from fastdist_lab.conventions import (
    DeepSpeed,
    DeviceMesh,
    equivalent,
    layout_device_mesh,
    layout_mesh_dims,
    picotron,
    torchtitan,
)
from fastdist_lab.errors import ConventionError

try:  # torch >= 2.9: the layout algebra DeviceMesh itself uses to build each dim's process groups
    from torch.distributed._mesh_layout import _MeshLayout
except ImportError:  # older torch: the tensor numbering below is still checked
    _MeshLayout = None


def torch_groups(shape: tuple[int, ...], dims: tuple[int, ...]) -> list[list[int]]:
    """Groups of the mesh dims ``dims`` (mesh order), by torch tensor ops: the named dims moved last, row-major."""
    mesh = torch.arange(math.prod(shape)).view(shape)
    others = [d for d in range(len(shape)) if d not in dims]
    size = math.prod(shape[d] for d in dims)
    return mesh.permute(*others, *dims).reshape(-1, size).tolist()


def mesh_layout_groups(shape: tuple[int, ...], dims: tuple[int, ...]) -> list[list[int]]:
    """Groups as DeviceMesh computes them: its per-dim layouts, collapsed for a flattened dim, remapped to ranks."""
    mesh = torch.arange(math.prod(shape)).view(shape)
    layout = _MeshLayout.from_sizes_strides(tuple(mesh.size()), tuple(mesh.stride()))
    flat = _MeshLayout([layout[d] for d in dims]).collapse() if len(dims) > 1 else layout[dims[0]]
    return _MeshLayout([flat]).remap_to_tensor(mesh.flatten()).tolist()


shapes = st.lists(st.integers(1, 4), min_size=1, max_size=5).map(tuple).filter(lambda s: math.prod(s) <= 512)


@settings(max_examples=150)
@given(shapes, st.data())
def test_groups_match_torch_numbering(shape, data):
    names = tuple(f"d{i}" for i in range(len(shape)))
    mesh = DeviceMesh(shape, names)
    assert np.array_equal(mesh.mesh, torch.arange(math.prod(shape)).view(shape).numpy())
    k = data.draw(st.integers(1, len(shape)))
    dims = tuple(sorted(data.draw(st.permutations(range(len(shape))))[:k]))
    expected = torch_groups(shape, dims)
    assert mesh.groups(tuple(names[d] for d in dims)).tolist() == expected
    assert mesh.groups(tuple(dims)).tolist() == expected
    if _MeshLayout is not None:
        assert mesh_layout_groups(shape, dims) == expected


def test_single_dims_and_flatten_in_mesh_order():
    mesh = DeviceMesh((2, 2, 2), ("dp", "cp", "tp"))
    # torch's _flatten docstring example: mesh_3d["dp", "cp"]._flatten() -> [0, 2, 4, 6] and [1, 3, 5, 7]
    assert mesh.groups(("dp", "cp")).tolist() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert mesh.groups("tp").tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert mesh.groups("dp").tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # names out of mesh order: members row-major in the order given (torch itself refuses this slice)
    assert mesh.groups(("cp", "dp")).tolist() == [[0, 4, 2, 6], [1, 5, 3, 7]]


def test_presets():
    titan = torchtitan(pp=2, dp_replicate=2, dp_shard=2, cp=1, tp=2)
    assert titan.mesh_dim_names == ("pp", "dp_replicate", "dp_shard", "cp", "tp")
    assert titan.axes[0] == "tp" and titan.world_size == 16
    assert titan.groups("dp").tolist() == torch_groups((2, 2, 2, 1, 2), (1, 2))
    assert titan.groups("dp_shard_cp").tolist() == torch_groups((2, 2, 2, 1, 2), (2, 3))
    assert titan.groups("dp_cp").tolist() == torch_groups((2, 2, 2, 1, 2), (1, 2, 3))
    pico = picotron(dp=2, pp=2, cp=2, tp=2)
    grid = torch.arange(16).view(2, 2, 2, 2)
    # picotron's tp group of (d, p, c) is grid[d, p, c, :], its dp group grid[:, p, c, t]
    assert pico.groups("tp").tolist() == [
        grid[d, p, c, :].tolist() for d, p, c in itertools.product(range(2), repeat=3)
    ]
    assert pico.groups("dp").tolist() == [
        grid[:, p, c, t].tolist() for p, c, t in itertools.product(range(2), repeat=3)
    ]
    assert pico.groups("cp_dp").tolist() == [
        grid[:, p, :, t].flatten().tolist() for p, t in itertools.product(range(2), repeat=2)
    ]
    assert pico.groups("pp_dp").tolist() == [
        grid[:, :, c, t].flatten().tolist() for c, t in itertools.product(range(2), repeat=2)
    ]
    ds = DeepSpeed(pipe=2, data=3, model=2)
    assert isinstance(ds, DeepSpeed) and ds.mesh_dim_names == ("pipe", "data", "model")
    # DeepSpeed's ProcessTopology: rank = cartesian product, last axis (model) fastest
    coords = list(itertools.product(range(2), range(3), range(2)))
    assert [int(ds.mesh[p, d, m]) for p, d, m in coords] == list(range(12))
    assert ds.get_axis_comm_lists("pipe")[0] == [0, 6]
    assert ds.get_axis_comm_lists("data")[0] == [0, 2, 4]


@settings(max_examples=60)
@given(
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2, 3]),
    st.sampled_from([1, 2, 3]),
    st.sampled_from([1, 2]),
    st.booleans(),
)
def test_device_mesh_spec_reproduces_layout(tp, pp, sdp, bdp, pipeline_first):
    layout = Layout(
        world_size=tp * pp * sdp * bdp,
        local_world_size=tp,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        sequence_data_parallel=sdp,
        pipeline_first=pipeline_first,
    )
    shape, names, mesh = layout.device_mesh_spec()
    assert np.array_equal(mesh, layout.grid)
    assert np.array_equal(mesh, torch.arange(layout.world_size).view(shape).numpy())
    if pipeline_first:
        assert names == ("batch_data", "sequence_data", "pipeline", "tensor") and shape == (bdp, sdp, pp, tp)
    else:
        assert names == ("pipeline", "batch_data", "sequence_data", "tensor") and shape == (pp, bdp, sdp, tp)
    for dim in layout.dim_names:
        dims = tuple(names.index(n) for n in layout_mesh_dims(layout, dim))
        assert torch_groups(shape, dims) == layout.groups(dim).tolist(), dim
    assert equivalent(layout, layout_device_mesh(layout))


def test_errors():
    with pytest.raises(ConventionError, match="2 dims but 1 names"):
        DeviceMesh((2, 2), ("a",))
    with pytest.raises(ConventionError, match="out of range"):
        DeviceMesh((2, 2), ("a", "b")).groups(2)
    with pytest.raises(ConventionError, match="repeat"):
        DeviceMesh((2, 2), ("a", "b")).groups(("a", "a"))
    with pytest.raises(ConventionError, match="not a dim"):
        layout_mesh_dims(Layout(world_size=2, tensor_parallel=2, local_world_size=2), "nope")
