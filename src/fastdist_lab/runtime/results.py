"""What a cluster call returns: ``RankResult`` (one rank) and ``RankResults`` (every rank, indexed by rank), or,
when not every rank answered, the error naming them (``call_failure``).

Plain data (no torch): renders as text and HTML, converts to pandas, and round-trips through JSON. A rank that
sent nothing is kept in its place as a ``"missing"`` record, so position and rank never part.
"""

from __future__ import annotations

import functools
import html
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ..errors import ClusterError, ClusterTimeout, RemoteTraceback
from ..formatting import plural, ranks_text

if TYPE_CHECKING:
    import pandas as pd

    from ..layout import Layout

STATUS_OK = "ok"
STATUS_ERROR = "error"
STATUS_TIMEOUT = "timeout"
STATUS_DIED = "died"
STATUS_INTERRUPTED = "interrupted"
STATUS_MISSING = "missing"
GROUPS_INTERRUPTED = "GroupsInterrupted"
"""The error type of a rank interrupted while its pool was creating or releasing groups (its groups may no longer
match its partners': the controller discards the ranks)."""
SERVER_DIED = "ServerDied"
"""The error type of a rank lost with the process every rank depends on (a local cluster's worker server)."""

REPR_CHARS = 80
"""Characters of a value's ``repr`` shown in ``repr(RankResult)``."""
STACKS_SHOWN = 8
"""Distinct stacks written out in a timeout message (all of them stay in ``ClusterTimeout.stacks``)."""


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


def _output_summary(text: str) -> str:
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    return f"{plural(lines, 'line')}, {len(text):,} chars"


@dataclass(repr=False)
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

    def __repr__(self) -> str:
        if self.ok:
            value = repr(self.value)
            what = f"value={value[:REPR_CHARS]}{'...' if len(value) > REPR_CHARS else ''}"
        else:
            what = f"{self.status}: {self.error or self.status}"
        outputs = (("stdout", self.stdout), ("stderr", self.stderr))
        parts = [f"rank={self.rank}", what, *(f"{name}: {_output_summary(text)}" for name, text in outputs)]
        if self.seconds is not None:
            parts.append(f"{self.seconds:.3f} s")
        return f"RankResult({', '.join(parts)})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (a value JSON cannot hold is stored as its ``repr``)."""
        try:
            json.dumps(self.value)
            value = self.value
        except (TypeError, ValueError):
            value = repr(self.value)
        error = None if self.error is None else self.error.to_dict()
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "value": value, "error": error}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankResult:
        """Inverse of ``to_dict``."""
        error = data.get("error")
        given = {f.name: data.get(f.name, f.default) for f in fields(cls)}
        given.update(rank=int(data["rank"]), status=data["status"], error=None if error is None else RankError(**error))
        return cls(**given)

    @classmethod
    def missing(cls, rank: int) -> RankResult:
        """The record of a rank that sent no result."""
        return cls(rank, STATUS_MISSING, error=RankError("Missing", f"rank {rank} sent no result"))


