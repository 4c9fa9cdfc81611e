"""A layout verification, both halves: what every rank checks and how the controller puts it together.

A verification is two calls on every rank, whatever runs the ranks (processes, threads, fake groups, a launcher);
``apply_in_two_steps`` makes them through a cluster's call on every rank:

1. **build** (``"apply"``; on each rank ``rank_loop.build_layout``): the rank builds ``Distributed`` for the layout
   from its pool, then checks, without any communication, each dim's group as its pool holds it against
   ``layout_groups``: its config's members, the group object's size and group rank, and that the pool created that
   very object for those members. Its generators' seeds are compared with ``generator_seeds``.
2. **check** (``"check"``; ``rank_loop.check_groups``): every group whose members all passed step 1 is checked
   with real collectives; a group where some member failed is skipped by all its members (``groups_to_skip``), so
   one bad pool cannot leave its partners waiting. Fake groups stop after step 1: their collectives compute nothing.

The collective check of a group of ``k`` members ``G`` (group-rank order): each member all-reduces (sum) the vector
of ``reduction_terms`` and all-gathers its global rank when ``k <= gather_limit``; ``REDUCTION_TERMS`` says why the
sums prove the membership and order exactly in O(1) values per rank. ``Verification`` judges every group from the
rows the ranks sent back. It is plain data (no torch): renders as text and HTML, converts to pandas, and round-trips
through the JSON report that ``python -m fastdist_lab.worker --report`` writes (``load_report``).
"""

from __future__ import annotations

import functools
import html
import json
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import DIM_NAMES, DistributedConfig
from ..errors import LayoutError
from ..formatting import members_text, plural, ranks_text
from ..layout import Layout
from .members import member_tuple
from .results import RankResults

if TYPE_CHECKING:
    import pandas as pd

REPORT_KIND = "fastdist-lab-verification"
REPORT_VERSION = 1


VERIFICATION_COLUMNS = ("dim", "group", "members", "size", "ok", "seconds", "create_seconds", "created", "detail")
"""Columns of ``Verification.to_frame()``."""

THREADS_GATHER_LIMIT = 4
"""Widest group a simulated (threaded) world also all-gathers; processes all-gather every group, as always."""

MODES = {
    "processes": "real process groups, one process per rank",
    "threads": "torch's threaded process groups, one thread per rank of one process: real collectives",
    "fake": "torch's fake process groups: membership and group ranks only, no collective ran",
}
"""What runs the ranks of a verification, in words."""

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


def reduction_terms(dim_index: int, rank: int, at_slot: bool, first: int) -> list[int]:
    """One member's contribution to a group's all-reduce (see ``REDUCTION_TERMS``)."""
    high, low = divmod(int(first), FIRST_SPLIT)
    return [1, int(rank), int(at_slot), dim_index, dim_index**2, high, high**2, low, low**2]


def expected_reduction(dim_index: int, members: list[int]) -> list[int]:
    """The all-reduce a group of ``members`` must give (see ``REDUCTION_TERMS``)."""
    size = len(members)
    high, low = divmod(int(members[0]), FIRST_SPLIT)
    return [size, sum(members), size, *(size * v for v in (dim_index, dim_index**2, high, high**2, low, low**2))]


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


@functools.lru_cache(maxsize=4)
def rank_coordinates(layout: Layout) -> tuple[dict[str, int], ...]:
    """Each rank's ``rank`` and ``Layout.coordinates``, one dict per rank in rank order, for ``RankResults.to_frame``
    (cached: the results of every call on a layout share them, and only read them)."""
    names = ["rank", *layout.coordinates]
    table = np.column_stack([np.arange(layout.world_size), *layout.coordinates.values()]).tolist()
    return tuple(dict(zip(names, row)) for row in table)


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


def apply_in_two_steps(
    call: Callable[[str, Any], RankResults],
    applied: Layout,
    build_payload: Any,
    mode: str = "processes",
    gather_limit: int | None = None,
    backend: str = "",
) -> Verification:
    """A whole verification through ``call(kind, payload)`` (a cluster's call on every rank): ``"apply"`` with
    ``build_payload`` (the layout, or its fields), then, unless ``mode`` is ``"fake"``, ``"check"`` with the groups
    to skip and ``gather_limit``. Returns the ``Verification`` of every rank's final rows (step 2's, or step 1's
    where step 1 failed)."""
    begin = time.monotonic()
    built = call("apply", build_payload)
    if mode == "fake":
        results = built
    else:
        checked = call("check", (groups_to_skip(built, applied), gather_limit))
        records = [step1 if not step1.ok else step2 for step1, step2 in zip(built, checked)]
        results = RankResults(records, built.coordinates, checked.label, world_size=len(built))
    fields = {key: getattr(value, "value", value) for key, value in applied.fields().items()}
    return Verification.from_rank_rows(
        expected_groups(applied), results, fields, backend or fields["backend"], time.monotonic() - begin, mode=mode
    )


