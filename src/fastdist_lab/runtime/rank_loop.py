"""A rank: what a function run on it receives (``RankContext``), how it runs a call, the function ``apply`` runs
on it (``build_layout``), and the loop of a ``LocalCluster`` worker process.

A call is a function and its arguments (``Call.payload``: as they are for ranks in this process, cloudpickled
across processes); a rank runs it on its ``RankContext`` (``execute``) and knows nothing else of what it does.
``Cluster.apply`` is a call of ``build_layout``: ``Distributed`` built from the rank's pool, each group checked as
the pool holds it, without communication (``rank_identity``); ``runtime.verification`` judges the rows.

A local worker is forked by the cluster's worker server (``runtime.server``) with torch already imported and its end
of a socket pair to the controller, opens its generation's rendezvous store (a ``FileStore`` in the cluster's private
directory: no port, nothing another user can open), and then executes calls until told to exit or until the
controller goes away.

A rank whose call is interrupted while its pool is creating or releasing groups reports ``GROUPS_INTERRUPTED``
instead of a plain interrupt: its groups may no longer match its partners', and the controller discards the ranks.
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import torch
import torch.distributed

from ..config import DIM_NAMES, DistributedBackend, DistributedConfig
from ..formatting import members_text
from ..layout import Layout
from ..seeds import generator_seeds
from .capture import OutputCapture
from .channel import Call, Channel, Exit, Outcome, Reply, WorkerFailed, WorkerReady, WorkerSpec
from .members import layout_groups, member_tuple
from .pool import LOOPBACK, Distributed, ProcessGroupPool
from .procs import die_with_parent
from .results import GROUPS_INTERRUPTED, STATUS_ERROR, STATUS_INTERRUPTED, STATUS_OK, RankError


class RankContext:
    """What a function run on a rank receives as its first argument.

    ``rank`` and ``world_size`` always; once a layout is applied, ``layout``, ``config`` (this rank's
    ``DistributedConfig``) and ``distributed`` (this rank's ``Distributed``, whose ``*_group`` attributes are
    real process groups). ``device`` is where tensors of this rank live; ``pool`` is the process-group pool;
    ``state`` is a dict kept between calls (until the workers restart); ``identity`` what the last apply found
    of this rank's groups before any communication (``rank_identity``).
    """

    def __init__(self, rank: int, world_size: int, pool: ProcessGroupPool | None):
        self.rank = rank
        self.world_size = world_size
        self.pool = pool
        self.layout: Layout | None = None
        self.config: DistributedConfig | None = None
        self.distributed: Distributed | None = None
        self.state: dict[str, Any] = {}
        self.identity: dict[str, Any] | None = None

    @property
    def device(self) -> torch.device:
        """This rank's device (``cpu`` for gloo, ``cuda:<local rank>`` for NCCL)."""
        return self.pool.device if self.pool is not None else torch.device("cpu")

    def __repr__(self) -> str:
        return f"RankContext(rank={self.rank}, world_size={self.world_size}, layout={self.layout!r})"


def error_of(exception: BaseException, skip: int = 0) -> RankError:
    """A ``RankError`` for ``exception`` with its formatted traceback, leaving out the first ``skip`` frames."""
    tb = exception.__traceback__
    for _ in range(skip):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exception), exception, tb))
    return RankError(type(exception).__name__, str(exception), text)


def _pickled_exception(exception: BaseException) -> bytes | None:
    try:
        data = cloudpickle.dumps(exception)
        cloudpickle.loads(data)
        return data
    except Exception:
        return None


class _Interruptible:
    """SIGINT raises ``KeyboardInterrupt`` only while user code runs; elsewhere (messaging) it is dropped."""

    active = False

    @classmethod
    def handler(cls, signum: int, frame: Any) -> None:
        if cls.active:
            cls.active = False
            raise KeyboardInterrupt


def interrupted(caught: BaseException, ctx: RankContext, changes: int) -> RankError:
    """The error of a call interrupted on ``ctx``'s rank: ``GROUPS_INTERRUPTED`` when its pool created or released a
    group during the call (its pool had made ``changes`` changes before it began), else the ``KeyboardInterrupt``."""
    error = error_of(caught, skip=1)
    pool = ctx.pool
    if pool is not None and pool.changes != changes:
        error.type = GROUPS_INTERRUPTED
        error.message = "interrupted while its pool was creating or releasing process groups"
    return error