class RankResults:
    """The outcome of one call on every rank: value or error, captured output and duration of each.

    Indexed by rank: ``results[rank]`` and ``values[rank]`` (``None`` where the rank failed); a rank of
    ``range(world_size)`` without a record is held as a ``"missing"`` record. ``world_size`` defaults to the
    highest rank seen plus one (or the number of ``coordinates``). ``errors`` maps each failed rank to its
    ``RankError``. ``coordinates`` (optional) holds each rank's layout coordinates for ``to_frame``.
    """

    def __init__(
        self,
        records: Iterable[RankResult],
        coordinates: Sequence[dict[str, int]] | None = None,
        label: str = "run",
        world_size: int | None = None,
    ):
        by_rank: dict[int, RankResult] = {}
        for record in records:
            if record.rank < 0:
                raise ValueError(f"rank={record.rank} is not a rank")
            if record.rank in by_rank:
                raise ValueError(f"two results for rank {record.rank}")
            by_rank[record.rank] = record
        if world_size is None:
            world_size = max(max(by_rank, default=-1) + 1, len(coordinates or ()))
        outside = sorted(rank for rank in by_rank if rank >= world_size)
        if outside:
            raise ValueError(f"{ranks_text(outside)} outside world_size={world_size}")
        self.records = [by_rank.get(rank) or RankResult.missing(rank) for rank in range(world_size)]
        self.coordinates = None if coordinates is None else list(coordinates)
        self.label = label

    # ------------------------------------------------------------- access
    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[RankResult]:
        return iter(self.records)

    def __getitem__(self, rank: int) -> RankResult:
        if not 0 <= rank < len(self.records):
            raise IndexError(f"rank {rank} is not in this world of {len(self.records)} ranks")
        return self.records[rank]

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return len(self.records)

    @property
    def values(self) -> list[Any]:
        """Return values indexed by rank (``None`` where the rank failed or is missing)."""
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
        """Ranks that did not return normally (missing ones included)."""
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
            error = "" if record.error is None else str(record.error)
            row.update(status=record.status, value=record.value, error=error, seconds=record.seconds)
            row.update(stdout=record.stdout, stderr=record.stderr)
            rows.append(row)
        return pd.DataFrame(rows).set_index("rank")

    def summary(self) -> str:
        """One line: how many ranks succeeded and failed."""
        counts: dict[str, int] = {}
        for record in self.records:
            counts[record.status] = counts.get(record.status, 0) + 1
        parts = [f"{n} {status}" for status, n in counts.items()]
        return f"{plural(len(self.records), 'rank')}: " + ", ".join(parts)

    def __repr__(self) -> str:
        lines = [f"RankResults({self.label}; {self.summary()})"]
        if self.ok:
            lines += [f"  rank {record.rank}: {record.value!r}"[:200] for record in self.records[:16]]
            if len(self.records) > 16:
                lines.append(f"  ... {len(self.records) - 16} more")
        for ranks, error in self.error_groups():
            lines.append(f"  {ranks_text(ranks)}: {error}")
            lines += ["    " + line for line in error.traceback.rstrip().splitlines()]
        return "\n".join(lines)

    def to_html(self) -> str:
        """The summary, one table row per rank and each distinct error once (what a notebook shows)."""
        head = f"<b>RankResults</b> ({html.escape(self.label)}; {html.escape(self.summary())})"
        table = self.to_frame().drop(columns=["stdout", "stderr"]).to_html(max_rows=64)
        return f"<div class='fastdist-results'>{head}{table}{self.errors_html()}</div>"

    def _repr_html_(self) -> str:
        return self.to_html()

    def errors_html(self) -> str:
        """Each distinct error once, foldable, with the ranks that raised it (HTML)."""
        return "".join(
            f"<details><summary>{html.escape(ranks_text(ranks))}: {html.escape(str(error))}</summary>"
            f"<pre>{html.escape(error.traceback)}</pre></details>"
            for ranks, error in self.error_groups()
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "label": self.label,
            "coordinates": self.coordinates,
            "world_size": self.world_size,
            "records": [record.to_dict() for record in self.records],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankResults:
        """Inverse of ``to_dict``."""
        return cls(
            [RankResult.from_dict(item) for item in data["records"]],
            coordinates=data.get("coordinates"),
            label=data.get("label", "run"),
            world_size=data.get("world_size"),
        )


# ----------------------------------------------------------------------------------------------- a failed call
def group_stacks(stacks: dict[int, str]) -> list[tuple[list[int], str]]:
    """Identical stacks (thread addresses aside) once each, with the ranks that share them, by lowest rank."""
    groups: dict[str, tuple[list[int], str]] = {}
    for rank in sorted(stacks):
        key = re.sub(r"0x[0-9a-fA-F]+", "0x?", stacks[rank]).strip()
        groups.setdefault(key, ([], stacks[rank]))[0].append(rank)
    return list(groups.values())


def stacks_text(stacks: dict[int, str], pid_of: Callable[[int], int | None]) -> list[str]:
    """Lines showing each distinct stack once under the ranks that share it (at most ``STACKS_SHOWN``)."""
    groups = group_stacks(stacks)
    lines = []
    for ranks, text in groups[:STACKS_SHOWN]:
        if len(ranks) == 1:
            pid = pid_of(ranks[0])
            lines.append(f"--- stack of rank {ranks[0]}{'' if pid is None else f' (pid {pid})'} ---")
        else:
            lines.append(f"--- {ranks_text(ranks)} share this stack ---")
        lines.append(text.rstrip())
    if len(groups) > STACKS_SHOWN:
        rest = [rank for ranks, _ in groups[STACKS_SHOWN:] for rank in ranks]
        lines.append(f"--- {len(groups) - STACKS_SHOWN} more distinct stacks, of {ranks_text(rest)}: see .stacks ---")
    return lines


def call_failure(
    state: Any,
    stacks: dict[int, str],
    deaths: dict[int, RankError],
    pid_of: Callable[[int], int | None],
    coordinates: Any = None,
    loss: str | None = None,
) -> ClusterError:
    """The error of a call that not every rank answered: ``ClusterError`` when ranks died, or when ranks whose error
    ends the call (``failed``) left others waiting, else ``ClusterTimeout`` with the ``stacks`` of those that did not
    answer. ``state`` is the call's ``cluster.CallState`` (its label, limit, ranks, ``records`` of the answers,
    ``pending``, ``dead`` and ``failed`` ranks); ``deaths`` says why each dead rank is gone; every rank's record is in
    the error's ``results``. ``loss``: the process that died and took every rank that had not answered with it (the
    worker server, in words to go before "died"), named instead of each rank."""
    label, limit, pending, dead = state.label, state.limit, set(state.pending), set(state.dead)
    records = dict(state.records)
    if loss is not None:
        lost = sorted(dead | pending)
        for rank in lost:
            records[rank] = RankResult(rank, STATUS_DIED, error=RankError(SERVER_DIED, f"{loss} died"))
        results = RankResults(records.values(), coordinates, label, world_size=len(state.ranks))
        answered = sorted(state.records)
        parts = [f"{loss} died during {label}: {ranks_text(lost)} lost with it"
                 + (f" ({ranks_text(answered)} had answered)" if answered else ""),
                 "the workers were stopped; the next call starts a fresh worker server and workers"]  # fmt: skip
        return ClusterError("\n".join(parts), results=results, ranks=lost)
    for rank in dead:
        records[rank] = RankResult(rank, STATUS_DIED, error=deaths.get(rank, RankError("WorkerDied", "gone")))
    for rank in pending:
        error = RankError("Timeout", f"no answer within {limit:g} s", stacks.get(rank, ""))
        records[rank] = RankResult(rank, STATUS_TIMEOUT, error=error)
    results = RankResults(records.values(), coordinates, label, world_size=len(state.ranks))
    answered = sorted(rank for rank in state.records)
    failed = sorted(state.failed)
    if failed and not dead:
        first = records[failed[0]].error
        parts = [f"{ranks_text(failed)} failed during {label}: {first}"]
        if pending:
            parts.append(f"{ranks_text(pending)} did not answer afterwards (waiting for the failed ranks)")
        parts.append("the workers were stopped; the next call starts fresh ones")
        return ClusterError("\n".join(parts), results=results, ranks=sorted(set(failed) | pending))
    if dead:
        parts = [f"{ranks_text(dead)} died during {label}"]
        by_reason: dict[str, list[int]] = {}
        for rank in sorted(dead):
            reason = re.sub(r"worker process \d+", "worker process", str(records[rank].error))
            by_reason.setdefault(reason, []).append(rank)
        if len(dead) == 1:
            parts.append(f"  rank {min(dead)}: {records[min(dead)].error}")
        else:
            parts += [f"  {ranks_text(ranks)}: {reason}" for reason, ranks in by_reason.items()]
        if pending:
            parts.append(f"{ranks_text(pending)} did not answer afterwards")
        parts.append("the workers were stopped; the next call starts fresh ones")
        return ClusterError("\n".join(parts), results=results, ranks=sorted(dead | pending))
    lines = [
        f"{label} timed out after {limit:g} s: {ranks_text(pending)} did not answer"
        + (f" ({ranks_text(answered)} did)" if answered else ""),
        "the workers were stopped; the next call starts fresh ones",
        *stacks_text(stacks, pid_of),
    ]
    return ClusterTimeout("\n".join(lines), results=results, ranks=sorted(pending), stacks=stacks)


@functools.lru_cache(maxsize=4)
def rank_coordinates(layout: Layout) -> tuple[dict[str, int], ...]:
    """Each rank's ``rank`` and ``Layout.coordinates``, one dict per rank in rank order, for ``RankResults.to_frame``
    (cached: the results of every call on a layout share them, and only read them)."""
    import numpy as np

    names = ["rank", *layout.coordinates]
    table = np.column_stack([np.arange(layout.world_size), *layout.coordinates.values()]).tolist()
    return tuple(dict(zip(names, row)) for row in table)
