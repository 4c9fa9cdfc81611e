"""torchtitan's meshes in its three vintages, experts included: each mesh name's groups against torch's own
row-major numbering of the mesh torchtitan builds for it, refusals, and equivalences with this project's layouts."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdist_lab import Layout
from fastdist_lab.conventions import TorchtitanMesh, equivalent, torchtitan
from fastdist_lab.errors import ConventionError


def torch_groups(shape: tuple[int, ...], names: tuple[str, ...], dims: tuple[str, ...]) -> set[tuple[int, ...]]:
    """The groups of ``dims`` (flattened row-major, mesh order) in ``torch.arange(n).view(shape)``."""
    mesh = torch.arange(math.prod(shape)).view(shape)
    index = [names.index(d) for d in names if d in dims]
    others = [i for i in range(len(shape)) if i not in index]
    size = math.prod(shape[i] for i in index)
    return {tuple(row) for row in mesh.permute(*others, *index).reshape(-1, size).tolist()}


def expected_meshes(version: str, d: dict) -> dict[str, set[tuple[int, ...]]]:
    """Every 1-d mesh torchtitan's ParallelDims builds, restated from its source as (shape, names, dims)."""
    pp, dpr, dps, cp, tp, ep, etp = (d[k] for k in ("pp", "dp_replicate", "dp_shard", "cp", "tp", "ep", "etp"))
    out = {}
    if version == "2025-12":
        if ep == 1:
            shape, names = (pp, dpr, dps, cp, tp), ("pp", "dp_replicate", "dp_shard", "cp", "tp")
            flat = {"dp": ("dp_replicate", "dp_shard"), "dp_shard_cp": ("dp_shard", "cp")}
            flat["dp_cp"] = ("dp_replicate", "dp_shard", "cp")
        else:
            borrowed = cp if etp == tp else cp * tp
            shape = (pp, dpr, dps * borrowed // ep, ep // borrowed, cp, tp)
            names = ("pp", "dp_replicate", "dp_shard_mod_ep", "dp_shard_in_ep", "cp", "tp")
            shard = ("dp_shard_mod_ep", "dp_shard_in_ep")
            flat = {"dp": ("dp_replicate", *shard), "dp_shard_cp": (*shard, "cp")}
            flat["dp_cp"] = ("dp_replicate", *shard, "cp")
            flat["ep"] = ("dp_shard_in_ep", "cp") + (("tp",) if etp == 1 and tp > 1 else ())
        out = {n: torch_groups(shape, names, (n,)) for n in names}
        out.update({n: torch_groups(shape, names, dims) for n, dims in flat.items()})
        return out
    meshes = [((pp, dpr * dps, cp, tp), ("pp", "batch", "cp", "tp"))]
    meshes.append(((pp, dpr, dps * cp, tp), ("pp", "dp_replicate", "fsdp", "tp")))
    if version == "2026-01":
        meshes.append(((pp, dpr, dps * cp * tp // (etp * ep), ep, etp), ("pp", "dp_replicate", "efsdp", "ep", "etp")))
    else:
        meshes.append(((pp, dpr, dps, cp, tp), ("pp", "dp_replicate", "dp_shard", "cp", "tp")))
        meshes.append(((pp, dpr * dps, cp, tp), ("pp", "dp", "cp", "tp")))
        meshes.append(((pp, dpr, dps * cp * tp // ep, ep), ("pp", "dp_replicate", "efsdp", "ep")))
    for shape, names in meshes:
        for n in names:
            out.setdefault(n, torch_groups(shape, names, (n,)))
    out["loss"] = torch_groups(meshes[0][0], meshes[0][1], ("batch", "cp"))
    return out


@st.composite
def degrees(draw):
    version = draw(st.sampled_from(["2025-12", "2026-01", "2026-08"]))
    d = {k: draw(st.sampled_from([1, 2, 3, 4])) for k in ("pp", "dp_replicate", "dp_shard", "cp", "tp")}
    d["pp"] = min(d["pp"], 2)
    d["ep"] = draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
    d["etp"] = draw(st.sampled_from([1, d["tp"]])) if version != "2026-08" else 1
    return version, d


def accepted(version: str, d: dict) -> bool:
    dps, cp, tp, ep, etp = d["dp_shard"], d["cp"], d["tp"], d["ep"], d["etp"]
    if version == "2026-08":
        return (dps * cp * tp) % ep == 0
    if ep > 1 and etp not in (tp, 1):
        return False
    if version == "2026-01":
        return (dps * cp * tp) % (etp * ep) == 0
    if ep == 1:
        return True
    borrowed = cp if etp == tp else cp * tp
    return ep % borrowed == 0 and (dps * borrowed) % ep == 0


@settings(max_examples=300, deadline=None)
@given(degrees())
def test_every_mesh_name_matches_torch_numbering(config):
    version, d = config
    kwargs = dict(d, etp=None if version == "2026-08" else d["etp"])
    if not accepted(version, d):
        with pytest.raises(ConventionError):
            torchtitan(**kwargs, version=version)
        return
    mesh = torchtitan(**kwargs, version=version)
    world = math.prod(d[k] for k in ("pp", "dp_replicate", "dp_shard", "cp", "tp"))
    assert isinstance(mesh, TorchtitanMesh) and mesh.world_size == world
    expected = expected_meshes(version, d)
    named = mesh.named_groups()
    assert set(named) == set(mesh.mesh_names)
    for name, groups in expected.items():
        got = {tuple(int(x) for x in row) for row in named[name]}
        assert got == groups, (version, d, name)


def test_default_version_is_the_december_2025_mesh():
    titan = torchtitan(pp=2, dp_replicate=2, dp_shard=2, cp=1, tp=2)
    assert titan.version == "2025-12" and titan.mesh_dim_names == ("pp", "dp_replicate", "dp_shard", "cp", "tp")
    assert torchtitan(tp=2, version="current").version == "2026-08"
    with pytest.raises(ConventionError, match="not a torchtitan vintage"):
        torchtitan(version="2024")


def test_experts_split_dp_shard_and_alias_the_finer_axes():
    dec = torchtitan(dp_shard=4, tp=2, ep=4, etp=1, version="2025-12")  # ep borrows tp and half of dp_shard
    assert dec.mesh_dim_names == ("pp", "dp_replicate", "dp_shard_mod_ep", "dp_shard_in_ep", "cp", "tp")
    assert dec.groups("ep").tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    now = torchtitan(dp_shard=4, tp=2, ep=4, version="current")
    assert "dp_shard_in_ep" in now.mesh_dim_names and "dp_shard_in_efsdp" in now.mesh_dim_names
    assert now.groups("ep").tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert now.groups("efsdp").tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
    odd = torchtitan(dp_shard=2, cp=3, tp=2, ep=4, version="current")  # ep straddles cp groups: no common axes
    assert odd.groups("ep").tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert odd.views["sparse"].mesh_shape == (1, 1, 3, 4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(tp=0), "Parallelism degree should be >= 1"),
        (dict(dp_shard=-2, world_size=8), "dp_shard must -1 or >=1"),
        (dict(tp=2, dp_shard=3, world_size=8), r"Invalid parallel dims: dp_replicate\(1\) \* dp_shard\(3\)"),
        (dict(tp=4, dp_shard=-1, world_size=2), "0 ranks to shard"),
        (dict(tp=2, dp_shard=2, ep=3, version="current"), r"expert_parallel_degree \(3\) must divide"),
        (dict(tp=4, dp_shard=2, ep=2, etp=2, version="2026-01"), "Currently we only support ETP=TP or ETP=1"),
        (dict(tp=2, dp_shard=2, etp=2, version="current"), "removed expert tensor parallelism"),
        (dict(dp_shard=-1), "pass the world size"),
        (dict(tp=True), "must be an integer"),
    ],
)
def test_refusals_name_the_degree(kwargs, message):
    with pytest.raises(ConventionError, match=message):
        torchtitan(**kwargs)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2]), st.sampled_from([1, 2, 3]),
       st.sampled_from([1, 2]), st.sampled_from(["2025-12", "2026-01", "2026-08"]))  # fmt: skip
def test_dense_meshes_equal_a_data_first_layout(tp, pp, cp, dps, dpr, version):
    mesh = torchtitan(pp=pp, dp_replicate=dpr, dp_shard=dps, cp=cp, tp=tp, version=version)
    layout, why = mesh.layout_equivalent()
    assert layout == Layout(world_size=mesh.world_size, local_world_size=mesh.world_size, tensor_parallel=tp,
                            pipeline_parallel=pp, sequence_data_parallel=cp)  # fmt: skip
    batch = "dp" if version == "2025-12" else "batch"
    assert equivalent(layout, mesh, {"tensor": "tp", "sequence_data": "cp", "batch_data": batch, "pipeline": "pp"})
    data = "dp_cp" if version == "2025-12" else "loss"
    assert np.array_equal(np.sort(layout.groups("data"), axis=1), np.sort(mesh.groups(data), axis=1))
