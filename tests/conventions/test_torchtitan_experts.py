"""torchtitan's expert meshes are a Layout's expert groups (issue 28, item 1): for every vintage and every set of
degrees torchtitan accepts, ``layout_equivalent`` gives a Layout with ``expert_parallel = ep`` and
``expert_tensor_parallel = etp`` (1 where the vintage has none) whose expert groups are the meshes torchtitan's
``ParallelDims`` builds, restated here from its source on torch's row-major numbering; a Layout with another EP, ETP
or stage is reported naming the mesh that differs. (``crosscheck_torchtitan.py`` checks the same against
torchtitan's own code.)"""

from __future__ import annotations

import math
import re

import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from fastdist_lab import Layout
from fastdist_lab.conventions import TorchtitanMesh, equivalent, torchtitan
from fastdist_lab.conventions.torchtitan_dims import parallel_dims
from fastdist_lab.errors import ConventionError

VERSIONS = ("2025-12", "2026-01", "2026-08")


def torch_groups(shape: tuple[int, ...], names: tuple[str, ...], dims: tuple[str, ...]) -> set[tuple[int, ...]]:
    """The groups of ``dims`` (flattened row-major, mesh order) in ``torch.arange(n).view(shape)``; no dims: single
    ranks."""
    mesh = torch.arange(math.prod(shape)).view(shape)
    index = [names.index(d) for d in names if d in dims]
    others = [i for i in range(len(shape)) if i not in index]
    size = math.prod(shape[i] for i in index)
    return {tuple(row) for row in mesh.permute(*others, *index).reshape(-1, size).tolist()}


