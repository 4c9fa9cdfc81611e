"""Build torch's real ``DeviceMesh`` from ``Layout.device_mesh_spec()`` on every rank of a running
``LocalCluster`` and check each named dim's mesh group with a real collective.

torch's ``init_device_mesh`` needs a default process group, which the cluster's pool deliberately never creates.
So each worker creates one for the duration of the check only: ``init_process_group`` on a fresh
``PrefixStore`` over the pool's own (loopback) TCP store, gloo bound to the loopback interface (or NCCL on GPU
clusters), then ``destroy_process_group`` - the pool's own groups are not touched. torch is imported only inside
the functions that run on the workers.
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np

from ..conventions import layout_mesh_dims
from ..errors import ConventionError

if TYPE_CHECKING:
    import pandas as pd


def _loopback_interface() -> str | None:
    names = {name for _, name in socket.if_nameindex()}
    return next((name for name in ("lo", "lo0") if name in names), None)


def mesh_of_dim(mesh: Any, dim: str, mesh_dims: tuple[str, ...]) -> Any:
    """The sub-mesh of ``mesh`` for this project's dim ``dim``: one mesh dim, or ``mesh_dims`` flattened (torch's
    only way to a flattened mesh dim, ``_flatten``, which torchtitan uses too)."""
    if len(mesh_dims) == 1:
        return mesh[mesh_dims[0]]
    return mesh[mesh_dims]._flatten(f"fastdist_{dim}")  # noqa: SLF001


def mesh_worker(
    ctx: Any,
    shape: tuple[int, ...],
    names: tuple[str, ...],
    dims: dict[str, tuple[str, ...]],
    prefix: str,
    timeout: float,
) -> dict[str, Any]:
    """Run on every rank: build ``init_device_mesh(shape, names)``, then for every dim slice (and flatten) its
    mesh group and all-gather the global ranks inside it. Returns, per dim, the group's ranks as torch sees them
    (``get_process_group_ranks``), the all-gathered ranks and this rank's local rank in the group."""
    import datetime

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if dist.is_initialized():
        raise RuntimeError("a default process group already exists in this worker; not replacing it")
    device = getattr(ctx, "device", torch.device("cpu"))
    backend = "gloo" if device.type == "cpu" else "nccl"
    pool_store = getattr(getattr(ctx, "pool", None), "store", None)
    store = dist.PrefixStore(prefix, pool_store) if pool_store is not None else dist.HashStore()
    saved = os.environ.get("GLOO_SOCKET_IFNAME")
    loopback = _loopback_interface()
    if backend == "gloo" and loopback is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = loopback  # gloo listens on loopback only, like the pool
    try:
        dist.init_process_group(
            backend, store=store, rank=ctx.rank, world_size=ctx.world_size, timeout=datetime.timedelta(seconds=timeout)
        )
        try:
            mesh = init_device_mesh(device.type, shape, mesh_dim_names=names)
            out: dict[str, Any] = {"mesh": mesh.mesh.tolist(), "coordinate": list(mesh.get_coordinate() or [])}
            for dim, mesh_dims in dims.items():
                sub = mesh_of_dim(mesh, dim, mesh_dims)
                group = sub.get_group()
                mine = torch.tensor([ctx.rank], dtype=torch.int64, device=device)
                gathered = [torch.zeros_like(mine) for _ in range(group.size())]
                dist.all_gather(gathered, mine, group=group)
                out[dim] = {
                    "ranks": [int(r) for r in dist.get_process_group_ranks(group)],
                    "gathered": [int(t.item()) for t in gathered],
                    "local_rank": int(sub.get_local_rank()),
                }
            return out
        finally:
            dist.destroy_process_group()
    finally:
        if saved is None:
            os.environ.pop("GLOO_SOCKET_IFNAME", None)
        else:
            os.environ["GLOO_SOCKET_IFNAME"] = saved


def device_mesh_check(
    cluster: Any,
    layout: Any = None,
    timeout: float | None = None,
    spec: tuple[tuple[int, ...], tuple[str, ...]] | None = None,
) -> pd.DataFrame:
    """On every rank of ``cluster`` (a running ``LocalCluster``), build the real ``DeviceMesh`` of
    ``layout.device_mesh_spec()`` (``layout`` defaults to the cluster's applied layout) and check, for each of
    the nine dims, that the mesh group (a dim, or mesh dims flattened with ``_flatten``) has exactly this layout's
    members in this layout's order: the group's ranks, an all-gather of global ranks inside it, and the rank's
    local rank. Returns one row per dim (``ok`` column); raises ``ClusterError`` if a rank fails.

    ``spec=(mesh_shape, mesh_dim_names)`` checks another export instead (its names must be the four axes
    ``tensor``, ``sequence_data``, ``batch_data``, ``pipeline``), e.g. to see that the fastest-first order
    given to torch (which wants slowest first) breaks the groups."""
    import pandas as pd

    layout = layout if layout is not None else getattr(cluster, "layout", None)
    if layout is None:
        raise ConventionError("no layout: pass layout=... or apply one to the cluster first")
    if layout.world_size != cluster.world_size:
        raise ConventionError(f"layout has world_size={layout.world_size}, the cluster {cluster.world_size} ranks")
    shape, names, mesh = layout.device_mesh_spec()
    if spec is not None:
        shape, names = tuple(int(s) for s in spec[0]), tuple(spec[1])
        if sorted(names) != sorted(layout.grid_axes) or len(shape) != len(names):
            raise ConventionError(f"spec names {names} must be the axes {tuple(layout.grid_axes)} in some order")
        if int(np.prod(shape)) != layout.world_size:
            raise ConventionError(f"spec shape {shape} has {int(np.prod(shape))} ranks, not {layout.world_size}")
        mesh = np.arange(layout.world_size).reshape(shape)
    dims = {dim: tuple(n for n in names if n in layout_mesh_dims(layout, dim)) for dim in layout.dim_names}
    limit = float(timeout if timeout is not None else getattr(cluster, "timeout", 60))
    prefix = f"fastdist_device_mesh/{uuid.uuid4().hex}/"
    results = cluster.run(mesh_worker, shape, names, dims, prefix, limit, timeout=timeout)
    results.raise_first()
    values = results.values
    rows = []
    for dim, mesh_dims in dims.items():
        expected_groups = layout.groups(dim)
        position = layout.dim_rank(dim)
        bad = []
        for rank, value in enumerate(values):
            expected = [int(r) for r in layout.group_of(dim, rank)]
            got = value[dim]
            if value["mesh"] != mesh.tolist():
                bad.append(f"rank {rank}: mesh {value['mesh']} != {mesh.tolist()}")
            if got["ranks"] != expected or got["gathered"] != expected or got["local_rank"] != position[rank]:
                bad.append(
                    f"rank {rank}: torch group {got['ranks']}, all-gather {got['gathered']}, local rank "
                    f"{got['local_rank']}; expected {expected}, local rank {position[rank]}"
                )
        rows.append(
            {
                "dim": dim,
                "mesh_dims": ",".join(mesh_dims),
                "flattened": len(mesh_dims) > 1,
                "group_size": int(expected_groups.shape[1]),
                "groups": int(expected_groups.shape[0]),
                "ok": not bad,
                "first_mismatch": bad[0] if bad else "",
            }
        )
    return pd.DataFrame(rows).set_index("dim")
