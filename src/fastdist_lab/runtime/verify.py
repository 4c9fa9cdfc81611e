"""The per-rank half of a layout verification: real collectives in every group of a ``Distributed``.

Each rank all-gathers its global rank and all-reduces it in each of its groups, and checks its generators'
seeds against ``generator_seeds``. The controller (or the torchrun report writer) aggregates the rows into a
``Verification``.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from ..config import DIM_NAMES, DistributedConfig, LayoutError
from ..layout import Layout
from ..seeds import generator_seeds
from .pool import Distributed, ProcessGroup
from .results import RankResults
from .verification import Verification


def gather_and_sum(group: ProcessGroup, value: int, device: torch.device) -> tuple[list[int], int]:
    """All-gather ``value`` and all-reduce (sum) it inside ``group``; returns (gathered list, sum)."""
    size = group.size()
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    gathered = [torch.zeros_like(tensor) for _ in range(size)]
    group.allgather([gathered], [tensor]).wait()
    total = tensor.clone()
    group.allreduce([total]).wait()
    return [int(item.item()) for item in gathered], int(total.item())


def check_seeds(distributed: Distributed) -> dict[str, Any]:
    """Compare each generator's initial seed with ``generator_seeds(config)`` (valid right after construction)."""
    expected = generator_seeds(distributed.config)
    actual = {
        "default_cpu": int(distributed.default_cpu_generator.initial_seed()),
        "pp_init": int(distributed.pp_init_generator.initial_seed()),
        "tp_init": int(distributed.tp_init_generator.initial_seed()),
        "pp": int(distributed.pp_generator.initial_seed()),
        "tp": int(distributed.tp_generator.initial_seed()),
    }
    return {"seeds_ok": actual == expected, "seeds": {k: str(v) for k, v in actual.items()}}


def check_rank(distributed: Distributed) -> dict[str, Any]:
    """Run the checks of every dim on this rank; returns a JSON-ready dict (``dims`` rows, ``seeds_ok``)."""
    config = distributed.config
    seeds = check_seeds(distributed)
    rows = []
    for name in DIM_NAMES:
        dim = config.distributed_dims[name]
        members = [int(rank) for rank in dim.global_ranks]
        group = distributed.group(name)
        row: dict[str, Any] = {"dim": name, "members": members, "created": distributed.group_created.get(name, False)}
        begin = time.perf_counter()
        try:
            if group is None:
                row["gathered"], row["sum"] = [config.rank], config.rank
            else:
                row["gathered"], row["sum"] = gather_and_sum(group, config.rank, distributed.device)
        except Exception as error:  # reported in the row; the other dims still run
            row["detail"] = f"{type(error).__name__}: {error}"
        row["create_seconds"] = distributed.group_seconds.get(name, 0.0)
        row["seconds"] = row["create_seconds"] + time.perf_counter() - begin
        rows.append(row)
    return {"rank": config.rank, "dims": rows, **seeds}


def expected_groups(layout: Layout) -> dict[str, list[list[int]]]:
    """Every dim's groups, as lists of member lists (what the checks must find)."""
    return {name: layout.groups(name).tolist() for name in DIM_NAMES}


def rank_coordinates(layout: Layout) -> list[dict[str, int]]:
    """Each rank's coordinates in ``layout`` (one dict per rank, in rank order), for ``RankResults.to_frame``."""
    records = layout.ranks.reset_index().to_dict(orient="records")
    return [{key: int(value) for key, value in row.items()} for row in records]


def layout_for_cluster(
    layout: Layout | DistributedConfig, world_size: int, local_world_size: int, backend: str
) -> tuple[Layout, Layout]:
    """Check that ``layout`` fits a cluster of these sizes; returns it (as a ``Layout``) and the layout the ranks
    run: the same with the cluster's backend. ``LayoutError`` when the sizes do not fit."""
    if isinstance(layout, DistributedConfig):
        layout = Layout.from_config(layout)
    if not isinstance(layout, Layout):
        raise TypeError(f"apply() needs a Layout, got {type(layout).__name__}")
    if layout.world_size != world_size:
        raise LayoutError(f"layout world_size={layout.world_size} does not match the cluster's {world_size} ranks")
    if layout.local_world_size > local_world_size:
        raise LayoutError(
            f"layout local_world_size={layout.local_world_size} is larger than the cluster's "
            f"local_world_size={local_world_size}"
        )
    return layout, Layout(**dict(layout.fields(), backend=backend))


def verification_of(applied: Layout, results: RankResults, seconds: float | None = None) -> Verification:
    """The ``Verification`` of every rank's ``check_rank`` rows for the layout the ranks ran."""
    fields = {key: getattr(value, "value", value) for key, value in applied.fields().items()}
    return Verification.from_rank_rows(expected_groups(applied), results, fields, fields["backend"], seconds)