def groups_to_skip(built: RankResults, layout: Layout) -> set[SKIP_KEY]:
    """The groups step 2 must skip: those with a member that failed step 1 or found its group wrong."""
    skip: set[SKIP_KEY] = set()
    groups = layout_groups(layout)
    for record in built:
        if record.ok and isinstance(record.value, dict):
            bad = [row["dim"] for row in record.value.get("dims", []) if row.get("identity")]
        else:
            bad = list(DIM_NAMES)
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


def _row_problems(rank: int, row: dict[str, Any], members: list[int], dim_index: int, mode: str) -> list[str]:
    """What one member's row says is wrong with its group (empty when nothing is)."""
    problems = [f"rank {rank}: {text}" for text in row.get("identity", [])]
    if "members" in row and list(row["members"]) != list(members):
        problems.append(f"rank {rank} expected members {members_text(members)} got {members_text(row['members'])}")
    if problems or row.get("skipped"):
        return problems
    if row.get("detail"):
        return [f"rank {rank}: {row['detail']}"]
    if "gathered" in row and row["gathered"] != list(members):
        gathered = row["gathered"]
        problems.append(f"rank {rank}: all-gather gave {members_text(gathered)}")
    if "reduced" in row:
        expected = expected_reduction(dim_index, members)
        if list(row["reduced"]) != expected:
            problems.append(f"rank {rank}: {_reduction_problem(list(row['reduced']), expected)}")
    elif "sum" in row and row["sum"] != sum(members):
        problems.append(f"rank {rank}: all-reduce gave {row.get('sum')}, expected {sum(members)}")
    elif "sum" not in row and "gathered" not in row and mode != "fake":
        problems.append(f"rank {rank}: no collective result")
    return problems


