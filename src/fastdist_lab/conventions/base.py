"""A rank convention: named axes with sizes, fastest-varying first, and the groups of any set of axes.

Every framework numbers its GPUs as a mixed-radix number: global rank = sum(coordinate_i * stride_i), where
the stride of an axis is the product of the sizes of the axes that vary faster than it. What differs between
frameworks is the order of the axes (and how members and groups are enumerated), so one class holds the
arithmetic and the framework classes only say how they name and order things. Pure numpy, no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

MAX_CONVENTION_WORLD_SIZE = 2**24
"""The largest world a convention materialises (as ``Layout`` does)."""


class ConventionError(ValueError):
    """An invalid convention, axis name or mapping; the message names the input and the numbers."""


class Convention:
    """Named axes with sizes, fastest-varying first; global rank = sum(coordinate * stride).

    ``groups(spec)`` returns every group of the axes in ``spec`` as a 2-d array, one row per group. Members
    follow the spec's axes with the convention's fastest axis fastest; groups are enumerated over the other
    axes, fastest first. Subclasses change only how a spec names its axes (``member_axes``).
    """

    kind = "convention"

    def __init__(
        self,
        axes: Sequence[str],
        sizes: Sequence[int],
        *,
        name: str | None = None,
        aliases: Mapping[str, Sequence[str]] | None = None,
    ):
        axes = tuple(axes)
        sizes = tuple(sizes)
        if len(axes) != len(sizes):
            raise ConventionError(f"{len(axes)} axes {axes} but {len(sizes)} sizes {sizes}")
        if not axes:
            raise ConventionError("a convention needs at least one axis")
        if len(set(axes)) != len(axes):
            raise ConventionError(f"axis names must be distinct, got {axes}")
        for axis, size in zip(axes, sizes):
            if not isinstance(axis, str) or not axis:
                raise ConventionError(f"axis name {axis!r} must be a non-empty string")
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
                raise ConventionError(f"size of axis {axis!r} is {size!r}; it must be an integer >= 1")
        self.axes: tuple[str, ...] = axes
        self.sizes: tuple[int, ...] = tuple(int(s) for s in sizes)
        self.name = name or type(self).__name__
        self.aliases: dict[str, tuple[str, ...]] = {}
        for alias, members in (aliases or {}).items():
            members = (members,) if isinstance(members, str) else tuple(members)
            unknown = [m for m in members if m not in axes]
            if unknown or alias in axes:
                raise ConventionError(f"alias {alias!r} -> {members}: not a new name over the axes {axes}")
            self.aliases[alias] = members
        world = int(np.prod(self.sizes, dtype=object))
        if world > MAX_CONVENTION_WORLD_SIZE:
            raise ConventionError(f"world size {world} is too large (at most {MAX_CONVENTION_WORLD_SIZE})")
        self.world_size = world

    # ------------------------------------------------------------------ numbering
    def size(self, axis: str) -> int:
        """The size of ``axis``."""
        return self.sizes[self._index(axis)]

    @property
    def strides(self) -> dict[str, int]:
        """Each axis's rank distance between neighbours: the product of the sizes of the faster axes."""
        out, stride = {}, 1
        for axis, size in zip(self.axes, self.sizes):
            out[axis] = stride
            stride *= size
        return out

    @property
    def grid(self) -> np.ndarray:
        """All global ranks as an array whose axes are this convention's, slowest first (row-major)."""
        return np.arange(self.world_size, dtype=np.int64).reshape(self.sizes[::-1])

    @property
    def grid_axes(self) -> tuple[str, ...]:
        """The names of ``grid``'s axes, slowest first."""
        return self.axes[::-1]

    def coordinates(self, rank: int) -> dict[str, int]:
        """The coordinate of global ``rank`` along every axis."""
        self._check_rank(rank)
        return {axis: rank // stride % self.size(axis) for axis, stride in self.strides.items()}

    def rank_of(self, **coordinates: int) -> int:
        """The global rank at ``coordinates`` (axes left out are 0)."""
        unknown = sorted(set(coordinates) - set(self.axes))
        if unknown:
            raise ConventionError(f"unknown axes {unknown}; {self.name} has {self.axes}")
        rank = 0
        for axis, stride in self.strides.items():
            value = coordinates.get(axis, 0)
            if not 0 <= value < self.size(axis):
                raise ConventionError(f"{axis}={value} must be in [0, {self.size(axis)})")
            rank += value * stride
        return rank

    def coordinate_table(self) -> pd.DataFrame:
        """One row per global rank (index ``rank``), one column per axis (fastest first)."""
        import pandas as pd

        ranks = np.arange(self.world_size, dtype=np.int64)
        frame = pd.DataFrame({axis: ranks // stride % self.size(axis) for axis, stride in self.strides.items()})
        frame.index.name = "rank"
        return frame

    # ------------------------------------------------------------------ groups
    def member_axes(self, spec: str | Sequence[str]) -> tuple[str, ...]:
        """The axes a group spec names, in member order (the first listed varies fastest inside a group).

        Accepts an axis name, an alias, or a sequence of axis names/aliases; the members then follow this
        convention's own axis order (fastest axis fastest), whatever the order of ``spec``.
        """
        return self.canonical_axes(spec)

    def canonical_axes(self, spec: str | Sequence[str]) -> tuple[str, ...]:
        """The axes ``spec`` names (axes or aliases, any order) in this convention's order, fastest first."""
        names = self._expand(spec)
        return tuple(axis for axis in self.axes if axis in names)

    def groups(self, spec: str | Sequence[str]) -> np.ndarray:
        """Every group of the axes ``spec`` names: one row per group, members in group-rank order."""
        return self.groups_of_axes(self.member_axes(spec))

    def groups_of_axes(self, member_axes: Sequence[str]) -> np.ndarray:
        """The groups over ``member_axes`` (first listed fastest inside a group); groups ordered by the
        remaining axes, this convention's fastest first."""
        member_axes = tuple(member_axes)
        for axis in member_axes:
            self._index(axis)
        if len(set(member_axes)) != len(member_axes):
            raise ConventionError(f"axes {member_axes} repeat a name")
        grid_position = {axis: len(self.axes) - 1 - i for i, axis in enumerate(self.axes)}
        others = [grid_position[a] for a in self.grid_axes if a not in member_axes]
        inner = [grid_position[a] for a in reversed(member_axes)]
        size = int(np.prod([self.size(a) for a in member_axes], dtype=np.int64))
        return self.grid.transpose(others + inner).reshape(-1, size)

    def group_of(self, spec: str | Sequence[str], rank: int) -> tuple[int, ...]:
        """The members of ``rank``'s group of ``spec``, in group-rank order."""
        self._check_rank(rank)
        groups = self.groups(spec)
        return tuple(int(r) for r in groups[np.nonzero((groups == rank).any(axis=1))[0][0]])

    def group_rank(self, spec: str | Sequence[str]) -> np.ndarray:
        """Each global rank's index inside its group of ``spec`` (array indexed by global rank)."""
        groups = self.groups(spec)
        out = np.empty(self.world_size, dtype=np.int64)
        out[groups] = np.arange(groups.shape[1], dtype=np.int64)
        return out

    def group_table(self, spec: str | Sequence[str]) -> np.ndarray:
        """For every global rank, the members of its group: shape (world_size, group size)."""
        return self._table(self.groups(spec))

    def _table(self, groups: np.ndarray) -> np.ndarray:
        row = np.empty(self.world_size, dtype=np.int64)
        row[groups] = np.arange(groups.shape[0], dtype=np.int64)[:, None]
        return groups[row]

    # ------------------------------------------------------------------ helpers
    def _index(self, axis: str) -> int:
        try:
            return self.axes.index(axis)
        except ValueError:
            raise ConventionError(f"{axis!r} is not an axis of {self.name}; use one of {self.axes}") from None

    def _expand(self, spec: str | Sequence[str]) -> set[str]:
        items = [spec] if isinstance(spec, str) else list(spec)
        if not items:
            raise ConventionError("a group spec needs at least one axis")
        names: set[str] = set()
        for item in items:
            if item in self.aliases:
                names.update(self.aliases[item])
            else:
                self._index(item)
                names.add(item)
        return names

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.world_size:
            raise ConventionError(f"rank={rank} must be in [0, world_size={self.world_size})")

    def describe(self) -> str:
        """The axes and sizes, fastest first, as ``tp=2 < cp=1 < dp=4 < pp=2``."""
        return " < ".join(f"{a}={s}" for a, s in zip(self.axes, self.sizes))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Convention):
            return NotImplemented
        return (type(self), self.axes, self.sizes, self.aliases) == (
            type(other),
            other.axes,
            other.sizes,
            other.aliases,
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.axes, self.sizes))

    def __repr__(self) -> str:
        return f"<{self.name}: world {self.world_size}, fastest first {self.describe()}>"


def as_convention(obj: object) -> Convention:
    """``obj`` as a ``Convention``: a convention itself, or a ``Layout`` through ``Layout.as_convention``."""
    if isinstance(obj, Convention):
        return obj
    from ..layout import Layout

    if isinstance(obj, Layout):
        from .project import layout_convention

        return layout_convention(obj)
    raise ConventionError(f"{obj!r} is neither a Convention nor a Layout")


def _as_names(value: str | Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def normalise_mapping(
    left: Convention, right: Convention, mapping: Mapping[str | tuple, str | Sequence[str]] | None
) -> tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]:
    """Each mapping entry as (left axes, right axes), checked against both conventions.

    Keys are axes (or aliases, or tuples of axes) of ``left``; values those of ``right``. Without a mapping,
    a default known for the pair is used (see ``default_mapping``).
    """
    if mapping is None:
        mapping = default_mapping(left, right)
    entries = []
    for key, value in mapping.items():
        a = tuple(sorted(left._expand(_as_names(key)), key=left.axes.index))
        b = tuple(sorted(right._expand(_as_names(value)), key=right.axes.index))
        entries.append((a, b))
    used_a = [x for a, _ in entries for x in a]
    used_b = [x for _, b in entries for x in b]
    for used, conv in ((used_a, left), (used_b, right)):
        if len(set(used)) != len(used):
            raise ConventionError(f"the mapping uses an axis of {conv.name} twice: {used}")
    if not entries:
        raise ConventionError("the mapping is empty")
    return tuple(entries)


def default_mapping(left: Convention, right: Convention) -> dict[str, str | tuple[str, ...]]:
    """The mapping used when none is given: the pair's known one, else the axis names both share."""
    known = getattr(right, "default_mapping_from", None)
    if known is not None:
        found = known(left)
        if found is not None:
            return found
    known = getattr(left, "default_mapping_to", None)
    if known is not None:
        found = known(right)
        if found is not None:
            return found
    shared = [a for a in left.axes if a in right.axes]
    if not shared:
        raise ConventionError(
            f"{left.name} {left.axes} and {right.name} {right.axes} share no axis name; pass mapping={{...}}"
        )
    return {a: a for a in shared}


def axis_subsets(entries: Sequence[tuple[tuple[str, ...], tuple[str, ...]]]) -> list[tuple[int, ...]]:
    """Every non-empty subset of the mapping's entries (as index tuples), smallest first."""
    n = len(entries)
    return [c for k in range(1, n + 1) for c in combinations(range(n), k)]
