"""How a group, a set of ranks, a count or an error reads as text, written once for the CLI, the panels and the reports.

A group's members print as ``[0, 2, 4, 6]`` (``[0, 1, ..., 7, ..., 63] (64 ranks)`` when long); a set of ranks as
``ranks 0-4, 6, 7``; a count as ``1 group`` / ``3 groups``. Pure Python.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

MEMBERS_SHOWN = 16
"""Members of a group listed whole; a longer group shows its first ``MEMBERS_SHOWN // 2``, ``...`` and its last."""


def plural(count: int, word: str) -> str:
    """``"1 group"``, ``"3 groups"``, ``"16,384 ranks"``."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def members_text(members: Sequence[int], limit: int = MEMBERS_SHOWN) -> str:
    """A group's members in group-rank order: ``[0, 2, 4, 6]``, or past ``limit`` members the first ``limit // 2``,
    ``...`` and the last with the size: ``[0, 1, 2, 3, 4, 5, 6, 7, ..., 63] (64 ranks)``."""
    size = len(members)
    if size <= limit:
        return "[" + ", ".join(str(int(member)) for member in members) + "]"
    head = ", ".join(str(int(members[index])) for index in range(max(limit // 2, 1)))
    return f"[{head}, ..., {int(members[size - 1])}] ({size:,} ranks)"


def ranks_text(ranks: Iterable[int]) -> str:
    """A set of ranks, sorted, runs of three or more written as a span: ``"rank 3"``, ``"ranks 0-4, 6, 7"``."""
    ordered = sorted({int(rank) for rank in ranks})
    parts: list[str] = []
    index = 0
    while index < len(ordered):
        end = index
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        if end - index >= 2:
            parts.append(f"{ordered[index]}-{ordered[end]}")
        else:
            parts.extend(str(rank) for rank in ordered[index : end + 1])
        index = end + 1
    return ("rank " if len(ordered) == 1 else "ranks ") + ", ".join(parts)


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (torch's C++ errors go on with a stack of frames), or its type name."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
