"""torch's own pipeline schedules (``torch.distributed.pipelining``) on the pool's pipeline groups, and the carrier
of their transfers in a simulated world of threads.

``PipelineStage`` and its schedules talk to c10d: a stage asks ``dist.get_rank(group)`` once when built, and each
transfer becomes a ``dist.P2POp`` whose peer c10d translates between global and group ranks through its registry
of groups, then ``group.send`` / ``group.recv``. The pool builds its groups without ``init_process_group`` and
registers none of them, so for the duration of a step the carrier is entered in c10d's registry (``registered``)
and, while a stage is built, is c10d's default group (``build_stages``, one stage at a time under a lock). Nothing
else of torch is changed: the schedules, the stages and their send / receive order are torch's.

What carries the transfers:

- processes (gloo, NCCL): the pool's own pipeline group; ``group.send`` / ``group.recv`` are gloo's or NCCL's
  point-to-point operations;
- threads: torch's threaded process group has no point-to-point send / receive (torch 2.13), so the carrier is
  ``PairBroadcast``: for each ordered pair (sender, receiver) the pool creates a two-rank group (``(a, b)``, the
  sender first) and a transfer is a broadcast from the sender in it. A send is copied and handed to a thread of
  that pair, so it returns at once as an ``isend`` does; a receive broadcasts when it is waited for, after the
  receives posted before it from the same peer. Each pair's transfers thus meet in the order the schedule issued
  them, as gloo's do (same tag, first in first out);
- a pipeline of one rank: ``Solo`` (transfers between a rank's own stages go through a queue).

c10d's registry (``distributed_c10d._world.pg_group_ranks``) is private to torch: ``require_pipelining`` checks
it exists and raises ``PipeliningUnavailable`` naming the torch version otherwise (tested with torch 2.13).
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed

from ..errors import ClusterError, PipeliningUnavailable
from ..setup import SCHEDULE_KINDS, ScheduleKind

TESTED_TORCH = "2.13"
"""The torch release whose pipelining and c10d registry the tests pin."""

SCHEDULES: dict[str, str] = {name: kind.torch_class for name, kind in SCHEDULE_KINDS.items()}
"""Deprecated (``fastdist_lab.checks.SCHEDULES``): schedule names and torch's class for each, read from the one
registry, ``fastdist_lab.cost.SCHEDULE_KINDS`` (``.torch_class``)."""

_BUILD_LOCK = threading.Lock()


def require_pipelining() -> Any:
    """``torch.distributed.pipelining``, once c10d's registry of groups is found where the carrier enters itself;
    ``PipeliningUnavailable`` names the torch version otherwise."""
    try:
        import torch.distributed.pipelining as pipelining
        from torch.distributed import distributed_c10d
    except Exception as error:
        raise PipeliningUnavailable(
            f"torch {torch.__version__} cannot import torch.distributed.pipelining ({error}); tested with torch "
            f"{TESTED_TORCH}"
        ) from None
    world = getattr(distributed_c10d, "_world", None)
    registry = getattr(world, "pg_group_ranks", None)
    classes = [kind.torch_class for kind in SCHEDULE_KINDS.values()]
    missing = [name for name in (*classes, "PipelineStage") if not hasattr(pipelining, name)]
    if not isinstance(registry, dict) or missing:
        what = f"has no {', '.join(missing)}" if missing else "has no c10d registry of groups (_world.pg_group_ranks)"
        raise PipeliningUnavailable(
            f"torch {torch.__version__} {what}; the training check is tested with torch {TESTED_TORCH}"
        )
    return pipelining


class _Done:
    """A transfer already complete (a send whose tensor was copied)."""

    def wait(self, timeout: Any = None) -> bool:
        """Nothing to wait for."""
        return True


class _Receive:
    """A receive of a ``PairBroadcast`` carrier, done when waited for (after earlier receives from its peer)."""

    def __init__(self, carrier: PairBroadcast, source: int, tensor: torch.Tensor):
        self.carrier, self.source, self.tensor, self.done = carrier, source, tensor, False

    def wait(self, timeout: Any = None) -> bool:
        """Receive every pending transfer from this peer up to this one, in the order they were posted."""
        while not self.done:
            self.carrier.receive_next(self.source)
        return True


def _broadcast(group: Any, tensor: torch.Tensor) -> None:
    options = torch.distributed.BroadcastOptions()
    options.rootRank = 0
    group.broadcast([tensor], options).wait()


class PairBroadcast:
    """Point-to-point transfers of one rank's pipeline group as broadcasts in two-rank groups the pool creates.

    ``members`` is the pipeline group (global ranks in group-rank order), ``group_rank`` this rank's place in it.
    The carrier answers what c10d asks of a group: ``rank()``, ``size()``, ``send`` and ``recv``.
    """

    def __init__(self, pool: Any, members: Sequence[int], group_rank: int):
        self.pool, self.members, self.group_rank = pool, tuple(members), group_rank
        self._outboxes: dict[int, queue.SimpleQueue] = {}
        self._threads: list[threading.Thread] = []
        self._pending: dict[int, collections.deque] = collections.defaultdict(collections.deque)

    def rank(self) -> int:
        """This rank's group rank."""
        return self.group_rank

    def size(self) -> int:
        """Ranks in the pipeline group."""
        return len(self.members)

    def pair(self, sender: int, receiver: int) -> Any:
        """The pool's two-rank group ``(sender, receiver)`` (group ranks given; global ranks in the group)."""
        pair = (self.members[sender], self.members[receiver])
        return self.pool.get_process_group(pair, 0 if sender == self.group_rank else 1)

    def send(self, tensors: list[torch.Tensor], destination: int, tag: int = 0) -> _Done:
        """Copy ``tensors[0]`` and hand it to the thread that broadcasts to ``destination``; complete at once."""
        outbox = self._outboxes.get(destination)
        if outbox is None:
            outbox = self._outboxes[destination] = queue.SimpleQueue()
            group = self.pair(self.group_rank, destination)
            name = f"fastdist-pp-{self.members[self.group_rank]}-to-{self.members[destination]}"
            thread = threading.Thread(target=self._sender, args=(group, outbox), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        outbox.put(tensors[0].detach().clone())
        return _Done()

    @staticmethod
    def _sender(group: Any, outbox: queue.SimpleQueue) -> None:
        while (tensor := outbox.get()) is not None:
            _broadcast(group, tensor)

    def recv(self, tensors: list[torch.Tensor], source: int, tag: int = 0) -> _Receive:
        """A receive into ``tensors[0]`` from ``source``, carried out when waited for."""
        work = _Receive(self, source, tensors[0])
        self._pending[source].append(work)
        return work

    def receive_next(self, source: int) -> None:
        """Carry out the oldest pending receive from ``source``."""
        work = self._pending[source].popleft()
        _broadcast(self.pair(source, self.group_rank), work.tensor)
        work.done = True

    def close(self, timeout: float = 5.0) -> None:
        """End the send threads once their queued transfers are received (abandoned after ``timeout`` seconds)."""
        for outbox in self._outboxes.values():
            outbox.put(None)
        for thread in self._threads:
            thread.join(timeout)


class Solo:
    """The carrier of a pipeline of one rank: transfers between its own stages go through a queue."""

    def __init__(self) -> None:
        self._queue: collections.deque = collections.deque()

    def rank(self) -> int:
        """0."""
        return 0

    def size(self) -> int:
        """1."""
        return 1

    def send(self, tensors: list[torch.Tensor], destination: int, tag: int = 0) -> _Done:
        """Queue a copy of ``tensors[0]``."""
        self._queue.append(tensors[0].detach().clone())
        return _Done()

    def recv(self, tensors: list[torch.Tensor], source: int, tag: int = 0) -> _Done:
        """Take the oldest queued tensor into ``tensors[0]``."""
        tensors[0].copy_(self._queue.popleft())
        return _Done()

    def close(self) -> None:
        """Nothing to release."""


def pipeline_carrier(pool: Any, group: Any, members: Sequence[int], group_rank: int) -> Any:
    """What carries a rank's pipeline transfers: ``Solo`` for one rank, ``PairBroadcast`` on a pool of threaded
    groups, else the pool's pipeline ``group`` itself (gloo / NCCL point-to-point)."""
    if len(members) == 1:
        return Solo()
    if getattr(pool, "kind", None) == "threaded":
        return PairBroadcast(pool, members, group_rank)
    if getattr(pool, "kind", None) == "fake":
        raise ClusterError("fake process groups run no collective: a training step needs threads or processes")
    return group


@contextlib.contextmanager
def registered(carrier: Any, members: Sequence[int]) -> Iterator[None]:
    """While the block runs, c10d translates the carrier's group ranks to ``members`` (its global ranks); a carrier
    of this module is closed after."""
    from torch.distributed import distributed_c10d

    registry = distributed_c10d._world.pg_group_ranks  # noqa: SLF001 - checked by require_pipelining
    registry[carrier] = {int(member): index for index, member in enumerate(members)}
    try:
        yield
    finally:
        registry.pop(carrier, None)
        if isinstance(carrier, (PairBroadcast, Solo)):
            carrier.close()


def build_stages(
    modules: dict[int, torch.nn.Module], num_stages: int, carrier: Any, metas: dict[int, dict[str, Any]]
) -> list[Any]:
    """torch's ``PipelineStage`` for each ``stage index -> module`` of this rank, with the static shapes of
    ``metas[index]`` (``input_args``, ``output_args``, ``input_grads``, ``output_grads``): no shape exchange.

    A stage reads its group rank from c10d's default group while it is built, so the carrier is that default group
    for the moment (one build at a time in this process; the previous default, if any, comes back after)."""
    pipelining = require_pipelining()
    member = torch.distributed.GroupMember
    stages = []
    with _BUILD_LOCK:
        previous = member.WORLD
        member.WORLD = carrier
        try:
            for index, module in sorted(modules.items()):
                device = next(module.parameters()).device
                stages.append(
                    pipelining.PipelineStage(module, index, num_stages, device, group=carrier, **metas[index])
                )
        finally:
            member.WORLD = previous
    return stages


def make_schedule(kind: ScheduleKind, stages: list[Any], micro_batches: int, loss_fn: Any) -> Any:
    """torch's schedule of ``kind`` (``ScheduleKind.torch_class``) over this rank's ``stages`` (gradients not divided
    by the micro-batches: the loss function scales them)."""
    schedule = getattr(require_pipelining(), kind.torch_class)
    if kind.multi_stage:
        return schedule(stages, micro_batches, loss_fn=loss_fn, scale_grads=False)
    return schedule(stages[0], micro_batches, loss_fn=loss_fn, scale_grads=False)