def call_target(payload: Any) -> tuple[Callable[..., Any], tuple]:
    """The function a call runs on a rank and its arguments after ``ctx``: ``payload`` is ``(fn, args)``, or their
    cloudpickled bytes (unpickled here)."""
    return payload if isinstance(payload, tuple) else cloudpickle.loads(payload)


def execute(ctx: RankContext, payload: Any) -> Outcome:
    """Run the call ``payload`` on this rank (``call_target``), capturing output, time and the value or error.

    The function is looked up (and unpickled) inside, interruptible and reported like the call itself.
    """
    out, err = OutputCapture(), OutputCapture()
    begin = time.perf_counter()
    status, value, error, exception = STATUS_OK, None, None, None
    changes = 0 if ctx.pool is None else ctx.pool.changes
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            _Interruptible.active = True
            try:
                fn, args = call_target(payload)
                value = fn(ctx, *args)
            finally:
                _Interruptible.active = False
    except KeyboardInterrupt as caught:
        status, error, exception = STATUS_INTERRUPTED, interrupted(caught, ctx, changes), caught
    except BaseException as caught:  # SystemExit included: a rank function must not end the worker
        status, error, exception = STATUS_ERROR, error_of(caught, skip=1), caught
    seconds = time.perf_counter() - begin
    value_bytes = None
    if status == STATUS_OK:
        try:
            value_bytes = cloudpickle.dumps(value)
        except Exception as caught:
            status = STATUS_ERROR
            error = RankError(
                type(caught).__name__, f"the value of type {type(value).__name__} cannot be pickled: {caught}"
            )
    return Outcome(
        status=status,
        value=value_bytes,
        error=None if error is None else error.to_dict(),
        exception=None if exception is None else _pickled_exception(exception),
        stdout=out.getvalue(),
        stderr=err.getvalue(),
        seconds=seconds,
    )


# --------------------------------------------------------------------------- apply: build and check, no communication
def _seeds(distributed: Distributed) -> dict[str, Any]:
    """Compare each generator's initial seed with ``generator_seeds(config)`` (valid right after construction)."""
    expected = generator_seeds(distributed.config)
    actual = {
        "default_cpu": int(distributed.default_cpu_generator.initial_seed()),
        "pp_init": int(distributed.pp_init_generator.initial_seed()),
        "tp_init": int(distributed.tp_init_generator.initial_seed()),
        "pp": int(distributed.pp_generator.initial_seed()),
        "tp": int(distributed.tp_generator.initial_seed()),
    }
    return {"seeds_ok": actual == expected, "seeds": {k: str(v) for k, v in actual.items()}}


def _group_problems(distributed: Distributed, name: str, expected: tuple[int, ...], position: int) -> list[str]:
    """What is wrong with dim ``name``'s group as this rank's pool holds it (empty when nothing is)."""
    config = distributed.config
    dim = config.distributed_dims[name]
    problems = []
    members = member_tuple(dim.global_ranks)
    if members is not expected and members != expected:
        problems.append(f"its config gives members {members_text(dim.global_ranks)}")
    if dim.rank != position:
        problems.append(f"its config gives group rank {dim.rank}, expected {position}")
    group = distributed.group(name)
    if group is None:
        if len(expected) != 1:
            problems.append("it has no group")
        return problems
    if group.size() != len(expected):
        problems.append(f"its group has {group.size()} members, expected {len(expected)}")
    if group.rank() != position:
        problems.append(f"its group gives it group rank {group.rank()}, expected {position}")
    record = distributed.pool.record_of(group)
    if record is None:
        problems.append("its group was not created by its pool")
    elif record.members is not expected and record.members != expected:
        problems.append(f"its group was created for members {members_text(record.members)}")
    return problems


def rank_identity(distributed: Distributed, layout: Layout) -> dict[str, Any]:
    """Each dim's group as this rank's pool holds it, checked against ``layout`` (no communication): its config's
    members equal the layout's group, the group object has the expected size and group rank, and the pool created
    that very object for those members (not for another dim's, or another order); and the generators' seeds.

    Returns a JSON-ready dict: ``rank``, ``dims`` (one row per dim: ``dim``, ``size``, ``group_rank``,
    ``created``, ``create_seconds`` and, only when something is wrong, ``identity``: the problems), ``seeds_ok``
    and ``seeds``.
    """
    config = distributed.config
    groups = layout_groups(layout)
    rows = []
    for name in DIM_NAMES:
        members, index, positions = groups[name]
        expected, position = members[index[config.rank]], positions[config.rank]
        row: dict[str, Any] = {
            "dim": name,
            "size": len(expected),
            "group_rank": config.distributed_dims[name].rank,
            "created": distributed.group_created.get(name, False),
            "create_seconds": distributed.group_seconds.get(name, 0.0),
        }
        problems = _group_problems(distributed, name, expected, position)
        if problems:
            row["identity"] = problems
        rows.append(row)
    return {"rank": config.rank, "dims": rows, **_seeds(distributed)}


