"""torch's two in-process process groups, imported behind a feature check, and the pools of simulated ranks that
make them: the threaded one and the fake one.

Simulated worlds (``runtime.simulated``) are built on them and on nothing home-made:

- ``torch.testing._internal.distributed.multi_threaded_pg.ProcessLocalGroup``: every rank a thread of this
  process, real tensors, real reductions (rank 0 of a group does the work for all, under a condition variable).
  Its collectives meet under the group's ``pg_name``; ``ThreadedGroup`` only gives that name (the pool's store
  prefix, under a namespace of its world) instead of looking it up in c10d's registry, which the pool never uses.
- ``torch.testing._internal.distributed.fake_pg`` (backend ``"fake"``, ``FakeStore``) and
  ``torch._C._distributed_c10d.FakeProcessGroup``: a group of any size with a rank and a size and collectives that
  return at once with wrong values by design. It proves membership and group ranks, and lets torch's
  ``DeviceMesh`` be built for any world, for ``"cpu"`` and ``"cuda"`` alike, without a GPU.

Both modules are private to torch. ``require_inprocess()`` imports them once and checks every name used here; where
one is missing or changed, ``InProcessUnavailable`` says which, with the torch version. The behaviour relied on is
pinned by ``tests/runtime/test_inprocess.py``.

``ThreadedGroupPool`` and ``FakeGroupPool`` are the seed's ``ProcessGroupPool`` for a simulated rank: they override
the pool's one place where groups come into being (``create_group``) and nothing else of it: member lists, group
ranks, store prefixes (the group names), reuse and release are the seed's logic, exercised at any scale. One more
thing differs by necessity: torch's default CPU generator is one per process, so each simulated rank's
``Distributed`` seeds a generator of its own in its place (``default_cpu_generator``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..config import DistributedBackend
from ..errors import InProcessUnavailable
from . import turns
from .pool import ProcessGroup, ProcessGroupPool

TESTED_TORCH = "2.13"
"""The torch release whose in-process groups the tests pin."""


@dataclass(frozen=True)
class InProcessBackends:
    """torch's objects behind simulated worlds (from ``require_inprocess()``)."""

    threaded_class: type
    """``multi_threaded_pg.ProcessLocalGroup``."""
    fake_group: Any
    """``torch._C._distributed_c10d.FakeProcessGroup``."""
    fake_store: type
    """``fake_pg.FakeStore``."""


_THREADED_NAMES = ("_terminate", "_cur_coll_on_pgs", "_coll_lock", "allreduce", "allgather", "pg_name")
_backends: InProcessBackends | None = None
_lock = threading.Lock()


def _missing(what: str, error: BaseException | None = None) -> InProcessUnavailable:
    cause = f" ({type(error).__name__}: {error})" if error is not None else ""
    return InProcessUnavailable(
        f"simulated worlds need torch's in-process process groups, but this torch ({torch.__version__}) "
        f"{what}{cause}; they are tested with torch {TESTED_TORCH} (use real processes: LocalCluster)"
    )


def require_inprocess() -> InProcessBackends:
    """Import torch's threaded and fake process groups (once) and check what simulated worlds use of them.

    Raises ``InProcessUnavailable`` naming the torch version and the missing or changed part.
    """
    global _backends
    with _lock:
        if _backends is not None:
            return _backends
        try:
            from torch.testing._internal.distributed import fake_pg, multi_threaded_pg
        except Exception as error:  # ImportError, or a module that fails on import
            raise _missing(
                "cannot import torch.testing._internal.distributed.{fake_pg,multi_threaded_pg}", error
            ) from None
        group = getattr(multi_threaded_pg, "ProcessLocalGroup", None)
        collective = getattr(multi_threaded_pg, "Collective", None)
        fake = getattr(fake_pg, "FakeProcessGroup", None)
        store = getattr(fake_pg, "FakeStore", None)
        if group is None or collective is None:
            raise _missing("has no multi_threaded_pg.ProcessLocalGroup / Collective")
        lacking = [name for name in _THREADED_NAMES if not hasattr(group, name)]
        lacking += [] if hasattr(collective, "join") else ["Collective.join"]
        if lacking:
            raise _missing(f"has a ProcessLocalGroup without {', '.join(lacking)}")
        if fake is None or not hasattr(fake, "_create_internal") or store is None:
            raise _missing("has no fake_pg.FakeProcessGroup._create_internal / FakeStore")
        _backends = InProcessBackends(_threaded_subclass(group), fake, store)
        return _backends


