"""The verdict of a layout on every rank (``Verification``): one row per (dim, group), plain data (no torch).

``Cluster.apply`` builds the layout's groups on every rank (``rank_loop.build_layout``), each rank checking, without
any communication, every dim's group as its pool holds it (its config's members, the group object's size and group
rank, that the pool created that very object for those members) and its generators' seeds; the rows it returns are
judged here into the ``Verification`` that ``apply`` returns: what can be judged without communication
(``collectives`` false). The collective check of every group (``fastdist_lab.checks.verify_groups``: the all-reduce
of a few terms per member, the all-gather of the member list) judges its rows with its own ``judge`` on top of
``membership_problems``, through the same ``Verification.from_rank_rows``.

A ``Verification`` renders as text and HTML, converts to pandas, and round-trips through the JSON report that
``python -m fastdist_lab.worker --report`` writes (``load_report``).
"""

from __future__ import annotations

import functools
import html
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..formatting import members_text, plural, ranks_text
from ..layout import Layout
from .results import RankResults

if TYPE_CHECKING:
    import pandas as pd

REPORT_KIND = "fastdist-lab-verification"
REPORT_VERSION = 1


VERIFICATION_COLUMNS = ("dim", "group", "members", "size", "ok", "seconds", "create_seconds", "created", "detail")
"""Columns of ``Verification.to_frame()``."""

MODES = {
    "processes": "real process groups, one process per rank",
    "threads": "torch's threaded process groups, one thread per rank of one process: real collectives",
    "fake": "torch's fake process groups: membership and group ranks only, no collective ran",
}
"""What runs the ranks of a verification, in words."""

MEMBERSHIP_ONLY = "membership only: no collective ran"
"""What the summary of a verification without collectives (``Cluster.apply``'s) adds."""

Judge = Callable[[int, dict[str, Any], list[int], int], list[str]]
"""``judge(rank, row, members, dim_index)``: what one member's row says is wrong with its group (empty when nothing
is)."""


def expected_groups(layout: Layout) -> dict[str, list[list[int]]]:
    """Every dim's groups (``layout.group_dims``: the expert dims too when it has experts), as lists of member lists
    (what the checks must find)."""
    return {name: layout.groups(name).tolist() for name in layout.group_dims}


def membership_problems(rank: int, row: dict[str, Any], members: list[int], dim_index: int = 0) -> list[str]:
    """What one member's row of ``build_layout`` says is wrong with its group, judged without communication: the
    problems its pool's group showed (``identity``), and a member list other than ``members``."""
    problems = [f"rank {rank}: {text}" for text in row.get("identity", [])]
    if "members" in row and list(row["members"]) != list(members):
        problems.append(f"rank {rank} expected members {members_text(members)} got {members_text(row['members'])}")
    return problems


def judged_rows(expected: dict[str, list[list[int]]], results: RankResults, judge: Judge) -> list[dict[str, Any]]:
    """One row per (dim, group) of ``expected``: every member's row in ``results`` judged by ``judge`` (see
    ``Verification.from_rank_rows``)."""
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
                problems += judge(rank, row, members, dim_index)
            if skipped and not problems:
                problems.append("not checked: the group was skipped")
            detail = "; ".join(problems[:4]) + (" ..." if len(problems) > 4 else "")
            cells = (dim, index, list(members), len(members), not problems, seconds_max, create_max, created, detail)
            rows.append(dict(zip(VERIFICATION_COLUMNS, cells, strict=True)))
    return rows


class Verification:
    """Checks of a layout on every rank: one row per (dim, group), plus per-rank generator-seed checks.

    A group passes when every member reported, each member's pool holds the group it should (members, size, group
    rank, created for those members: see the module) and, where ``collectives`` ran, they agree (judged by
    ``fastdist_lab.checks.verify_groups``). ``results`` is the ``RankResults`` of the check; ``mode`` says what ran
    the ranks (``MODES``); ``collectives`` whether any collective ran (``Cluster.apply`` and fake worlds: no).
    """

    def __init__(
        self,
        rows: list[dict[str, Any]],
        results: RankResults,
        layout_fields: dict[str, Any] | None = None,
        backend: str = "gloo",
        seconds: float | None = None,
        mode: str = "processes",
        collectives: bool | None = None,
    ):
        self._rows = rows
        self._judge_later: Callable[[], list[dict[str, Any]]] | None = None
        self.results = results
        self.layout_fields = layout_fields or {}
        self.backend = backend
        self.seconds = seconds
        self.mode = mode
        self.collectives = mode != "fake" if collectives is None else bool(collectives)

    @classmethod
    def from_rank_rows(
        cls,
        expected: dict[str, list[list[int]]],
        results: RankResults,
        layout_fields: dict[str, Any] | None = None,
        backend: str = "gloo",
        seconds: float | None = None,
        mode: str = "processes",
        judge: Judge | None = None,
    ) -> Verification:
        """Aggregate per-rank check rows (the value each rank returned) against the expected groups of each dim,
        each member's row judged by ``judge`` (default ``membership_problems``: no collective ran; a judge that
        reads collective results makes the verdict one of collectives, unless ``mode`` is ``"fake"``)."""
        collectives = judge is not None and mode != "fake"
        verification = cls([], results, layout_fields, backend, seconds, mode, collectives=collectives)
        verification._judge_later = functools.partial(judged_rows, expected, results, judge or membership_problems)
        return verification

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One dict per (dim, group): ``VERIFICATION_COLUMNS`` (judged on first read: an ``apply`` whose verdict
        nobody reads judges nothing)."""
        if self._judge_later is not None:
            self._rows, self._judge_later = self._judge_later(), None
        return self._rows

    @property
    def seeds_ok(self) -> bool:
        """Whether every rank's generators hold the seeds ``generator_seeds`` predicts."""
        return all(r.ok and isinstance(r.value, dict) and r.value.get("seeds_ok", False) for r in self.results)

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
        if not self.collectives and self.mode != "fake":
            how = f" ({self.mode}, {MEMBERSHIP_ONLY})"
        return (
            f"Verification {verdict}: {plural(len(self.rows), 'group')}{extra}; {world} ranks, "
            f"{self.backend}{took}{how}"
        )

    def to_text(self) -> str:
        """The summary line and the table, as printed by ``fastdist-lab check``."""
        frame = self.to_frame()
        if frame.empty:
            return self.summary()
        no_collective = not self.collectives  # membership checked, no collective ran, nothing timed
        frame = frame.assign(
            members=[members_text(m) for m in frame["members"]],
            seconds=["not run" if no_collective else f"{s:.3f}" for s in frame["seconds"]],
        ).drop(columns=["created", "create_seconds"])
        if no_collective:
            frame = frame.rename(columns={"ok": "membership_ok", "seconds": "collectives"})
        if not frame["detail"].astype(bool).any():
            frame = frame.drop(columns=["detail"])
        return self.summary() + "\n" + frame.to_string(index=False)

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str:
        color = "green" if self.ok else "crimson"
        head = f"<b style='color:{color}'>{html.escape(self.summary())}</b>"
        frame = self.to_frame()
        if not self.collectives:  # no collective ran: nothing was timed
            frame = (
                frame.drop(columns=["seconds"]).rename(columns={"ok": "membership_ok"}).assign(collectives="not run")
            )
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
            "collectives": self.collectives,
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
            collectives=data.get("collectives"),
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
