"""The nine named process-group dims of one rank, built from (size, stride) pairs exactly as Fast-LLM builds them.

ServiceNow's Fast-LLM (``fast_llm/engine/distributed/config.py`` at commit 91b28fab) describes every group a
rank belongs to as a ``DistributedDim``: a name, the group's size, the rank's index in it and the global ranks
of its members. Pure Python: this is the per-rank reference the whole-world numbering (``fastdist_lab.numbering``,
``fastdist_lab.layout``) is held to by property tests.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

from .errors import LayoutError

MAX_LISTED_MEMBERS = 2**24
"""A group that is not a ``range`` is listed as a tuple; beyond this many members that is refused."""


class DistributedDimNames:
    """The names of the nine distributed dims, as string constants."""

    world = "world"
    data = "data"
    pipeline = "pipeline"
    tensor = "tensor"
    sequence_data = "sequence_data"
    batch_data = "batch_data"
    tensor_and_sequence_data = "tensor_and_sequence_data"
    tensor_and_data = "tensor_and_data"
    model_and_sequence_data = "model_and_sequence_data"


DIM_NAMES: tuple[str, ...] = tuple(v for k, v in DistributedDimNames.__dict__.items() if not k.startswith("_"))
"""The nine named dims, in the order the original ``Distributed`` creates their groups."""


def check_ranks_in_range(global_ranks: Iterable[int], start: int, stop: int) -> None:
    """Raise ``LayoutError`` unless every rank lies in ``[start, stop)``."""
    if isinstance(global_ranks, range) and len(global_ranks):  # its ends, without walking millions of ranks
        low, high = sorted((global_ranks[0], global_ranks[-1]))
    else:
        ranks = list(global_ranks)
        low, high = min(ranks), max(ranks)
    if low < start or high >= stop:
        raise LayoutError(f"global ranks {low}..{high} are not all in [{start}, {stop})")


_IDENTITY = operator.attrgetter("name", "size", "rank", "global_ranks")


class DistributedDim:
    """One named process-group dim as seen from one rank: its size, this rank's index and the members.

    ``global_ranks`` is a ``range`` when the members form the progression the spec builds as a range,
    else a ``tuple`` (hashable). ``global_ranks[rank]`` is always the owning global rank.
    """

    __slots__ = ("name", "size", "rank", "global_ranks", "_group", "_is_setup")

    def __init__(self, name: str, size: int, rank: int, global_ranks: range | tuple[int, ...]):
        self.name = name
        self.size = size
        self.rank = rank
        self.global_ranks = global_ranks
        self._group: Any = None
        self._is_setup = False

    @classmethod
    def from_sizes_and_strides(
        cls, name: str, global_rank: int, sizes_and_strides: Iterable[tuple[int, int]]
    ) -> DistributedDim:
        """Build the dim of ``global_rank`` from its (size, stride) pairs, as the spec states."""
        pairs = list(sizes_and_strides)
        start, rank, size_so_far = global_rank, 0, 1
        for index, (size, stride) in enumerate(pairs):
            if index and stride % pairs[index - 1][1]:
                raise LayoutError(
                    f"dim {name}: stride {stride} is not a multiple of the previous stride {pairs[index - 1][1]}"
                )
            coordinate = global_rank // stride % size
            start -= coordinate * stride
            rank += size_so_far * coordinate
            size_so_far *= size
        members: range | tuple[int, ...] = (start,)
        for size, stride in pairs:
            if size == 1:
                continue
            if len(members) == 1:
                members = range(start, start + size * stride, stride)
            elif isinstance(members, range) and stride == members.stop - members.start:
                members = range(start, start + size * stride, members.step)
            else:
                if len(members) * size > MAX_LISTED_MEMBERS:
                    raise LayoutError(
                        f"dim {name}: a group of {len(members) * size} non-contiguous ranks is too large to list "
                        f"(at most {MAX_LISTED_MEMBERS})"
                    )
                members = tuple(first + offset for offset in range(0, size * stride, stride) for first in members)
        return cls(name, size_so_far, rank, members)

    @property
    def group(self) -> Any:
        """The process group once ``setup`` was called (``None`` for a dim of size 1)."""
        if not self._is_setup:
            raise RuntimeError(f"dim {self.name} has no process group yet; call setup(group) first")
        return self._group

    def setup(self, group: Any) -> None:
        """Attach the process group built for this dim (``None`` exactly when size is 1)."""
        if self._is_setup:
            raise RuntimeError(f"dim {self.name} is already set up")
        if (group is None) != (self.size == 1):
            raise RuntimeError(f"dim {self.name} of size {self.size} got group {group!r}")
        if group is not None and (group.size(), group.rank()) != (self.size, self.rank):
            raise RuntimeError(
                f"dim {self.name}: group has size {group.size()} rank {group.rank()}, "
                f"expected size {self.size} rank {self.rank}"
            )
        self._group = group
        self._is_setup = True

    def check_ranks_in_range(self, start: int, stop: int) -> None:
        """Raise ``LayoutError`` unless every member lies in ``[start, stop)``."""
        check_ranks_in_range(self.global_ranks, start, stop)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DistributedDim):
            return NotImplemented
        return _IDENTITY(self) == _IDENTITY(other)

    def __hash__(self) -> int:
        return hash((self.name, self.size, self.rank, tuple(self.global_ranks)))

    def __repr__(self) -> str:
        return (
            f"DistributedDim(name={self.name!r}, size={self.size}, rank={self.rank}, "
            f"global_ranks={self.global_ranks!r})"
        )