COLLECTIVES = (
    "allreduce", "allreduce_coalesced", "allgather", "all_gather_single", "all_gather_single_coalesced", "broadcast",
    "scatter", "gather", "reduce_scatter", "reduce_scatter_single", "reduce_scatter_single_coalesced", "alltoall",
    "all_to_all_single", "barrier",
)  # fmt: skip
"""The collectives of torch's threaded group; each waits for the other members with its turn given back."""


def _waiting(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def collective(self: Any, *args: Any, **kwargs: Any) -> Any:
        with turns.waiting():
            return method(self, *args, **kwargs)

    return collective


def _threaded_subclass(base: type) -> type:
    """``ProcessLocalGroup`` named by the pool (its collectives meet under that name) and never registered with
    c10d; its rank thread gives its turn back while a collective waits (``runtime.turns``). Nothing else changes:
    joins, reductions and gathers are torch's."""

    class ThreadedGroup(base):  # type: ignore[misc, valid-type]
        """torch's threaded process group under a name given by the pool (see ``runtime.inprocess``)."""

        def __init__(self, name: str, group_rank: int, size: int):
            super().__init__(group_rank, size)
            self._fastdist_name = name

        @property
        def pg_name(self) -> str:
            """The name this group's collectives meet under (unique to one group of one simulated world)."""
            return self._fastdist_name

        @property
        def group_name(self) -> str:
            """Same as ``pg_name``."""
            return self._fastdist_name

        def shutdown(self) -> None:
            """Nothing to release: the group holds no resource besides its name."""

        def __repr__(self) -> str:
            return f"ThreadedGroup({self._fastdist_name!r}, rank {self.rank()} of {self.size()})"

    for name in COLLECTIVES:
        if hasattr(base, name):
            setattr(ThreadedGroup, name, _waiting(getattr(base, name)))
    return ThreadedGroup


def threaded_group(name: str, group_rank: int, size: int) -> Any:
    """A torch threaded process group of ``size`` members, this thread being ``group_rank``, meeting under ``name``.

    Creating one disables autograd's device threads for the whole process (torch's choice for threaded groups);
    ``SimulatedCluster.close`` puts the previous setting back.
    """
    return require_inprocess().threaded_class(name, group_rank, size)


def fake_group(group_rank: int, size: int) -> Any:
    """torch's fake process group of ``size`` members with this rank being ``group_rank`` (no communication)."""
    return require_inprocess().fake_group._create_internal(group_rank, size)  # noqa: SLF001 - its only constructor


def fake_store() -> Any:
    """torch's ``FakeStore`` (a store that holds nothing, for fake groups and ``init_process_group("fake")``)."""
    return require_inprocess().fake_store()


def release_collectives(prefix: str, wait: Callable[[], object]) -> int:
    """End every threaded collective whose group name starts with ``prefix`` and still waits for members.

    torch's own way out of a stuck collective: its termination flag is set and the waiting members are woken (they
    leave with ``SystemExit``); ``wait()`` is called meanwhile (it should return once the woken threads are gone),
    then the flag is cleared and the collectives forgotten. Only the collectives of ``prefix`` are woken, but the
    flag is torch's, one per process: a collective of another simulated world that completes during ``wait()``
    may end with ``SystemExit`` too. Returns how many collectives were released.
    """
    group = require_inprocess().threaded_class
    with group._coll_lock:  # noqa: SLF001 - torch's lock around its table of running collectives
        table = group._cur_coll_on_pgs  # noqa: SLF001
        stuck = {name: coll for name, coll in table.items() if str(name).startswith(prefix)}
    if not stuck:
        return 0
    group._terminate.set()  # noqa: SLF001
    try:
        for coll in stuck.values():
            for condition in (coll._start_cond, coll._done_cond):  # noqa: SLF001
                with condition:
                    condition.notify_all()
        wait()
    finally:
        group._terminate.clear()  # noqa: SLF001
        with group._coll_lock:  # noqa: SLF001
            for name, coll in stuck.items():
                if table.get(name) is coll:
                    table.pop(name)
    return len(stuck)


# ----------------------------------------------------------------------------------------------- the pools
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
