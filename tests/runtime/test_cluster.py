"""LocalCluster with real gloo groups: layouts verified by collectives, closures, raising ranks, results."""

from __future__ import annotations

import textwrap

import pytest

from fastdist_lab import LayoutError
from fastdist_lab.checks import verify_groups
from fastdist_lab.runtime import Verification

LAYOUTS = [
    {"tensor_parallel": 2, "pipeline_parallel": 2, "sequence_data_parallel": 2, "pipeline_first": False},
    {"tensor_parallel": 2, "pipeline_parallel": 2, "sequence_data_parallel": 2, "pipeline_first": True},
    {"tensor_parallel": 2, "pipeline_parallel": 2, "sequence_data_parallel": 1, "pipeline_first": True},
    {"tensor_parallel": 1, "pipeline_parallel": 2, "sequence_data_parallel": 2, "pipeline_first": False},
    {"tensor_parallel": 4, "pipeline_parallel": 1, "sequence_data_parallel": 2, "pipeline_first": False},
    {"tensor_parallel": 1, "pipeline_parallel": 1, "sequence_data_parallel": 8, "pipeline_first": False},
]

WORLD = 8
"""Ranks of the shared cluster (see conftest)."""


@pytest.mark.parametrize(
    "factors",
    LAYOUTS,
    ids=lambda f: "tp{tensor_parallel}-pp{pipeline_parallel}-sdp{sequence_data_parallel}-{pipeline_first}".format(**f),
)
def test_apply_verifies_every_group_with_collectives(cluster, factors, layout_of):
    pids = cluster.pids
    layout = layout_of(**factors)
    built = cluster.apply(layout)  # the pools' membership, judged without communication
    assert isinstance(built, Verification) and built.ok and not built.collectives, built
    verification = verify_groups(cluster, layout)
    assert isinstance(verification, Verification) and verification.collectives
    assert verification.ok, verification
    assert cluster.pids == pids  # the same workers serve every layout
    frame = verification.to_frame()
    assert {"dim", "group", "members", "ok", "seconds"} <= set(frame.columns)
    for dim in layout.dim_names:
        expected = layout.groups(dim).tolist()
        assert frame[frame.dim == dim].members.tolist() == expected
    assert cluster.layout == layout  # as given; the workers run it on the cluster's backend
    assert cluster.run(lambda ctx: ctx.layout.backend.value).values == ["gloo"] * WORLD
    assert "<table" in verification._repr_html_()


def _sums(ctx):
    import torch

    out = {}
    for name in ("tensor", "pipeline", "sequence_data", "data", "model_and_sequence_data"):
        group = ctx.distributed.group(name)
        value = torch.tensor([float(ctx.rank)])
        if group is not None:
            group.allreduce([value]).wait()
        out[name] = int(value.item())
    return out


def test_groups_in_ctx_are_real_process_groups(cluster, layout_of):
    layout = layout_of(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2, pipeline_first=True)
    cluster.apply(layout)
    results = cluster.run(_sums)
    assert results.ok, results
    for rank, value in enumerate(results.values):
        for name, total in value.items():
            assert total == int(layout.group_of(name, rank).sum())


def test_ctx_fields(cluster):
    results = cluster.run(
        lambda ctx: (ctx.rank, ctx.world_size, ctx.config.rank, ctx.device.type, ctx.layout.world_size)
    )
    assert results.values == [(r, WORLD, r, "cpu", WORLD) for r in range(WORLD)]


def test_notebook_style_closure_travels_by_value(cluster):
    # A function defined in __main__, as in a notebook cell, with a closure over a local and a helper.
    namespace = {"__name__": "__main__"}
    exec(
        textwrap.dedent(
            """
            factor = 10
            def helper(x):
                return x * factor
            def make(offset):
                def cell(ctx, extra):
                    print("rank", ctx.rank, "says hi")
                    return helper(ctx.rank) + offset + extra
                return cell
            """
        ),
        namespace,
    )
    fn = namespace["make"](3)
    assert fn.__module__ == "__main__"
    results = cluster.run(fn, 100)
    assert results.ok, results
    assert results.values == [10 * r + 103 for r in range(WORLD)]
    assert results[5].stdout == "rank 5 says hi\n"


def _raise_on_odd(ctx):
    if ctx.rank % 2:
        raise KeyError(f"odd rank {ctx.rank % 2}")
    return ctx.rank * 2


def test_a_raising_rank_is_reported_and_the_others_are_not_affected(cluster):
    results = cluster.run(_raise_on_odd)
    assert not results.ok
    assert results.values == [0, None, 4, None, 8, None, 12, None]
    assert sorted(results.errors) == [1, 3, 5, 7]
    assert results.errors[3].type == "KeyError"
    assert "_raise_on_odd" in results.errors[3].traceback
    # identical tracebacks are shown once, with the ranks that raised them
    text = repr(results)
    assert "ranks 1, 3, 5, 7: KeyError" in text
    assert text.count("Traceback") == 1
    frame = results.to_frame()
    assert len(frame) == WORLD and frame.loc[3, "status"] == "error" and frame.loc[2, "value"] == 4
    assert "tensor_rank" in frame.columns
    with pytest.raises(KeyError, match="odd rank"):
        results.raise_first()
    # the cluster is still usable
    assert cluster.run(lambda ctx: ctx.rank).values == list(range(WORLD))


def test_unpicklable_value_is_an_error_of_that_rank(cluster):
    results = cluster.run(lambda ctx: (lambda: 1) if ctx.rank == 0 else __import__("threading").Lock())
    assert results.ok is False
    assert 0 not in results.errors
    assert results.errors[1].type in ("TypeError", "PicklingError")


def test_wrong_world_size_is_a_layout_error(cluster):
    from fastdist_lab import Layout

    with pytest.raises(LayoutError, match="world_size=4"):
        cluster.apply(Layout(world_size=4, local_world_size=4))


def test_results_round_trip_through_a_report(cluster, tmp_path, layout_of):
    from fastdist_lab.runtime import load_report

    verification = cluster.apply(layout_of(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2))
    path = tmp_path / "report.json"
    verification.save(path)
    loaded = load_report(path)
    assert loaded.ok and loaded.rows == verification.rows
    assert loaded.results.values == verification.results.values
    assert loaded.to_frame().equals(verification.to_frame())


def test_groups_of_older_layouts_are_released_and_recreated_cleanly(cluster, layout_of):
    a = layout_of(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    b = layout_of(tensor_parallel=4, pipeline_parallel=2)
    c = layout_of(pipeline_parallel=8)
    for layout in (a, b, c):
        assert cluster.apply(layout).ok
    # only the groups of the last two layouts stay in each rank's pool
    counts = cluster.run(lambda ctx: len(ctx.pool.groups)).values
    assert all(count <= 4 for count in counts), counts
    again = cluster.apply(a)  # tensor groups such as (0, 1) were released: created afresh, new store prefix
    assert again.ok, again
    frame = again.to_frame()
    assert frame[frame.dim == "tensor"].created.all()
    assert not frame[frame.dim == "world"].created.any()  # the world group never went away
