"""The collective check of every group of a layout: after ``Cluster.apply`` built the groups (each rank checked its
pool's groups without communication), every group whose members all built it right is checked with real
collectives, and the rows of both are judged into one ``Verification``.

``verify_groups(cluster, layout)`` makes the two calls: ``cluster.apply(layout)`` (a ``Verification`` of the
membership), then, unless the world is fake (fake collectives compute nothing), ``cluster.run(check_groups, skip,
gather_limit)`` on every rank. A group where some member failed the build is skipped by all its members
(``groups_to_skip``), so one bad pool cannot leave its partners waiting. An interrupt during the check discards the
ranks at once (``run(..., discard_on_interrupt=True)``): some members may have entered a collective the others did
not.

The collective check of a group of ``k`` members ``G`` (group-rank order): each member all-reduces (sum) the vector
of ``reduction_terms`` and all-gathers its global rank when ``k <= gather_limit``; ``REDUCTION_TERMS`` says why the
sums prove the membership and order exactly in O(1) values per rank.
"""

from __future__ import annotations

import time
from typing import Any

from ..formatting import members_text
from ..layout import Layout
from ..runtime.expert_groups import dim_members
from ..runtime.members import layout_groups
from ..runtime.results import RankResults
from ..runtime.verification import Verification, expected_groups, membership_problems

THREADS_GATHER_LIMIT = 4
"""Widest group a simulated (threaded) world also all-gathers; processes all-gather every group, as always."""

FIRST_SPLIT = 4096
"""A group's first member enters the all-reduce as ``divmod(first, FIRST_SPLIT)``, so no sum can overflow int64
(a ``Layout`` has at most 2**24 ranks)."""

REDUCTION_TERMS = ("count", "rank", "at_slot", "dim", "dim^2", "first_hi", "first_hi^2", "first_lo", "first_lo^2")
"""What each member of a group of ``k`` members ``G`` (group-rank order, dim number ``d`` in ``DIM_NAMES``)
all-reduces (sum): 1, its global rank, 1 when its global rank is ``G[its slot in the communicator]`` (else 0), and
``d``, ``hi``, ``lo`` (``divmod(G[0], FIRST_SPLIT)``: the group it believes it checks) with their squares.

The sums equal ``(k, sum(G), k, k d, k d^2, k hi, k hi^2, k lo, k lo^2)`` exactly when the communicator's ``k``
slots hold members that all check this dim's group ``G`` (a sum of squares equal to ``k`` times the square of the
mean leaves no spread) and each sits at the slot ``G`` gives it: the members are ``G`` in ``G``'s order. That is as
exact as an all-gather, in a few values per rank whatever the group's width."""

ALL_TO_ALL_DIM = "expert"
"""The dim whose groups also run an all-to-all (a mixture-of-experts layer's token exchange), when a layout has
experts: member ``i`` (global rank ``G[i]``) sends member ``j`` the value ``G[i] * ALL_TO_ALL_SHIFT + G[j]`` and
member ``j`` checks that slot ``i`` of what it received is exactly that (the sender it expects, meant for itself)."""

ALL_TO_ALL_SHIFT = 1 << 24
"""A ``Layout`` has at most 2**24 ranks: a sender and a receiver fit in one int64 as ``sender * SHIFT + receiver``."""

SKIP_KEY = tuple[str, int]
"""A group to skip: (dim, its first member in the layout)."""


def reduction_terms(dim_index: int, rank: int, at_slot: bool, first: int) -> list[int]:
    """One member's contribution to a group's all-reduce (see ``REDUCTION_TERMS``)."""
    high, low = divmod(int(first), FIRST_SPLIT)
    return [1, int(rank), int(at_slot), dim_index, dim_index**2, high, high**2, low, low**2]


def expected_reduction(dim_index: int, members: list[int]) -> list[int]:
    """The all-reduce a group of ``members`` must give (see ``REDUCTION_TERMS``)."""
    size = len(members)
    high, low = divmod(int(members[0]), FIRST_SPLIT)
    return [size, sum(members), size, *(size * v for v in (dim_index, dim_index**2, high, high**2, low, low**2))]


def gather_limit_of(mode: str) -> int | None:
    """The widest group a world of ``mode`` also all-gathers (``None``: every group)."""
    return THREADS_GATHER_LIMIT if mode == "threads" else None