class Verification:
    """Checks of a layout on every rank: one row per (dim, group), plus per-rank generator-seed checks.

    A group passes when every member reported, each member's pool holds the group it should (members, size, group
    rank, created for those members: see the module) and, unless ``mode`` is ``"fake"``, the collectives
    agree: the all-reduce of ``REDUCTION_TERMS`` (or, in reports of earlier versions, the sum of the global ranks)
    and, where the group was all-gathered, the member list in group-rank order. ``results`` is the
    ``RankResults`` of the check; ``mode`` says what ran the ranks (``MODES``).
    """

    def __init__(
        self,
        rows: list[dict[str, Any]],
        results: RankResults,
        layout_fields: dict[str, Any] | None = None,
        backend: str = "gloo",
        seconds: float | None = None,
        mode: str = "processes",
    ):
        self.rows = rows
        self.results = results
        self.layout_fields = layout_fields or {}
        self.backend = backend
        self.seconds = seconds
        self.mode = mode

    @classmethod
    def from_rank_rows(
        cls,
        expected: dict[str, list[list[int]]],
        results: RankResults,
        layout_fields: dict[str, Any] | None = None,
        backend: str = "gloo",
        seconds: float | None = None,
        mode: str = "processes",
    ) -> Verification:
        """Aggregate per-rank check rows (the value each rank returned) against the expected groups of each dim."""
        by_rank: dict[int, dict[str, dict[str, Any]]] = {}
        for record in results:
            if record.ok and isinstance(record.value, dict):
                by_rank[record.rank] = {row["dim"]: row for row in record.value.get("dims", [])}
        rows = []
        for dim_index, (dim, groups) in enumerate(expected.items()):
            for index, members in enumerate(groups):
                problems: list[str] = []
                seconds_max = create_max = 0.0
                created = skipped = False
                for rank in members:
                    row = by_rank.get(rank, {}).get(dim)
                    if row is None:
                        if rank < len(results):
                            record = results[rank]
                            why = "no check rows" if record.ok else record.status
                            if record.error is not None:  # the error itself, first line, not just its status
                                why += f" ({str(record.error).splitlines()[0][:200]})"
                        else:
                            why = "missing"
                        problems.append(f"rank {rank}: {why}")
                        continue
                    seconds_max = max(seconds_max, float(row.get("seconds", 0.0)))
                    create_max = max(create_max, float(row.get("create_seconds", 0.0)))
                    created = created or bool(row.get("created", False))
                    skipped = skipped or bool(row.get("skipped", False))
                    problems += _row_problems(rank, row, members, dim_index, mode)
                if skipped and not problems:
                    problems.append("not checked: the group was skipped")
                rows.append(
                    {
                        "dim": dim,
                        "group": index,
                        "members": list(members),
                        "size": len(members),
                        "ok": not problems,
                        "seconds": seconds_max,
                        "create_seconds": create_max,
                        "created": created,
                        "detail": "; ".join(problems[:4]) + (" ..." if len(problems) > 4 else ""),
                    }
                )
        return cls(rows, results, layout_fields, backend, seconds, mode)

    @property
    def seeds_ok(self) -> bool:
        """Whether every rank's generators hold the seeds ``generator_seeds`` predicts."""
        for record in self.results:
            if not (record.ok and isinstance(record.value, dict) and record.value.get("seeds_ok", False)):
                return False
        return True

    @property
    def ok(self) -> bool:
        """Whether every group of every dim passed, every rank answered and every seed matched."""
        return bool(self.rows) and all(row["ok"] for row in self.rows) and self.results.ok and self.seeds_ok

    def failures(self) -> list[dict[str, Any]]:
        """The rows that failed."""
        return [row for row in self.rows if not row["ok"]]

    def rank_failures(self) -> list[list[str]]:
        """For every global rank, what failed that involves it (empty when all is well): the dims whose group
        holding the rank failed (in ``rows`` order), ``"seeds"`` when its generators' seeds differ from the
        prediction, ``"no answer"`` when it did not complete the check."""
        members = [rank for row in self.rows for rank in row["members"]]
        world = max([len(self.results), *(rank + 1 for rank in members)])
        out: list[list[str]] = [[] for _ in range(world)]
        for row in self.rows:
            if not row["ok"]:
                for rank in row["members"]:
                    if row["dim"] not in out[rank]:
                        out[rank].append(row["dim"])
        for record in self.results:
            if not record.ok:
                out[record.rank].append("no answer")
            elif not (isinstance(record.value, dict) and record.value.get("seeds_ok", False)):
                out[record.rank].append("seeds")
        return out

    def to_frame(self) -> pd.DataFrame:
        """One row per (dim, group): members, size, ok, seconds (creation plus checks, slowest member),
        create_seconds (group creation alone), whether it was newly created, and what failed (``detail``)."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=list(VERIFICATION_COLUMNS))

    def summary(self) -> str:
        """One line: verdict, number of groups, backend."""
        failed = len(self.failures())
        verdict = "OK" if self.ok else "FAILED"
        extra = f", {failed} failed" if failed else ""
        if not self.seeds_ok:
            extra += ", seeds differ or missing"
        if not self.results.ok:
            extra += f", {ranks_text(self.results.failed_ranks)} did not complete"
        world = self.layout_fields.get("world_size", len(self.results))
        took = "" if self.seconds is None else f" in {self.seconds:.2f} s"
        how = "" if self.mode == "processes" else f" ({MODES.get(self.mode, self.mode)})"
        return (
            f"Verification {verdict}: {plural(len(self.rows), 'group')}{extra}; {world} ranks, "
            f"{self.backend}{took}{how}"
        )

    def to_text(self) -> str:
        """The summary line and the table, as printed by ``fastdist-lab check``."""
        frame = self.to_frame()
        if frame.empty:
            return self.summary()
        frame = frame.assign(
            members=[members_text(m) for m in frame["members"]],
            seconds=[f"{s:.3f}" for s in frame["seconds"]],
        ).drop(columns=["created", "create_seconds"])
        if not frame["detail"].astype(bool).any():
            frame = frame.drop(columns=["detail"])
        return self.summary() + "\n" + frame.to_string(index=False)

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str:
        color = "green" if self.ok else "crimson"
        head = f"<b style='color:{color}'>{html.escape(self.summary())}</b>"
        frame = self.to_frame()
        table = frame.to_html(index=False, max_rows=200) if not frame.empty else ""
        extra = "" if self.results.ok else self.results.to_html()
        return f"<div class='fastdist-verification'>{head}{table}{extra}</div>"

    # ------------------------------------------------------------- report files
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what ``save`` writes)."""
        return {
            "kind": REPORT_KIND,
            "version": REPORT_VERSION,
            "backend": self.backend,
            "mode": self.mode,
            "seconds": self.seconds,
            "layout": self.layout_fields,
            "rows": self.rows,
            "results": self.results.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verification:
        """Inverse of ``to_dict``."""
        if data.get("kind") != REPORT_KIND:
            raise ValueError(f"not a fastdist-lab verification report (kind={data.get('kind')!r})")
        return cls(
            rows=list(data["rows"]),
            results=RankResults.from_dict(data["results"]),
            layout_fields=data.get("layout") or {},
            backend=data.get("backend", "gloo"),
            seconds=data.get("seconds"),
            mode=data.get("mode", "processes"),
        )

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the report as JSON (atomically: a temporary file renamed into place)."""
        path = os.fspath(path)
        temporary = f"{path}.tmp{os.getpid()}"
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump(self.to_dict(), file, indent=1, default=repr)
        os.replace(temporary, path)


def load_report(path: str | os.PathLike[str]) -> Verification:
    """Read a report written by ``python -m fastdist_lab.worker --report`` (or ``Verification.save``).

    Returns the ``Verification``; its ``results`` attribute is the ``RankResults`` of every rank.
    """
    with open(os.fspath(path), encoding="utf-8") as file:
        return Verification.from_dict(json.load(file))
