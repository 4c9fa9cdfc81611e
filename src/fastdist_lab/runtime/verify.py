"""Both halves of a layout verification: what each rank checks, and how the controller puts it together.

A verification is two calls on every rank, whatever runs the ranks (processes, threads, fake groups, a launcher):

1. **build** (``build_rank``): the rank builds ``Distributed`` for the layout from its pool, then checks, without
   any communication, each dim's group as its pool holds it (``rank_identity``): its config's members equal the
   layout's group, the group object has the expected size and group rank, and the pool created that very object
   for those members (not for another dim's or another order). Its generators' seeds are compared with
   ``generator_seeds``.
2. **check** (``check_groups``): every group whose members all passed step 1 is checked with real collectives;
   a group where some member failed is skipped by all its members (``groups_to_skip``), so one bad pool cannot
   leave its partners waiting. Fake groups stop after step 1: their collectives compute nothing.

The collective check of a group of ``k`` members ``G`` (group-rank order): each member all-reduces (sum) the
vector of ``verification.reduction_terms`` and all-gathers its global rank when ``k <= gather_limit``. See
``verification.REDUCTION_TERMS`` for why the sums prove the membership and order exactly in O(1) values per rank.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..config import DIM_NAMES, DistributedConfig
from ..errors import LayoutError
from ..formatting import members_text
from ..layout import Layout
from ..seeds import generator_seeds
from .members import member_tuple
from .pool import Distributed, ProcessGroup
from .results import RankResults
from .verification import Verification, reduction_terms

SKIP_KEY = tuple[str, int]
"""A group to skip: (dim, its first member in the layout)."""


@functools.lru_cache(maxsize=4)
def layout_groups(layout: Layout) -> dict[str, tuple[list[tuple[int, ...]], list[int], list[int]]]:
    """Per dim: every group as a tuple of ints, each rank's row among them and its position in its group (cached
    for a few layouts: the ranks of a simulated world share them). A group that is a progression is the tuple
    ``member_tuple`` gives for its ``range``, so the pools' keys and these are the same objects."""
    out = {}
    for name in DIM_NAMES:
        groups = layout.groups(name)
        steps = np.diff(groups, axis=1) if groups.shape[1] > 1 else np.ones((groups.shape[0], 1), dtype=np.int64)
        progression = (steps == steps[:, :1]).all(axis=1) & (steps[:, 0] > 0)
        rows = [
            member_tuple(range(row[0], row[-1] + int(step[0]), int(step[0]))) if regular else tuple(row)
            for row, step, regular in zip(groups.tolist(), steps, progression.tolist())
        ]
        out[name] = (rows, layout.group_index(name).tolist(), layout.dim_rank(name).tolist())
    return out


def expected_members(layout: Layout, dim: str, rank: int) -> tuple[int, ...]:
    """The members of ``rank``'s group of ``dim`` in ``layout`` (group-rank order)."""
    groups, index, _ = layout_groups(layout)[dim]
    return groups[index[rank]]


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


def _group_problems(distributed: Distributed, name: str, expected: tuple[int, ...], position: int) -> list[str]:
    """What is wrong with dim ``name``'s group as this rank's pool holds it (empty when nothing is)."""
    config = distributed.config
    dim = config.distributed_dims[name]
    problems = []
    members = member_tuple(dim.global_ranks)
    if members is not expected and members != expected:
        problems.append(f"its config gives members {members_text(dim.global_ranks)}")
    if dim.rank != position:
        problems.append(f"its config gives group rank {dim.rank}, expected {position}")
    group = distributed.group(name)
    if group is None:
        if len(expected) != 1:
            problems.append("it has no group")
        return problems
    if group.size() != len(expected):
        problems.append(f"its group has {group.size()} members, expected {len(expected)}")
    if group.rank() != position:
        problems.append(f"its group gives it group rank {group.rank()}, expected {position}")
    record = distributed.pool.record_of(group)
    if record is None:
        problems.append("its group was not created by its pool")
    elif record.members is not expected and record.members != expected:
        problems.append(f"its group was created for members {members_text(record.members)}")
    return problems


def rank_identity(distributed: Distributed, layout: Layout) -> dict[str, Any]:
    """Step 1 on one rank: each dim's group as its pool holds it, checked against ``layout`` (no communication).

    Returns a JSON-ready dict: ``rank``, ``dims`` (one row per dim: ``dim``, ``size``, ``group_rank``,
    ``created``, ``create_seconds`` and, only when something is wrong, ``identity``: the problems), ``seeds_ok``
    and ``seeds``.
    """
    config = distributed.config
    groups = layout_groups(layout)
    rows = []
    for name in DIM_NAMES:
        members, index, positions = groups[name]
        expected, position = members[index[config.rank]], positions[config.rank]
        row: dict[str, Any] = {
            "dim": name,
            "size": len(expected),
            "group_rank": config.distributed_dims[name].rank,
            "created": distributed.group_created.get(name, False),
            "create_seconds": distributed.group_seconds.get(name, 0.0),
        }
        problems = _group_problems(distributed, name, expected, position)
        if problems:
            row["identity"] = problems
        rows.append(row)
    return {"rank": config.rank, "dims": rows, **check_seeds(distributed)}