# --------------------------------------------------------------------------- on each rank
def _collectives(group: Any, terms: list[int], rank: int, gather: bool, device: Any) -> dict:
    """All-reduce (sum) ``terms`` inside ``group`` and, with ``gather``, all-gather ``rank``."""
    import torch

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


def all_to_all_values(members: list[int] | tuple[int, ...], rank: int) -> list[int]:
    """What global rank ``rank`` sends each member of ``members`` (group-rank order) in the all-to-all check, which is
    also what each member expects from ``rank`` (see ``ALL_TO_ALL_DIM``)."""
    return [int(rank) * ALL_TO_ALL_SHIFT + int(member) for member in members]


def _all_to_all(group: Any, members: Any, rank: int, device: Any) -> dict[str, Any]:
    """The all-to-all check of one expert group on this rank (see ``ALL_TO_ALL_DIM``): ``all_to_all`` the number of
    slots that held what their sender meant for this rank, ``all_to_all_wrong`` the first few that did not, each as
    ``[slot, sender found, receiver found]``. gloo and torch's threaded groups run ``alltoall`` on a list of one
    tensor per member (torch 2.13, tested), as NCCL's does (``scripts/gpu_check.sh``, not run here without GPUs)."""
    import torch

    sent = all_to_all_values(members, rank)
    inputs = [torch.tensor([value], dtype=torch.int64, device=device) for value in sent]
    outputs = [torch.zeros_like(tensor) for tensor in inputs]
    group.alltoall(outputs, inputs, torch.distributed.AllToAllOptions()).wait()
    received = torch.cat(outputs).tolist()
    wrong = [
        [slot, *divmod(int(got), ALL_TO_ALL_SHIFT)]
        for slot, got in enumerate(received)
        if got != all_to_all_values([rank], members[slot])[0]
    ]
    return {"all_to_all": len(received) - len(wrong), "all_to_all_wrong": wrong[:4]}


def check_groups(ctx: Any, skip: set[SKIP_KEY], gather_limit: int | None) -> dict[str, Any]:
    """On one rank, after ``apply``: the collective check of each of its groups not in ``skip`` (every member skips
    the same ones): the all-reduce of ``reduction_terms``, and the all-gather of the global ranks where the group
    has at most ``gather_limit`` members (``None``: every group).

    Returns the build's rows (``ctx.identity``) each completed by ``gathered`` / ``reduced`` / ``sum`` (or
    ``skipped``, or ``detail`` when a collective raised) and ``seconds`` (creation plus checks).
    """
    distributed, identity = ctx.distributed, ctx.identity
    if distributed is None or identity is None:
        raise RuntimeError(f"rank {ctx.rank} has no layout built (its apply failed or never ran)")
    config = distributed.config
    rank = config.rank
    rows = []
    for index, row in enumerate(identity["dims"]):
        name = row["dim"]
        row = dict(row)
        members, _ = dim_members(distributed, ctx.layout, name)
        first = int(members[0])
        group = distributed.group(name)
        begin = time.perf_counter()
        if row.get("identity") or (name, first) in skip:
            row["skipped"] = True
        elif group is None:
            row["gathered"], row["sum"] = [rank], rank
        else:
            slot = group.rank()
            at_slot = 0 <= slot < len(members) and int(members[slot]) == rank
            terms = reduction_terms(index, rank, at_slot, first)
            gather = gather_limit is None or len(members) <= gather_limit
            try:
                row.update(_collectives(group, terms, rank, gather, distributed.device))
                if name == ALL_TO_ALL_DIM:
                    row.update(_all_to_all(group, members, rank, distributed.device))
            except Exception as error:  # reported in the row; the other dims still run
                row["detail"] = f"{type(error).__name__}: {error}"
        row["seconds"] = row.get("create_seconds", 0.0) + time.perf_counter() - begin
        rows.append(row)
    return {**identity, "dims": rows}


# --------------------------------------------------------------------------- on the controller
def groups_to_skip(built: RankResults, layout: Layout) -> set[SKIP_KEY]:
    """The groups the collective check must skip: those with a member that failed the build or found its group
    wrong."""
    skip: set[SKIP_KEY] = set()
    groups = layout_groups(layout)
    for record in built:
        if record.ok and isinstance(record.value, dict):
            bad = [row["dim"] for row in record.value.get("dims", []) if row.get("identity")]
        else:
            bad = list(layout.group_dims)
        for name in bad:
            rows, index, _ = groups[name]
            skip.add((name, rows[index[record.rank]][0]))
    return skip


