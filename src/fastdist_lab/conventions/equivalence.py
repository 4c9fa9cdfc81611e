"""Whether two conventions give the same groups for mapped axes, and the first group where they do not."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .base import Convention, axis_subsets, normalise_mapping
from .project import as_convention

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class GroupDifference:
    """One rank whose group (members in group-rank order) differs between the two conventions."""

    left_axes: tuple[str, ...]
    right_axes: tuple[str, ...]
    rank: int
    left_group: tuple[int, ...]
    right_group: tuple[int, ...]

    def describe(self, left: str = "left", right: str = "right") -> str:
        """One line: the rank, both specs and both groups."""
        return (
            f"rank {self.rank}: {left} {'+'.join(self.left_axes)} group {list(self.left_group)} "
            f"!= {right} {'-'.join(self.right_axes)} group {list(self.right_group)}"
        )


@dataclass(frozen=True)
class SubsetResult:
    """The comparison of one set of mapped axes."""

    left_axes: tuple[str, ...]
    right_axes: tuple[str, ...]
    same: bool
    differing_ranks: int
    difference: GroupDifference | None


@dataclass(frozen=True)
class Equivalence:
    """The answer of ``equivalent``: truthy when every checked set of mapped axes gives the same groups.

    ``difference`` is the first differing group (smallest axis set first, then lowest rank), ``reason``
    says why in words, ``results`` holds one ``SubsetResult`` per checked axis set (``to_frame()``).
    """

    equivalent: bool
    left: str
    right: str
    mapping: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]
    results: tuple[SubsetResult, ...] = field(default=())
    reason: str = ""

    def __bool__(self) -> bool:
        return self.equivalent

    @property
    def difference(self) -> GroupDifference | None:
        """The first differing group, or ``None``."""
        return next((result.difference for result in self.results if result.difference is not None), None)

    def to_frame(self) -> pd.DataFrame:
        """One row per checked set of axes: both specs, same or not, how many ranks differ, first difference."""
        import pandas as pd

        rows = [
            {
                self.left: "+".join(r.left_axes),
                self.right: "-".join(r.right_axes),
                "same": r.same,
                "differing_ranks": r.differing_ranks,
                "first_difference": "" if r.difference is None else r.difference.describe(self.left, self.right),
            }
            for r in self.results
        ]
        return pd.DataFrame(rows, columns=[self.left, self.right, "same", "differing_ranks", "first_difference"])

    def __repr__(self) -> str:
        pairs = ", ".join(f"{'+'.join(a)}={'-'.join(b)}" for a, b in self.mapping)
        head = f"Equivalence({self.equivalent}: {self.left} vs {self.right}; {pairs}; {len(self.results)} axis sets"
        return head + (f"; {self.reason})" if self.reason else ")")

    def _repr_html_(self) -> str:
        verdict = "equivalent" if self.equivalent else "NOT equivalent"
        color = "#1a7f37" if self.equivalent else "#cf222e"
        reason = f"<div>{html.escape(self.reason)}</div>" if self.reason else ""
        table = self.to_frame().to_html(index=False) if self.results else ""
        return (
            f"<div class='fastdist-equivalence'><b style='color:{color}'>{html.escape(self.left)} and "
            f"{html.escape(self.right)}: {verdict}</b>{reason}{table}</div>"
        )


def differing_ranks(
    left: Convention, left_axes: Sequence[str], right: Convention, right_axes: Sequence[str]
) -> np.ndarray:
    """Boolean mask over global ranks: True where the rank's group (members in order) differs between the two.

    O(world_size) memory: a left group can only equal the right group that holds its first member, and a rank's
    groups are equal exactly when its left group equals that right group.
    """
    left_groups, right_groups = left.rank_grid.groups(left_axes), right.rank_grid.groups(right_axes)
    if left_groups.shape != right_groups.shape:
        return np.ones(left.world_size, dtype=bool)
    right_row = right.rank_grid.group_index(right_axes)
    same_row = (right_groups[right_row[left_groups[:, 0]]] == left_groups).all(axis=1)
    return ~same_row[left.rank_grid.group_index(left_axes)]


def compare_groups(
    left: Convention, left_axes: Sequence[str], right: Convention, right_axes: Sequence[str]
) -> SubsetResult:
    """Compare, rank by rank, the group of ``left_axes`` under ``left`` with that of ``right_axes`` under ``right``.

    Both groups list their members in each convention's canonical order for that axis set (its fastest axis
    fastest, which is what Megatron's masks and torch's mesh-order flattening give), so equal groups also mean
    equal ranks inside the group.
    """
    la, ra = left.canonical_axes(left_axes), right.canonical_axes(right_axes)
    differs = differing_ranks(left, la, right, ra)
    count = int(differs.sum())
    if not count:
        return SubsetResult(la, ra, True, 0, None)
    rank = int(np.argmax(differs))
    difference = GroupDifference(
        la, ra, rank, _t(left.rank_grid.group_of(la, rank)), _t(right.rank_grid.group_of(ra, rank))
    )
    return SubsetResult(la, ra, False, count, difference)


def first_group_mismatch(layout: Any, groups: Iterable[tuple[str, tuple[str, np.ndarray]]]) -> tuple | None:
    """The first ``(dim, name, theirs, ours)`` of ``groups`` (``(dim, (name, theirs))``: a framework's groups under
    its ``name`` and the Layout's dim that should hold them) where ``layout.groups(dim)`` differs (members in order,
    groups in any order), or ``None``; what the conventions' ``expert_mismatch`` compare. The groups are put in one
    order by numpy (rows sorted as tuples would be), so a world of millions of ranks takes a second, not a minute."""
    for dim, (name, theirs) in groups:
        ours = layout.groups(dim)
        if theirs.shape != ours.shape or not np.array_equal(_rows_sorted(theirs), _rows_sorted(ours)):
            return dim, name, theirs, ours
    return None


def _rows_sorted(groups: np.ndarray) -> np.ndarray:
    """The rows of ``groups`` in the order ``sorted`` puts tuples: by first member, then second, ..."""
    return groups[np.lexsort(groups.T[::-1])] if groups.ndim == 2 and groups.size else groups


def _t(row: np.ndarray) -> tuple[int, ...]:
    return tuple(int(x) for x in row)


def equivalent(
    layout_or_convention: Any,
    convention: Any,
    mapping: Mapping[Any, Any] | None = None,
) -> Equivalence:
    """Whether two conventions give the same groups, member order included, for every set of mapped axes.

    ``layout_or_convention`` is a ``Layout`` (taken as ``as_convention(layout)``) or a ``Convention``;
    ``convention`` a ``Convention`` (or a ``Layout``). ``mapping`` maps axes of the first to axes of the second,
    e.g. ``{"tensor": "tp", "sequence_data": "cp", "batch_data": "dp", "pipeline": "pp"}``; a value (or key)
    may be a tuple of axes, e.g. ``{"batch_data": ("dp_replicate", "dp_shard")}``. Without it, the known mapping
    of the pair is used (this project <-> Megatron, <-> its own DeviceMesh export), else the shared axis names.
    Every non-empty subset of the mapping's entries is checked.
    """
    left = as_convention(layout_or_convention)
    right = as_convention(convention)
    entries = normalise_mapping(left, right, mapping)
    if left.world_size != right.world_size:
        reason = f"world sizes differ: {left.world_size} vs {right.world_size}"
        return Equivalence(False, left.name, right.name, entries, (), reason)
    results = []
    for subset in axis_subsets(entries):
        la = tuple(x for i in subset for x in entries[i][0])
        ra = tuple(x for i in subset for x in entries[i][1])
        results.append(compare_groups(left, la, right, ra))
    first = next((r for r in results if not r.same), None)
    reason = "" if first is None else first.difference.describe(left.name, right.name)  # type: ignore[union-attr]
    return Equivalence(first is None, left.name, right.name, entries, tuple(results), reason)
