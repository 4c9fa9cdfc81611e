"""The seed's ``ProcessGroupPool`` for a simulated rank: the same pool, another kind of group.

``ThreadedGroupPool`` and ``FakeGroupPool`` override the pool's one place where groups come into being
(``create_group``) and nothing else of it: member lists, group ranks, store prefixes (the group names), reuse and
release are the seed's logic, exercised at any scale. One more thing differs by necessity: torch's default CPU
generator is one per process, so each simulated rank's ``Distributed`` seeds a generator of its own in its place
(``default_cpu_generator``).
"""

from __future__ import annotations

from typing import Any

import torch

from ..config import DistributedBackend
from .inprocess import fake_group, threaded_group
from .pool import ProcessGroup, ProcessGroupPool


class SimulatedPool(ProcessGroupPool):
    """A pool of one simulated rank (CPU tensors, gloo semantics). ``store`` and ``shared`` (the table of member
    lists and group names, one object per distinct value) are shared by the world's ranks."""

    kind = "simulated"
    """What kind of group ``create_group`` makes (``"threaded"`` or ``"fake"``)."""

    def __init__(self, rank: int, world_size: int, local_world_size: int, timeout: float, *, store: Any, shared: dict):
        super().__init__(
            rank, world_size, local_world_size, timeout, use_cpu=True, backend=DistributedBackend.gloo, store=store
        )
        self._shared = shared
        self._cpu_generator = torch.Generator()

    def canonical(self, value: Any) -> Any:
        """The world's one object equal to ``value`` (member tuples and names are shared by the ranks)."""
        return self._shared.setdefault(value, value)

    @property
    def default_cpu_generator(self) -> torch.Generator:
        """This rank's stand-in for torch's default CPU generator (which the ranks of one process would share)."""
        return self._cpu_generator


class ThreadedGroupPool(SimulatedPool):
    """A simulated rank's pool whose groups are torch's threaded process groups (``runtime.inprocess``).

    ``namespace`` makes the group names of one simulated world (and one generation of its ranks) unique in this
    process: torch's threaded collectives meet by name.
    """

    kind = "threaded"

    def __init__(
        self,
        rank: int,
        world_size: int,
        local_world_size: int,
        timeout: float,
        *,
        store: Any,
        shared: dict,
        namespace: str,
    ):
        super().__init__(rank, world_size, local_world_size, timeout, store=store, shared=shared)
        self.namespace = namespace

    def create_group(self, members: tuple[int, ...], group_rank: int, name: str) -> ProcessGroup:
        """A threaded group of ``members`` meeting under ``namespace/name`` (the seed's store prefix)."""
        return threaded_group(f"{self.namespace}/{name}", group_rank, len(members))


class FakeGroupPool(SimulatedPool):
    """A simulated rank's pool whose groups are torch's fake process groups: a rank and a size, no communication."""

    kind = "fake"

    def create_group(self, members: tuple[int, ...], group_rank: int, name: str) -> ProcessGroup:
        """A fake group of ``len(members)`` members, this rank being ``group_rank``."""
        return fake_group(group_rank, len(members))