def _reduction_problem(got: list[int], expected: list[int]) -> str:
    """Which part of an all-reduce differs, in words."""
    wrong = [name for name, a, b in zip(REDUCTION_TERMS, got, expected) if a != b]
    if "count" in wrong:
        return f"all-reduce counted {got[0]} members, expected {expected[0]}"
    if "rank" in wrong or "at_slot" in wrong:
        return f"all-reduce gave ranks summing to {got[1]} with {got[2]} at their slot, expected {expected[1]}, all"
    return "all-reduce shows members checking different groups (" + ", ".join(wrong) + " differ)"


def group_problems(rank: int, row: dict[str, Any], members: list[int], dim_index: int) -> list[str]:
    """What one member's row says is wrong with its group: ``membership_problems``, then the collectives (the
    all-gathered member list, the all-reduce of ``REDUCTION_TERMS`` or, in reports of earlier versions, the sum of
    the global ranks); empty when nothing is."""
    problems = membership_problems(rank, row, members)
    if problems or row.get("skipped"):
        return problems
    if row.get("detail"):
        return [f"rank {rank}: {row['detail']}"]
    if "gathered" in row and row["gathered"] != list(members):
        problems.append(f"rank {rank}: all-gather gave {members_text(row['gathered'])}")
    if "reduced" in row:
        expected = expected_reduction(dim_index, members)
        if list(row["reduced"]) != expected:
            problems.append(f"rank {rank}: {_reduction_problem(list(row['reduced']), expected)}")
    elif "sum" in row and row["sum"] != sum(members):
        problems.append(f"rank {rank}: all-reduce gave {row.get('sum')}, expected {sum(members)}")
    elif "sum" not in row and "gathered" not in row:
        problems.append(f"rank {rank}: no collective result")
    if row.get("dim") == ALL_TO_ALL_DIM and len(members) > 1:
        problems += _all_to_all_problems(rank, row, members)
    return problems


def _all_to_all_problems(rank: int, row: dict[str, Any], members: list[int]) -> list[str]:
    """What one member's all-to-all says is wrong with its expert group (see ``ALL_TO_ALL_DIM``)."""
    if "all_to_all" not in row:
        return [f"rank {rank}: no all-to-all result"]
    problems = [
        f"rank {rank}: all-to-all slot {slot} (rank {members[slot]}) held what rank {sender} meant for rank {receiver}"
        for slot, sender, receiver in row.get("all_to_all_wrong", [])
    ]
    if not problems and row["all_to_all"] != len(members):
        problems.append(f"rank {rank}: all-to-all gave {row['all_to_all']} of {len(members)} values right")
    return problems


def judge_rows(layout: Layout, results: RankResults, backend: str, seconds: float | None, mode: str) -> Verification:
    """The ``Verification`` of every rank's rows after the collective check (``group_problems`` per member)."""
    fields = {key: getattr(value, "value", value) for key, value in layout.fields().items()}
    judge = None if mode == "fake" else group_problems
    return Verification.from_rank_rows(
        expected_groups(layout), results, fields, backend or fields["backend"], seconds, mode=mode, judge=judge
    )


def verify_groups(cluster: Any, layout: Any, timeout: float | None = None) -> Verification:
    """Apply ``layout`` on ``cluster`` and check every group with real collectives (see the module); returns the
    ``Verification`` of every group. Fake worlds stop after the apply (its ``Verification``). Both calls share the
    deadline ``timeout`` (default: the cluster's)."""
    begin = time.monotonic()
    limit = cluster.timeout if timeout is None else timeout
    built = cluster.apply(layout, timeout=limit)
    if built.mode == "fake" or not built.results.ok:
        return built
    applied = Layout(**dict(cluster.layout.fields(), backend=built.layout_fields.get("backend", "gloo")))
    skip = groups_to_skip(built.results, applied)
    left = max(1e-3, limit - (time.monotonic() - begin))
    checked = cluster.run(check_groups, skip, gather_limit_of(built.mode), timeout=left, discard_on_interrupt=True)
    records = [step1 if not step1.ok else step2 for step1, step2 in zip(built.results, checked)]
    results = RankResults(records, built.results.coordinates, "apply", world_size=len(built.results))
    return judge_rows(applied, results, built.backend, time.monotonic() - begin, built.mode)