def _collectives(group: ProcessGroup, terms: list[int], rank: int, gather: bool, device: torch.device) -> dict:
    """All-reduce (sum) ``terms`` inside ``group`` and, with ``gather``, all-gather ``rank``."""
    out: dict[str, Any] = {}
    if gather:
        mine = torch.tensor([rank], dtype=torch.int64, device=device)
        gathered = [torch.zeros_like(mine) for _ in range(group.size())]
        group.allgather([gathered], [mine]).wait()
        out["gathered"] = torch.cat(gathered).tolist()
    total = torch.tensor(terms, dtype=torch.int64, device=device)
    group.allreduce([total]).wait()
    out["reduced"] = total.tolist()
    out["sum"] = out["reduced"][1]
    return out


def check_groups(
    distributed: Distributed, identity: dict[str, Any], skip: set[SKIP_KEY], gather_limit: int | None
) -> dict[str, Any]:
    """Step 2 on one rank: the collective check of each of its groups not in ``skip`` (every member skips the
    same ones). ``gather_limit``: widest group also all-gathered (``None``: every group). Returns ``identity``'s
    dict with each row completed by ``gathered`` / ``reduced`` / ``sum`` (or ``skipped``, or ``detail`` when a
    collective raised) and ``seconds`` (creation plus checks)."""
    config = distributed.config
    rank = config.rank
    rows = []
    for index, row in enumerate(identity["dims"]):
        name = row["dim"]
        row = dict(row)
        dim = config.distributed_dims[name]
        first = int(dim.global_ranks[0])
        group = distributed.group(name)
        begin = time.perf_counter()
        if row.get("identity") or (name, first) in skip:
            row["skipped"] = True
        elif group is None:
            row["gathered"], row["sum"] = [rank], rank
        else:
            slot = group.rank()
            at_slot = 0 <= slot < dim.size and int(dim.global_ranks[slot]) == rank
            terms = reduction_terms(index, rank, at_slot, first)
            gather = gather_limit is None or dim.size <= gather_limit
            try:
                row.update(_collectives(group, terms, rank, gather, distributed.device))
            except Exception as error:  # reported in the row; the other dims still run
                row["detail"] = f"{type(error).__name__}: {error}"
        row["seconds"] = row.get("create_seconds", 0.0) + time.perf_counter() - begin
        rows.append(row)
    return {**identity, "dims": rows}


def groups_to_skip(built: RankResults, layout: Layout) -> set[SKIP_KEY]:
    """The groups step 2 must skip: those with a member that failed step 1 or found its group wrong."""
    skip: set[SKIP_KEY] = set()
    for record in built:
        if record.ok and isinstance(record.value, dict):
            bad = [row["dim"] for row in record.value.get("dims", []) if row.get("identity")]
        else:
            bad = list(DIM_NAMES)
        for name in bad:
            skip.add((name, expected_members(layout, name, record.rank)[0]))
    return skip


def merged_results(built: RankResults, checked: RankResults | None) -> RankResults:
    """Every rank's final record: step 2's, or step 1's where step 1 failed (or there was no step 2)."""
    if checked is None:
        return built
    records = [step1 if not step1.ok else step2 for step1, step2 in zip(built, checked)]
    return RankResults(records, built.coordinates, checked.label, world_size=len(built))


@functools.lru_cache(maxsize=4)
def _coordinates(layout: Layout) -> tuple[tuple[tuple[str, int], ...], ...]:
    columns = ["rank", *layout.ranks.columns]
    table = np.column_stack([np.arange(layout.world_size), *(layout.ranks[c].to_numpy() for c in columns[1:])])
    return tuple(tuple(zip(columns, map(int, row))) for row in table.tolist())


def rank_coordinates(layout: Layout) -> list[dict[str, int]]:
    """Each rank's coordinates in ``layout`` (one dict per rank, in rank order), for ``RankResults.to_frame``."""
    return [dict(row) for row in _coordinates(layout)]


def expected_groups(layout: Layout) -> dict[str, list[list[int]]]:
    """Every dim's groups, as lists of member lists (what the checks must find)."""
    return {name: layout.groups(name).tolist() for name in DIM_NAMES}


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


def verification_of(
    applied: Layout, results: RankResults, seconds: float | None = None, mode: str = "processes", backend: str = ""
) -> Verification:
    """The ``Verification`` of every rank's rows (``merged_results``) for the layout the ranks ran."""
    fields = {key: getattr(value, "value", value) for key, value in applied.fields().items()}
    return Verification.from_rank_rows(
        expected_groups(applied), results, fields, backend or fields["backend"], seconds, mode=mode
    )


def apply_in_two_steps(
    call: Callable[[str, Any], RankResults],
    applied: Layout,
    build_payload: Any,
    mode: str = "processes",
    gather_limit: int | None = None,
    backend: str = "",
) -> Verification:
    """A whole apply through ``call(kind, payload)`` (a cluster's call on every rank): ``"apply"`` with
    ``build_payload`` (step 1), then, unless ``mode`` is ``"fake"``, ``"check"`` with the groups to skip and
    ``gather_limit`` (step 2). Returns the ``Verification``."""
    begin = time.monotonic()
    built = call("apply", build_payload)
    checked = None if mode == "fake" else call("check", (groups_to_skip(built, applied), gather_limit))
    return verification_of(applied, merged_results(built, checked), time.monotonic() - begin, mode, backend)