def _members_of(config: DistributedConfig | None) -> list[Any]:
    if config is None:
        return []
    return [dim.global_ranks for dim in config.distributed_dims.values()]


def build_layout(ctx: RankContext, layout: Layout) -> dict[str, Any]:
    """What ``Cluster.apply`` runs on this rank: build ``Distributed`` for ``layout`` from the rank's pool (on the
    pool's device) and check each dim's group as the pool holds it (``rank_identity``, kept in ``ctx.identity``).

    Keeps the groups of this layout and of the previous one in the pool (switching back and forth stays instant);
    the rest go, so exploring many layouts does not pile up sockets and threads. Every member of a group decides
    the same way, since all ranks apply the same layouts in the same order.
    """
    previous = ctx.config
    ctx.layout = ctx.config = ctx.distributed = ctx.identity = None
    config = layout.config(ctx.rank)
    use_cpu = ctx.device.type == "cpu"
    distributed = Distributed(config, use_cpu=use_cpu, pool=ctx.pool, strict=False)  # a wrong group: one dim fails
    ctx.layout, ctx.config, ctx.distributed = layout, config, distributed
    identity = rank_identity(distributed, layout)
    if ctx.pool is not None:
        ctx.pool.release_groups(_members_of(config) + _members_of(previous))
    ctx.identity = identity
    return identity


# --------------------------------------------------------------------------- the local worker process
def _reader(channel: Channel, inbox: queue.Queue) -> None:
    """Move calls from the controller to ``inbox``; end the process when the controller goes away."""
    try:
        while True:
            inbox.put(channel.receive(Call, Exit))
    except (EOFError, OSError):
        os._exit(0)
    except BaseException:
        traceback.print_exc()
        os._exit(1)


def _detach_in_children(fd: int) -> None:
    """Processes forked by user code must not hold the channel to the controller: its end would go unnoticed."""
    devnull = os.open(os.devnull, os.O_RDWR)

    def detach() -> None:
        with contextlib.suppress(OSError):
            os.dup2(devnull, fd, inheritable=False)

    os.register_at_fork(after_in_child=detach)


def worker_main(spec: WorkerSpec, rank: int, server_pid: int, end: socket.socket) -> None:
    """Body of one forked local worker, talking to the controller over ``end``; never returns (``os._exit``)."""
    code = 0
    try:
        code = _worker(spec, rank, server_pid, end)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _worker(spec: WorkerSpec, rank: int, server_pid: int, end: socket.socket) -> int:
    die_with_parent(signal.SIGKILL)
    if os.getppid() != server_pid:  # the server died before prctl took effect
        return 1
    signal.signal(signal.SIGINT, _Interruptible.handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    stack_file = open(os.path.join(spec.stack_dir, f"stack-{rank}.txt"), "w")  # noqa: SIM115 - lives with the process
    faulthandler.enable(file=stack_file, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True, chain=False)
    torch.set_num_threads(spec.threads)

    channel = Channel(Connection(end.detach()), "controller")
    channel.holds_interrupts = False  # SIGINT raises only inside user code here (see _Interruptible)
    _detach_in_children(channel.fileno())
    backend = DistributedBackend.parse(spec.backend)
    use_cpu = spec.device_type == "cpu"
    try:
        store = torch.distributed.FileStore(spec.store_path, -1)
        store.set_timeout(datetime.timedelta(seconds=spec.timeout))
        pool = ProcessGroupPool(
            rank,
            spec.world_size,
            spec.local_world_size,
            spec.timeout,
            use_cpu,
            backend=backend,
            store=store,
            gloo_hostname=LOOPBACK,
        )
    except BaseException as error:
        channel.send(WorkerFailed(rank, error_of(error).to_dict()))
        return 1
    ctx = RankContext(rank, spec.world_size, pool)
    inbox: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(channel, inbox), name="fastdist-reader", daemon=True).start()
    channel.send(WorkerReady(rank))

    while True:
        message = inbox.get()
        if isinstance(message, Exit):
            pool.shutdown()
            return 0
        channel.send(Reply(message.call_id, rank, execute(ctx, message.payload)))
