"""A rank convention: named axes with sizes, fastest-varying first, and the groups of any set of axes.

Every framework numbers its GPUs as a mixed-radix number (``fastdist_lab.numbering.RankGrid``, the one numbering
core of this project); what differs between frameworks is the order of the axes and how their specs name
them, so a ``Convention`` holds a ``RankGrid`` and the framework classes only say how they name and order
things. Pure numpy, no torch.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations

import numpy as np

from ..errors import ConventionError
from ..lazy import warn_deprecated
from ..numbering import RankGrid
from ..validation import check_int

MAX_CONVENTION_WORLD_SIZE = 2**24
"""The largest world a convention materialises (as ``Layout`` does)."""


_IDENTITY = operator.attrgetter("axes", "sizes", "aliases")


class Convention:
    """Named axes with sizes, fastest-varying first; global rank = sum(coordinate * stride).

    ``groups(spec)`` returns every group of the axes in ``spec`` as a 2-d array, one row per group. Members
    follow the spec's axes with the convention's fastest axis fastest; groups are enumerated over the other
    axes, fastest first. Subclasses change only how a spec names its axes (``member_axes``).
    """

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
            check_int(f"size of axis {axis!r}", size, minimum=1, error=ConventionError)
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
        self.rank_grid = RankGrid(self.axes, self.sizes, error=ConventionError)
        """The numbering of this convention (``fastdist_lab.numbering.RankGrid``)."""

    # ------------------------------------------------------------------ numbering
    def size(self, axis: str) -> int:
        """The size of ``axis``."""
        return self.rank_grid.size(axis)

    @property
    def strides(self) -> dict[str, int]:
        """Each axis's rank distance between neighbours: the product of the sizes of the faster axes."""
        return dict(self.rank_grid.strides)

    @property
    def grid(self) -> np.ndarray:
        """All global ranks as an array whose axes are this convention's, slowest first (row-major)."""
        return self.rank_grid.grid

    @property
    def grid_axes(self) -> tuple[str, ...]:
        """The names of ``grid``'s axes, slowest first."""
        return self.rank_grid.grid_axes

    def coordinates(self, rank: int) -> dict[str, int]:
        """The coordinate of global ``rank`` along every axis."""
        return self.rank_grid.coordinates_of(rank)

    def rank_of(self, **coordinates: int) -> int:
        """Deprecated (one release): ``int(convention.grid[index])``, ``index`` the coordinates in ``grid_axes`` order.
        The global rank at ``coordinates`` (axes left out are 0)."""
        warn_deprecated(
            f"fastdist_lab.conventions.{type(self).__name__}.rank_of",
            "int(convention.grid[index]), index the coordinates in convention.grid_axes order",
        )
        unknown = sorted(set(coordinates) - set(self.axes))
        if unknown:
            raise ConventionError(f"unknown axes {unknown}; use {', '.join(self.axes)}")
        index = tuple(
            check_int(axis, coordinates.get(axis, 0), minimum=0, maximum=self.size(axis) - 1, error=ConventionError)
            for axis in self.grid_axes
        )
        return int(self.grid[index])

    # ------------------------------------------------------------------ groups
    def canonical_axes(self, spec: str | Sequence[str]) -> tuple[str, ...]:
        """The axes ``spec`` names (axes or aliases, any order) in this convention's order, fastest first."""
        return self.rank_grid.ordered(self.expand(spec))

    member_axes = canonical_axes
    """The axes a group spec names, in member order (the first listed varies fastest inside a group): here the
    convention's own order, whatever the order of ``spec``; ``DeviceMesh`` orders them as torch's mesh does."""

    def groups(self, spec: str | Sequence[str]) -> np.ndarray:
        """Every group of the axes ``spec`` names: one row per group, members in group-rank order."""
        return self.rank_grid.groups(self.member_axes(spec))

    def group_of(self, spec: str | Sequence[str], rank: int) -> tuple[int, ...]:
        """The members of ``rank``'s group of ``spec``, in group-rank order."""
        return tuple(int(r) for r in self.rank_grid.group_of(self.member_axes(spec), rank))

    def group_index(self, spec: str | Sequence[str]) -> np.ndarray:
        """Each global rank's row in ``groups(spec)`` (array indexed by global rank)."""
        return self.rank_grid.group_index(self.member_axes(spec))

    def group_rank(self, spec: str | Sequence[str]) -> np.ndarray:
        """Each global rank's index inside its group of ``spec`` (array indexed by global rank)."""
        return self.rank_grid.group_rank(self.member_axes(spec))

    # ------------------------------------------------------------------ helpers
    def expand(self, spec: str | Sequence[str]) -> set[str]:
        """The axis names a spec (an axis, an alias, or a sequence of them) stands for."""
        items = [spec] if isinstance(spec, str) else list(spec)
        if not items:
            raise ConventionError("a group spec needs at least one axis")
        names: set[str] = set()
        for item in items:
            if item in self.aliases:
                names.update(self.aliases[item])
            else:
                self.rank_grid.index(item)
                names.add(item)
        return names

    def describe(self) -> str:
        """The axes and sizes, fastest first, as ``tp=2 < cp=1 < dp=4 < pp=2``."""
        return " < ".join(f"{a}={s}" for a, s in zip(self.axes, self.sizes))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Convention):
            return NotImplemented
        return type(self) is type(other) and _IDENTITY(self) == _IDENTITY(other)

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.axes, self.sizes))

    def __repr__(self) -> str:
        return f"<{self.name}: world {self.world_size}, fastest first {self.describe()}>"


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
        a = tuple(sorted(left.expand(_as_names(key)), key=left.axes.index))
        b = tuple(sorted(right.expand(_as_names(value)), key=right.axes.index))
        entries.append((a, b))
    for side, conv in enumerate((left, right)):
        used = [axis for entry in entries for axis in entry[side]]
        if len(set(used)) != len(used):
            raise ConventionError(f"the mapping uses an axis of {conv.name} twice: {used}")
    if not entries:
        raise ConventionError("the mapping is empty")
    return tuple(entries)


def default_mapping(left: Convention, right: Convention) -> dict[str, str | tuple[str, ...]]:
    """The mapping used when none is given: the pair's known one, else the axis names both share."""
    for known, other in (
        (getattr(right, "default_mapping_from", None), left),
        (getattr(left, "default_mapping_to", None), right),
    ):
        found = None if known is None else known(other)
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
