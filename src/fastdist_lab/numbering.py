"""The one numbering core: named axes with sizes, fastest-varying first, as a mixed-radix number.

Every framework numbers its GPUs the same way: global rank = sum(coordinate_a * stride_a), where the stride of
an axis is the product of the sizes of the axes that vary faster than it. Fast-LLM (``distributed.py`` and its
config at commit 91b28fab) puts tensor fastest, then sequence-data, batch-data and pipeline (or pipeline before
the data axes with ``pipeline_first``); Megatron-Core, torch's ``DeviceMesh``, picotron and DeepSpeed only order
the axes differently. So ``Layout``, every convention, the checks and the pictures all use this one class, and a
group is always "the ranks that differ only along some axes": a transpose and a reshape of one rank grid, or,
per rank, the mixed-radix number of its coordinates along those axes.

Pure numpy: whole-world answers in milliseconds, no per-rank Python loop.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from .validation import check_int


def axis_strides(axes: Sequence[str], sizes: Mapping[str, Any]) -> dict[str, Any]:
    """Each axis's stride (rank distance between neighbours along it): the product of the sizes of the axes listed
    before it (``axes``: fastest first). ``sizes`` may hold numbers or numpy arrays (one entry per set-up), so the
    cost model's many set-ups get their strides from the same rule as one ``RankGrid``.

    Example:
        >>> axis_strides(("tensor", "pipeline", "data"), {"tensor": 2, "pipeline": 4, "data": 3})
        {'tensor': 1, 'pipeline': 2, 'data': 8}
    """
    out, stride = {}, 1
    for axis in axes:
        out[axis] = stride
        stride = stride * sizes[axis]
    return out


class RankGrid:
    """Named axes with sizes, fastest-varying first; global rank = sum(coordinate * stride).

    ``groups(member_axes)`` returns every group over ``member_axes`` as a 2-d array, one row per group: members run
    over ``member_axes`` with the FIRST listed fastest, and rows are enumerated over the remaining axes, this grid's
    fastest first (which orders rows by their first, smallest member). ``group_index`` and ``group_rank`` give, for
    every global rank, its row and its position in that row without building the groups.

    ``error`` is the exception type raised for a bad axis name or rank (callers pass their own ``ValueError``
    subclass, e.g. ``LayoutError``); sizes are validated by the caller.
    """

    def __init__(self, axes: Sequence[str], sizes: Sequence[int], *, error: type[ValueError] = ValueError):
        self.axes: tuple[str, ...] = tuple(axes)
        self.sizes: tuple[int, ...] = tuple(int(size) for size in sizes)
        self.error = error
        if len(self.axes) != len(self.sizes):
            raise error(f"{len(self.axes)} axes {self.axes} but {len(self.sizes)} sizes {self.sizes}")
        if len(set(self.axes)) != len(self.axes):
            raise error(f"axis names must be distinct, got {self.axes}")
        if any(size < 1 for size in self.sizes):
            raise error(f"every axis size must be >= 1, got {dict(zip(self.axes, self.sizes))}")
        self.world_size = math.prod(self.sizes)

    # ------------------------------------------------------------------ axes
    def index(self, axis: str) -> int:
        """The position of ``axis`` in ``axes`` (fastest first)."""
        try:
            return self.axes.index(axis)
        except ValueError:
            raise self.error(f"{axis!r} is not an axis; use one of {', '.join(self.axes)}") from None

    def size(self, axis: str) -> int:
        """The size of ``axis``."""
        return self.sizes[self.index(axis)]

    @cached_property
    def strides(self) -> dict[str, int]:
        """Each axis's rank distance between neighbours: the product of the sizes of the faster axes."""
        return axis_strides(self.axes, dict(zip(self.axes, self.sizes)))

    @property
    def grid_axes(self) -> tuple[str, ...]:
        """The names of ``grid``'s axes, slowest first (row-major order, as numpy and torch take shapes)."""
        return self.axes[::-1]

    @cached_property
    def grid(self) -> np.ndarray:
        """All global ranks as a read-only array whose axes are ``grid_axes`` (slowest first)."""
        grid = np.arange(self.world_size, dtype=np.int64).reshape(self.sizes[::-1])
        grid.setflags(write=False)  # groups() returns views of it
        return grid

    def ordered(self, axes: Sequence[str]) -> tuple[str, ...]:
        """``axes`` (checked) in this grid's order, fastest first."""
        wanted = set(axes)
        for axis in wanted:
            self.index(axis)
        return tuple(axis for axis in self.axes if axis in wanted)

    def _checked(self, member_axes: Sequence[str]) -> tuple[str, ...]:
        member_axes = tuple(member_axes)
        for axis in member_axes:
            self.index(axis)
        if len(set(member_axes)) != len(member_axes):
            raise self.error(f"axes {member_axes} repeat a name")
        return member_axes

    # ------------------------------------------------------------------ per rank
    def _radix(self, axes: Sequence[str]) -> np.ndarray:
        """Per rank, the mixed-radix number of its coordinates along ``axes`` (first listed fastest).

        Built by broadcasting one small ``arange`` per axis over the grid's shape: no integer division, which
        numpy does slowly on int64 (a 2**24-rank world takes milliseconds, not seconds).
        """
        shape = self.sizes[::-1]
        terms, weight = [], 1
        for axis in axes:
            size = self.size(axis)
            if size > 1:
                view = [1] * len(shape)
                view[len(self.axes) - 1 - self.index(axis)] = size
                terms.append((np.arange(size, dtype=np.int64) * weight).reshape(view))
            weight *= size
        if not terms:
            return np.zeros(self.world_size, dtype=np.int64)
        out = np.empty(shape, dtype=np.int64)
        out[...] = terms[0]  # the first term writes every cell, the others add: one pass each
        for term in terms[1:]:
            out += term
        return out.reshape(-1)

    def coordinate(self, axis: str) -> np.ndarray:
        """Every global rank's coordinate along ``axis`` (array indexed by global rank)."""
        return self._radix((axis,))

    def check_rank(self, rank: int) -> int:
        """``rank`` as an int, or ``error`` unless it is in ``[0, world_size)``."""
        rank = check_int("rank", rank, error=self.error)
        if not 0 <= rank < self.world_size:
            raise self.error(f"rank={rank} must be in [0, world_size={self.world_size})")
        return rank

    def coordinates_of(self, rank: int) -> dict[str, int]:
        """The coordinate of global ``rank`` along every axis (fastest first)."""
        rank = self.check_rank(rank)
        return {axis: rank // stride % size for (axis, stride), size in zip(self.strides.items(), self.sizes)}

    def group_rank(self, member_axes: Sequence[str]) -> np.ndarray:
        """Every global rank's position inside its group over ``member_axes`` (array indexed by global rank)."""
        return self._radix(self._checked(member_axes))

    def group_index(self, member_axes: Sequence[str]) -> np.ndarray:
        """Every global rank's row in ``groups(member_axes)`` (array indexed by global rank)."""
        members = set(self._checked(member_axes))
        return self._radix([axis for axis in self.axes if axis not in members])

    # ------------------------------------------------------------------ groups
    def group_size(self, member_axes: Sequence[str]) -> int:
        """How many ranks one group over ``member_axes`` holds."""
        # math.prod of Python ints: np.prod of a short list costs more than the groups' reshape (issue 26)
        return math.prod(self.size(axis) for axis in self._checked(member_axes))

    def groups(self, member_axes: Sequence[str]) -> np.ndarray:
        """Every group over ``member_axes``: one row per group, members in group-rank order (first axis fastest)."""
        return self.arrange(self.grid, member_axes)

    def arrange(self, values: np.ndarray, member_axes: Sequence[str]) -> np.ndarray:
        """Per-rank ``values`` (indexed by global rank) laid out like ``groups(member_axes)``: row = group, column =
        position in the group. A transpose and a reshape (one strided copy), never a gather."""
        member_axes = self._checked(member_axes)
        last = len(self.axes) - 1  # grid position of axis i: last - i (the grid is slowest first)
        inner = [last - self.axes.index(a) for a in reversed(member_axes)]
        others = [p for p in range(len(self.axes)) if p not in inner]
        shaped = np.asarray(values).reshape(self.sizes[::-1])
        # the group size from the checked axes directly (group_size would check them again: issue 26)
        return shaped.transpose(others + inner).reshape(-1, math.prod(self.sizes[last - p] for p in inner))

    def group_of(self, member_axes: Sequence[str], rank: int) -> np.ndarray:
        """The members of ``rank``'s group over ``member_axes``, in group-rank order."""
        rank = self.check_rank(rank)
        return self.groups(member_axes)[int(self.group_index(member_axes)[rank])]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RankGrid):
            return NotImplemented
        return (self.axes, self.sizes) == (other.axes, other.sizes)

    def __hash__(self) -> int:
        return hash((self.axes, self.sizes))

    def __repr__(self) -> str:
        return "RankGrid(" + " < ".join(f"{a}={s}" for a, s in zip(self.axes, self.sizes)) + ", fastest first)"


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order: the sizes a dim of a world (or a node) of ``n`` ranks can take."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))
