"""Layout: whole-world vectorised layout agrees with one DistributedConfig per rank (property tests)."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastdist_lab import DistributedConfig, Layout, LayoutError
from fastdist_lab.config import DIM_NAMES
from fastdist_lab.layout import RANK_COLUMNS


@st.composite
def layouts(draw, max_world: int = 256) -> dict:
    """Random valid layout fields: tensor, pipeline, sequence-data, batch-data and node factors."""
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.sampled_from([1, 2, 3, 4]))
    sdp = draw(st.sampled_from([1, 2, 3]))
    bdp = draw(st.sampled_from([1, 2, 4, 5]))
    world = tp * pp * sdp * bdp
    local_choices = [n for n in range(tp, world + 1, tp) if world % n == 0]
    local = draw(st.sampled_from(local_choices))
    return dict(
        world_size=world,
        local_world_size=local,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        sequence_data_parallel=sdp,
        pipeline_first=draw(st.booleans()),
        seed=draw(st.integers(-(2**70), 2**70)),
        reproducible_init=draw(st.booleans()),
    )


@given(layouts())
def test_layout_agrees_with_config_for_every_rank(fields):
    layout = Layout(**fields)
    ranks = layout.ranks
    assert list(ranks.columns) == list(RANK_COLUMNS)
    assert list(ranks.index) == list(range(fields["world_size"]))
    groups = {name: layout.groups(name) for name in DIM_NAMES}
    for rank in range(fields["world_size"]):
        config = layout.config(rank)
        row = ranks.loc[rank]
        assert row["node"] == rank // config.local_world_size
        for column in RANK_COLUMNS[1:]:
            assert row[column] == getattr(config, column)
        for name, dim in config.distributed_dims.items():
            assert dim.global_ranks[dim.rank] == rank
            assert len(dim.global_ranks) == dim.size
            members = groups[name][(groups[name] == rank).any(axis=1)]
            assert members.shape == (1, dim.size)
            assert members[0].tolist() == list(dim.global_ranks)
            assert layout.dim_rank(name)[rank] == dim.rank
            assert groups[name][layout.group_index(name)[rank]].tolist() == list(dim.global_ranks)
            assert layout.group_of(name, rank).tolist() == list(dim.global_ranks)


@given(layouts())
def test_groups_partition_the_world_and_are_sorted(fields):
    layout = Layout(**fields)
    world = fields["world_size"]
    sizes = {
        "world": world,
        "data": layout.data_parallel,
        "pipeline": fields["pipeline_parallel"],
        "tensor": fields["tensor_parallel"],
        "sequence_data": fields["sequence_data_parallel"],
        "batch_data": layout.batch_data_parallel,
        "tensor_and_sequence_data": fields["tensor_parallel"] * fields["sequence_data_parallel"],
        "tensor_and_data": fields["tensor_parallel"] * layout.data_parallel,
        "model_and_sequence_data": layout.model_parallel * fields["sequence_data_parallel"],
    }
    for name in DIM_NAMES:
        groups = layout.groups(name)
        assert groups.ndim == 2 and groups.shape == (world // sizes[name], sizes[name])
        assert np.array_equal(np.sort(groups.ravel()), np.arange(world))
        assert np.all(np.diff(groups[:, 0]) > 0)


@given(layouts())
def test_range_or_tuple_representation(fields):
    layout = Layout(**fields)
    for rank in range(0, fields["world_size"], 7):
        for dim in layout.config(rank).distributed_dims.values():
            members = list(dim.global_ranks)
            if isinstance(dim.global_ranks, range):
                assert dim.size > 1
            else:
                assert type(dim.global_ranks) is tuple
                steps = set(np.diff(members).tolist())
                # tuples are either single members or not an arithmetic progression
                assert dim.size == 1 or len(steps) > 1


def test_example_groups():
    layout = Layout(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    assert layout.groups("data").tolist() == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
    assert layout.groups("model_and_sequence_data").tolist() == [
        [0, 1, 2, 3, 8, 9, 10, 11],
        [4, 5, 6, 7, 12, 13, 14, 15],
    ]
    assert layout.group_of("pipeline", 5).tolist() == [5, 13]


def test_topology():
    layout = Layout(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    topo = layout.topology()
    assert list(topo.index) == list(DIM_NAMES)
    assert topo.loc["tensor"].to_dict() == {"group_size": 2, "num_groups": 8, "nodes_spanned": 1, "intra_node": True}
    assert topo.loc["pipeline", "nodes_spanned"] == 2 and not topo.loc["pipeline", "intra_node"]
    assert topo.loc["world", "nodes_spanned"] == 2


def test_invalid_layout_and_dim():
    with pytest.raises(LayoutError, match="tensor_parallel=3"):
        Layout(world_size=8, local_world_size=8, tensor_parallel=3)
    with pytest.raises(LayoutError, match="rank"):
        Layout(world_size=8, local_world_size=8, rank=1)
    with pytest.raises(LayoutError, match="more than a whole-world Layout holds"):
        Layout(world_size=2**30, local_world_size=8)
    layout = Layout(world_size=8, local_world_size=8)
    with pytest.raises(LayoutError, match="dim='experts' is not a dim; use one of world, .*, expert_tensor_and_expert"):
        layout.groups("experts")
    with pytest.raises(LayoutError, match="rank=8"):
        layout.config(8)


def test_repr_and_html():
    layout = Layout(world_size=8, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    assert "tensor_parallel=2" in repr(layout) and "data-first" in repr(layout)
    html = layout._repr_html_()
    assert "<table" in html and "model_and_sequence_data" in html
    assert Layout.from_config(layout.config(3)) == layout


def test_layout_and_config_are_frozen_dataclasses_on_one_field_list():
    from fastdist_lab.config import LAYOUT_FIELDS, LayoutFields
    from fastdist_lab.layout import EXPERT_FIELDS

    layout = Layout(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2)
    config = layout.config(5)
    assert dataclasses.is_dataclass(layout) and dataclasses.is_dataclass(config)
    assert [f.name for f in dataclasses.fields(Layout)] == [  # Fast-LLM's fields, then the experts it has not
        *(f.name for f in dataclasses.fields(LayoutFields)),
        *EXPERT_FIELDS,
    ]
    assert [f.name for f in dataclasses.fields(config)] == [*LAYOUT_FIELDS, "rank"]
    assert "__getattr__" not in vars(Layout) and "__getattr__" not in vars(DistributedConfig)
    assert list(inspect.signature(Layout).parameters) == [*LAYOUT_FIELDS, *EXPERT_FIELDS]  # help(), tooltips
    for value, name in ((layout, "world_size"), (config, "rank"), (config, "data_rank")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, name, 4)
    changed = dataclasses.replace(layout, tensor_parallel=4)
    assert changed == layout.replace(tensor_parallel=4) != layout and changed.data_parallel == 2
    assert {layout, Layout(**layout.fields())} == {layout}
    with pytest.raises(LayoutError, match=r"tensor_paralel \(did you mean tensor_parallel\?\)"):
        DistributedConfig(world_size=2, tensor_paralel=2)
    with pytest.raises(LayoutError, match="tensor_parallel=3 must divide"):
        dataclasses.replace(layout, tensor_parallel=3)


def test_a_layout_travels_by_pickle_as_its_fields():
    layout = Layout(world_size=4096, local_world_size=8, tensor_parallel=8)
    cold = len(pickle.dumps(layout))
    assert layout.ranks.shape == (4096, 7)  # cached tables ...
    assert len(pickle.dumps(layout)) == cold < 2000  # ... stay behind
    for value in (layout, layout.config(4095)):
        copy = pickle.loads(pickle.dumps(value))
        assert copy == value and hash(copy) == hash(value) and copy.fields() == value.fields()
    assert pickle.loads(pickle.dumps(layout.config(4095))).distributed_dims == layout.config(4095).distributed_dims