def torchtitan_expert_groups(version: str, d: dict) -> dict[str, set[tuple[int, ...]]]:
    """The expert groups torchtitan's ParallelDims and parallelize build (ep > 1), restated from its source: the
    ``ep`` mesh, the expert TP mesh, the expert-FSDP mesh with dp_replicate before it."""
    pp, dpr, dps, cp, tp, ep = (d[k] for k in ("pp", "dp_replicate", "dp_shard", "cp", "tp", "ep"))
    etp = d.get("etp", 1)
    if version == "2025-12":  # _build_mesh_with_ep; parallelize's dp_mod_ep mesh
        borrowed = cp if etp == tp else cp * tp
        shape = (pp, dpr, dps * borrowed // ep, ep // borrowed, cp, tp)
        names = ("pp", "dp_replicate", "dp_shard_mod_ep", "dp_shard_in_ep", "cp", "tp")
        ep_dims = ("dp_shard_in_ep", "cp") + (("tp",) if etp == 1 else ())
        tensor = ("tp",) if etp == tp else ()
        data = ("dp_replicate", "dp_shard_mod_ep")
    elif version == "2026-01":  # the sparse mesh (pp, dp_replicate, efsdp, ep, etp)
        shape = (pp, dpr, dps * cp * tp // (etp * ep), ep, etp)
        names, ep_dims, tensor = ("pp", "dp_replicate", "efsdp", "ep", "etp"), ("ep",), ("etp",)
        data = ("dp_replicate", "efsdp")
    else:  # the sparse mesh (pp, dp_replicate, efsdp, ep)
        shape, names = (pp, dpr, dps * cp * tp // ep, ep), ("pp", "dp_replicate", "efsdp", "ep")
        ep_dims, tensor, data = ("ep",), (), ("dp_replicate", "efsdp")
    return {
        "expert": torch_groups(shape, names, ep_dims),
        "expert_tensor": torch_groups(shape, names, tensor),
        "expert_data": torch_groups(shape, names, data),
    }


def rows(groups) -> set[tuple[int, ...]]:
    return {tuple(int(x) for x in row) for row in groups}


@st.composite
def accepted(draw):
    """A vintage and degrees with ep > 1 that torchtitan's ParallelDims accepts."""
    version = draw(st.sampled_from(VERSIONS))
    pp, dpr, cp = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 3]))
    dps, tp = draw(st.sampled_from([1, 2, 3, 4])), draw(st.sampled_from([1, 2, 3, 4]))
    etp = None if version == "2026-08" else draw(st.sampled_from(sorted({1, tp})))
    kinds = dict(pp=pp, dp_replicate=dpr, dp_shard=dps, cp=cp, tp=tp, etp=etp, version=version)
    eps = []
    for ep in range(2, dps * cp * tp + 1):
        try:
            torchtitan(ep=ep, **kinds)
        except ConventionError:
            continue
        eps.append(ep)
    assume(eps)
    return dict(kinds, ep=draw(st.sampled_from(eps)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(accepted())
@example(dict(pp=1, dp_replicate=1, dp_shard=1, cp=2, tp=3, ep=2, etp=1, version="2026-01"))  # batch of size 1,
@example(dict(pp=2, dp_replicate=1, dp_shard=1, cp=3, tp=2, ep=3, etp=None, version="2026-08"))  # ep across cp
def test_expert_groups_are_torchtitans_expert_meshes_in_every_vintage(kinds):
    mesh = torchtitan(**kinds)
    layout, why = mesh.layout_equivalent()
    etp = 1 if kinds["etp"] is None else kinds["etp"]
    assert layout == Layout(world_size=mesh.world_size, local_world_size=mesh.world_size, tensor_parallel=kinds["tp"],
                            pipeline_parallel=kinds["pp"], sequence_data_parallel=kinds["cp"],
                            expert_parallel=kinds["ep"], expert_tensor_parallel=etp)  # fmt: skip
    assert "so are the expert groups" in why and mesh.expert_mismatch(layout) == ""
    batch = "dp" if mesh.version == "2025-12" else ("dp_replicate", "dp_shard")
    assert equivalent(layout, mesh, {"tensor": "tp", "sequence_data": "cp", "batch_data": batch, "pipeline": "pp"})
    assert rows(layout.groups("batch_data")) == rows(mesh.groups("dp" if mesh.version == "2025-12" else "batch"))
    theirs = torchtitan_expert_groups(mesh.version, mesh.degrees)
    for dim, groups in theirs.items():  # group by group, members in order
        assert rows(layout.groups(dim)) == groups, dim
        assert rows(mesh.expert_meshes()[dim][1]) == groups, dim
    assert rows(layout.groups("expert")) == rows(mesh.groups("ep"))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(VERSIONS), st.sampled_from([1, 2]), st.sampled_from([1, 2, 3]), st.sampled_from([1, 2, 4]))
def test_without_expert_parallelism_the_dense_layout_stays(version, cp, dps, tp):
    mesh = torchtitan(dp_shard=dps, cp=cp, tp=tp, version=version)
    layout, why = mesh.layout_equivalent()
    assert not layout.has_experts and mesh.expert_meshes() == {} and "expert" not in why


@pytest.mark.parametrize(
    "version, kinds, other, message",
    [
        ("2025-12", dict(dp_shard=4, tp=2, ep=4, etp=1), dict(expert_parallel=4, expert_tensor_parallel=2),
         r"torchtitan's ep mesh is not the Layout's expert groups: rank 0's group is \[0, 1, 2, 3\] in torchtitan, "
         r"\[0, 2, 4, 6\] in the Layout"),
        ("2025-12", dict(dp_shard=4, tp=2, ep=2, etp=2), dict(expert_parallel=2, expert_tensor_parallel=1),
         r"torchtitan's ep mesh is not the Layout's expert groups"),
        ("2026-01", dict(dp_shard=4, tp=2, ep=2, etp=2), dict(expert_parallel=4, expert_tensor_parallel=2),
         r"torchtitan's ep mesh is not the Layout's expert groups: its groups have 2 ranks, the Layout's 4"),
        ("2026-01", dict(dp_shard=2, tp=2, ep=2, etp=1), dict(expert_parallel=2, expert_tensor_parallel=2),
         r"torchtitan's ep mesh is not the Layout's expert groups"),
        ("2026-08", dict(dp_shard=4, tp=2, ep=4), dict(expert_parallel=4, expert_tensor_parallel=2),
         r"torchtitan's ep mesh"),
        ("2026-08", dict(dp_shard=4, ep=2, pp=2), dict(expert_parallel=2, pipeline_parallel=1),
         r"torchtitan's \(dp_replicate, efsdp\) mesh is not the Layout's expert_data groups: its groups have 2 "
         r"ranks, the Layout's 4"),
        ("2025-12", dict(dp_shard=4, ep=2, pp=2), dict(expert_parallel=2, pipeline_parallel=1),
         r"torchtitan's \(dp_replicate, dp_shard_mod_ep\) mesh is not the Layout's expert_data groups"),
    ],
)  # fmt: skip
def test_another_layout_is_reported_naming_the_mesh(version, kinds, other, message):
    mesh = torchtitan(**kinds, version=version)
    fields = dict(tensor_parallel=kinds.get("tp", 1), pipeline_parallel=kinds.get("pp", 1)) | other
    wrong = Layout(world_size=mesh.world_size, local_world_size=mesh.world_size, **fields)
    text = mesh.expert_mismatch(wrong)
    assert re.match(message, text), text


def test_layout_equivalent_names_the_expert_mesh_that_differs():
    """Meshes torchtitan would refuse (etp = 2 with tp = 4 in December 2025: ep borrows all of tp) keep the dense
    Layout, and ``why`` says which expert mesh is not a Layout's."""
    degrees = parallel_dims("2025-12", None, dp_shard=4, tp=4, ep=4, etp=4)
    mesh = TorchtitanMesh("2025-12", dict(degrees, etp=2))
    layout, why = mesh.layout_equivalent()
    assert not layout.has_experts and layout.tensor_parallel == 4
    assert why.endswith(
        "torchtitan's ep mesh is not the Layout's expert groups: rank 0's group is [0, 1, 2, 3] in torchtitan, "
        "[0, 2, 4, 6] in the Layout"
    )
