"""torch's ``DeviceMesh`` of a layout built with torch's fake process groups: any world, ``"cpu"`` or ``"cuda"``,
in this process and without a GPU.

For each checked rank, a fake default process group (``init_process_group("fake")`` on torch's ``FakeStore``)
stands in for that rank; ``init_device_mesh`` builds the mesh of ``Layout.device_mesh_spec()`` and each of the
nine dims is sliced (and flattened where it spans several mesh dims) exactly as on a real job. What torch then says
of the sub-mesh's group (its ranks, this rank's local rank) is compared with the layout. No collective runs (fake
groups compute nothing), so this proves the mesh's membership and order as torch builds them, for an NCCL layout
too, and nothing about communication.

Building a mesh makes every rank create every group of every mesh dim, so the cost of one rank grows with the
world (about 0.25 s per rank at 16,384 ranks): by default a sample of ranks is checked (``sample_ranks``: the
corners of every mesh axis, where a wrong stride or order shows first).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from ..conventions import layout_mesh_dims
from ..errors import ConventionError
from ..layout import Layout
from .device_mesh_check import mesh_of_dim

if TYPE_CHECKING:
    import pandas as pd

MESH_DEVICE_TYPES = ("cpu", "cuda")
"""Device types a fake mesh is built for by default (``"cuda"`` needs no GPU with fake groups)."""


def sample_ranks(layout: Layout) -> list[int]:
    """Rank 0, the last rank, and the last rank along each mesh axis from rank 0 (sorted, distinct)."""
    shape, _, mesh = layout.device_mesh_spec()
    picks = {0, layout.world_size - 1}
    for axis, size in enumerate(shape):
        index = [0] * len(shape)
        index[axis] = size - 1
        picks.add(int(mesh[tuple(index)]))
    return sorted(picks)


def _one_rank(layout: Layout, rank: int, device_type: str, dims: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """Build the fake mesh as ``rank`` and return, per dim, what differs from the layout (empty when nothing)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from ..runtime.inprocess import fake_store  # torch's private fake store, behind the feature check

    shape, names, _ = layout.device_mesh_spec()
    dist.init_process_group("fake", store=fake_store(), rank=rank, world_size=layout.world_size)
    try:
        mesh = init_device_mesh(device_type, shape, mesh_dim_names=names)
        found = {}
        for dim, mesh_dims in dims.items():
            sub = mesh_of_dim(mesh, dim, mesh_dims)
            ranks = [int(r) for r in dist.get_process_group_ranks(sub.get_group())]
            expected = [int(r) for r in layout.group_of(dim, rank)]
            local, position = int(sub.get_local_rank()), int(layout.dim_rank(dim)[rank])
            found[dim] = (
                ""
                if ranks == expected and local == position
                else f"rank {rank}: torch group {ranks[:8]}{' ...' if len(ranks) > 8 else ''}, local rank {local}; "
                f"expected {expected[:8]}{' ...' if len(expected) > 8 else ''}, local rank {position}"
            )
        return found
    finally:
        dist.destroy_process_group()


def fake_device_mesh_check(
    layout: Layout, device_types: Iterable[str] = MESH_DEVICE_TYPES, ranks: Iterable[int] | str | None = None
) -> pd.DataFrame:
    """Build the ``DeviceMesh`` of ``layout.device_mesh_spec()`` with fake process groups, as each of ``ranks``
    (default ``sample_ranks(layout)``; ``"all"`` for every rank) and for each of ``device_types``, and compare
    every dim's sub-mesh group and local rank with the layout. One row per (device type, dim): ``mesh_dims``,
    ``ranks_checked``, ``ok``, ``first_mismatch``. No collective runs (see the module).

    Raises ``ConventionError`` when this process already has a default process group (it is never replaced)."""
    import pandas as pd
    import torch.distributed as dist

    if dist.is_initialized():
        raise ConventionError("this process already has a default process group; the fake mesh check needs its own")
    if ranks is None:
        chosen = sample_ranks(layout)
    elif isinstance(ranks, str):
        if ranks != "all":
            raise ConventionError(f"ranks={ranks!r}: use 'all', a list of ranks or None (a sample)")
        chosen = list(range(layout.world_size))
    else:
        chosen = sorted({int(r) for r in ranks})
        bad = [r for r in chosen if not 0 <= r < layout.world_size]
        if bad:
            raise ConventionError(f"ranks {bad} are not in [0, {layout.world_size})")
    _, names, _ = layout.device_mesh_spec()
    dims = {dim: tuple(n for n in names if n in layout_mesh_dims(layout, dim)) for dim in layout.dim_names}
    rows = []
    for device_type in device_types:
        found = [_one_rank(layout, rank, device_type, dims) for rank in chosen]
        for dim, mesh_dims in dims.items():
            bad = [problems[dim] for problems in found if problems[dim]]
            rows.append(
                {
                    "device_type": device_type,
                    "dim": dim,
                    "mesh_dims": ",".join(mesh_dims),
                    "ranks_checked": len(chosen),
                    "ok": not bad,
                    "first_mismatch": bad[0] if bad else "",
                }
            )
    frame = pd.DataFrame(rows)
    frame.attrs["ranks"] = chosen
    frame.attrs["ok"] = bool(np.all(frame["ok"])) if len(frame) else True
    return frame
