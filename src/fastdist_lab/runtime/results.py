"""What a cluster call returns: ``RankResults`` (one record per rank) and ``Verification`` (one row per group).

Both are plain data (no torch), render as text and HTML, convert to pandas, and round-trip through the JSON
report that ``python -m fastdist_lab.worker --report`` writes (``load_report``).
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import ClusterError

if TYPE_CHECKING:
    import pandas as pd

REPORT_KIND = "fastdist-lab-verification"
REPORT_VERSION = 1

STATUS_OK = "ok"
STATUS_ERROR = "error"
STATUS_TIMEOUT = "timeout"
STATUS_DIED = "died"
STATUS_INTERRUPTED = "interrupted"


class RemoteTraceback(Exception):
    """The traceback of an exception raised on a rank, attached as ``__cause__`` by ``raise_first``."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n" + self.text


@dataclass
class RankError:
    """An error of one rank: exception type name, message, formatted traceback (and the exception if it travelled)."""

    type: str
    message: str
    traceback: str = ""
    exception: BaseException | None = field(default=None, repr=False, compare=False)

    def __str__(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type

    def to_dict(self) -> dict[str, str]:
        """JSON-ready fields (the exception object is dropped)."""
        return {"type": self.type, "message": self.message, "traceback": self.traceback}


@dataclass
class RankResult:
    """The outcome of one call on one rank."""

    rank: int
    status: str
    value: Any = None
    error: RankError | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float | None = None

    @property
    def ok(self) -> bool:
        """Whether the rank returned normally."""
        return self.status == STATUS_OK

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (a value JSON cannot hold is stored as its ``repr``)."""
        try:
            json.dumps(self.value)
            value = self.value
        except (TypeError, ValueError):
            value = repr(self.value)
        return {
            "rank": self.rank,
            "status": self.status,
            "value": value,
            "error": None if self.error is None else self.error.to_dict(),
            "stdout": self.stdout,
            "stderr": self.stderr,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankResult:
        """Inverse of ``to_dict``."""
        error = data.get("error")
        return cls(
            rank=int(data["rank"]),
            status=data["status"],
            value=data.get("value"),
            error=None if error is None else RankError(**error),
            stdout=data.get("stdout", ""),
            stderr=data.get("stderr", ""),
            seconds=data.get("seconds"),
        )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _ranks_text(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


class RankResults:
    """The outcome of one call on every rank: value or error, captured output and duration of each.

    ``values[rank]`` is the rank's return value (``None`` where it failed); ``errors`` maps each failed rank to its
    ``RankError``. ``coordinates`` (optional) holds each rank's layout coordinates for ``to_frame``.
    """

    def __init__(
        self,
        records: list[RankResult],
        coordinates: list[dict[str, int]] | None = None,
        label: str = "run",
    ):
        self.records = sorted(records, key=lambda record: record.rank)
        self.coordinates = coordinates
        self.label = label

    # ------------------------------------------------------------- access
    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[RankResult]:
        return iter(self.records)

    def __getitem__(self, rank: int) -> RankResult:
        return self.records[rank]

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return len(self.records)

    @property
    def values(self) -> list[Any]:
        """Return values indexed by rank (``None`` where the rank failed)."""
        return [record.value if record.ok else None for record in self.records]

    @property
    def ok(self) -> bool:
        """Whether every rank returned normally."""
        return all(record.ok for record in self.records)

    @property
    def errors(self) -> dict[int, RankError]:
        """Failed rank -> its error."""
        return {record.rank: record.error or RankError(record.status, "") for record in self.records if not record.ok}

    @property
    def failed_ranks(self) -> list[int]:
        """Ranks that did not return normally."""
        return [record.rank for record in self.records if not record.ok]

    def error_groups(self) -> list[tuple[list[int], RankError]]:
        """Errors with identical type, message and traceback, each once with the ranks that raised it."""
        groups: dict[tuple[str, str, str], tuple[list[int], RankError]] = {}
        for rank, error in self.errors.items():
            key = (error.type, error.message, error.traceback)
            groups.setdefault(key, ([], error))[0].append(rank)
        return list(groups.values())

    def raise_first(self) -> None:
        """Raise the first failed rank's exception (its remote traceback as the cause); do nothing if all ok."""
        for rank, error in self.errors.items():
            exception = error.exception
            if exception is not None:
                raise exception from RemoteTraceback(f"on rank {rank}:\n{error.traceback}")
            raise ClusterError(f"rank {rank}: {error}\n{error.traceback}", results=self, ranks=[rank])

    # ------------------------------------------------------------- views
    def to_frame(self) -> pd.DataFrame:
        """One row per rank: its coordinates (when known), status, value, error, duration and output."""
        import pandas as pd

        rows = []
        for record in self.records:
            row: dict[str, Any] = {"rank": record.rank}
            if self.coordinates is not None and record.rank < len(self.coordinates):
                row.update({k: v for k, v in self.coordinates[record.rank].items() if k != "rank"})
            row.update(
                {
                    "status": record.status,
                    "value": record.value,
                    "error": "" if record.error is None else str(record.error),
                    "seconds": record.seconds,
                    "stdout": record.stdout,
                    "stderr": record.stderr,
                }
            )
            rows.append(row)
        return pd.DataFrame(rows).set_index("rank")

    def summary(self) -> str:
        """One line: how many ranks succeeded and failed."""
        counts: dict[str, int] = {}
        for record in self.records:
            counts[record.status] = counts.get(record.status, 0) + 1
        parts = [f"{n} {status}" for status, n in counts.items()]
        return f"{_plural(len(self.records), 'rank')}: " + ", ".join(parts)

    def __repr__(self) -> str:
        lines = [f"RankResults({self.label}; {self.summary()})"]
        if self.ok:
            for record in self.records[:16]:
                lines.append(f"  rank {record.rank}: {record.value!r}"[:200])
            if len(self.records) > 16:
                lines.append(f"  ... {len(self.records) - 16} more")
        for ranks, error in self.error_groups():
            lines.append(f"  {_ranks_text(ranks)}: {error}")
            for line in error.traceback.rstrip().splitlines():
                lines.append("    " + line)
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = f"<b>RankResults</b> ({html.escape(self.label)}; {html.escape(self.summary())})"
        table = self.to_frame().drop(columns=["stdout", "stderr"]).to_html(max_rows=64)
        errors = "".join(
            f"<details><summary>{html.escape(_ranks_text(ranks))}: {html.escape(str(error))}</summary>"
            f"<pre>{html.escape(error.traceback)}</pre></details>"
            for ranks, error in self.error_groups()
        )
        return f"<div class='fastdist-results'>{head}{table}{errors}</div>"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "label": self.label,
            "coordinates": self.coordinates,
            "records": [record.to_dict() for record in self.records],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankResults:
        """Inverse of ``to_dict``."""
        return cls(
            [RankResult.from_dict(item) for item in data["records"]],
            coordinates=data.get("coordinates"),
            label=data.get("label", "run"),
        )


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
                        record = results[rank] if rank < len(results) else None
                        why = record.status if record is not None and not record.ok else "no answer"
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
            extra += f", {_ranks_text(self.results.failed_ranks)} did not complete"
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
        extra = "" if self.results.ok else self.results._repr_html_()
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
