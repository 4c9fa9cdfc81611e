"""``Verification``: real-collective checks of a layout, one row per (dim, group), and the JSON report.

Plain data (no torch): renders as text and HTML, converts to pandas, and round-trips through the JSON report that
``python -m fastdist_lab.worker --report`` writes (``load_report``).
"""

from __future__ import annotations

import html
import json
import os
from typing import TYPE_CHECKING, Any

from .results import RankResults, ranks_text

if TYPE_CHECKING:
    import pandas as pd

REPORT_KIND = "fastdist-lab-verification"
REPORT_VERSION = 1


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


VERIFICATION_COLUMNS = ("dim", "group", "members", "size", "ok", "seconds", "create_seconds", "created", "detail")
"""Columns of ``Verification.to_frame()``."""


class Verification:
    """Real-collective checks of a layout: one row per (dim, group), plus per-rank generator-seed checks.

    A group passes when every member reported, the all-gather of global ranks equals the expected member list
    and the all-reduce of global ranks equals their sum. ``results`` is the ``RankResults`` of the check.
    """

    def __init__(
        self,
        rows: list[dict[str, Any]],
        results: RankResults,
        layout_fields: dict[str, Any] | None = None,
        backend: str = "gloo",
        seconds: float | None = None,
    ):
        self.rows = rows
        self.results = results
        self.layout_fields = layout_fields or {}
        self.backend = backend
        self.seconds = seconds

    @classmethod
    def from_rank_rows(
        cls,
        expected: dict[str, list[list[int]]],
        results: RankResults,
        layout_fields: dict[str, Any] | None = None,
        backend: str = "gloo",
        seconds: float | None = None,
    ) -> Verification:
        """Aggregate per-rank check rows (the value each rank returned) against the expected groups of each dim."""
        by_rank: dict[int, dict[str, dict[str, Any]]] = {}
        for record in results:
            if record.ok and isinstance(record.value, dict):
                by_rank[record.rank] = {row["dim"]: row for row in record.value.get("dims", [])}
        rows = []
        for dim, groups in expected.items():
            for index, members in enumerate(groups):
                problems: list[str] = []
                seconds_max = create_max = 0.0
                created = False
                for rank in members:
                    row = by_rank.get(rank, {}).get(dim)
                    if row is None:
                        if rank < len(results):
                            record = results[rank]
                            why = "no check rows" if record.ok else record.status
                        else:
                            why = "missing"
                        problems.append(f"rank {rank}: {why}")
                        continue
                    seconds_max = max(seconds_max, float(row.get("seconds", 0.0)))
                    create_max = max(create_max, float(row.get("create_seconds", 0.0)))
                    created = created or bool(row.get("created", False))
                    if list(row.get("members", [])) != list(members):
                        problems.append(f"rank {rank} expected members {list(members)} got {row.get('members')}")
                    if row.get("detail"):
                        problems.append(f"rank {rank}: {row['detail']}")
                    elif row.get("gathered") != list(members):
                        problems.append(f"rank {rank}: all-gather gave {row.get('gathered')}")
                    elif row.get("sum") != sum(members):
                        problems.append(f"rank {rank}: all-reduce gave {row.get('sum')}, expected {sum(members)}")
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
        return cls(rows, results, layout_fields, backend, seconds)

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

    def dim_seconds(self, column: str = "seconds") -> dict[str, float]:
        """Per dim: the slowest group's ``seconds`` (creation plus checks) or ``create_seconds``."""
        out: dict[str, float] = {}
        for row in self.rows:
            out[row["dim"]] = max(out.get(row["dim"], 0.0), float(row.get(column, 0.0)))
        return out

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
        return f"Verification {verdict}: {_plural(len(self.rows), 'group')}{extra}; {world} ranks, {self.backend}{took}"

    def to_text(self) -> str:
        """The summary line and the table, as printed by ``fastdist-lab check``."""
        frame = self.to_frame()
        if frame.empty:
            return self.summary()
        frame = frame.assign(
            members=[" ".join(map(str, m)) for m in frame["members"]],
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
