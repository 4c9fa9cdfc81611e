"""Worker side of the runtime: what a function run on a rank receives, how a call is executed, and the loop of
each ``LocalCluster`` rank.

A local worker is forked by the cluster's worker server (``runtime.server``) with torch already imported, connects
back to the controller over the authenticated channel (``runtime.channel``), joins the rendezvous store under the
cluster's random key prefix, and then executes calls (``run`` a function, ``apply`` a layout) until told to exit
or until the controller goes away.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import queue
import signal
import sys
import threading
import time
import traceback
from typing import Any

import cloudpickle
import torch

from ..config import DistributedBackend, DistributedConfig
from ..layout import Layout
from .capture import OutputCapture, quiet_harmless_c10d
from .channel import Call, Channel, Exit, Outcome, Reply, WorkerFailed, WorkerHello, WorkerReady, WorkerSpec, connect
from .pool import LOOPBACK, Distributed, ProcessGroupPool, client_store
from .procs import die_with_parent
from .results import STATUS_ERROR, STATUS_INTERRUPTED, STATUS_OK, RankError
from .verify import check_groups, rank_identity


class RankContext:
    """What a function run on a rank receives as its first argument.

    ``rank`` and ``world_size`` always; once a layout is applied, ``layout``, ``config`` (this rank's
    ``DistributedConfig``) and ``distributed`` (this rank's ``Distributed``, whose ``*_group`` attributes are
    real process groups). ``device`` is where tensors of this rank live; ``pool`` is the process-group pool;
    ``state`` is a dict kept between calls (until the workers restart); ``identity`` what the last apply found
    of this rank's groups before any communication (``runtime.verify.rank_identity``).
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


def execute(ctx: RankContext, fn: Any = None, args: tuple = (), payload: bytes | None = None) -> Outcome:
    """Call ``fn(ctx, *args)`` capturing output, time and the value or error.

    With ``payload``, ``(fn, args)`` are unpickled from it first (interruptible and reported like the call).
    """
    out, err = OutputCapture(), OutputCapture()
    begin = time.perf_counter()
    status, value, error, exception = STATUS_OK, None, None, None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            _Interruptible.active = True
            try:
                if payload is not None:
                    fn, args = cloudpickle.loads(payload)
                value = fn(ctx, *args)
            finally:
                _Interruptible.active = False
    except KeyboardInterrupt as caught:
        status, error, exception = STATUS_INTERRUPTED, error_of(caught, skip=1), caught
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


def _members_of(config: DistributedConfig | None) -> list[Any]:
    if config is None:
        return []
    return [dim.global_ranks for dim in config.distributed_dims.values()]


def build_layout(ctx: RankContext, layout: Layout, use_cpu: bool) -> dict[str, Any]:
    """Step 1 of an apply on this rank: build ``Distributed`` for ``layout`` from the rank's pool and check each
    dim's group as the pool holds it, without communication (``rank_identity``, kept in ``ctx.identity``).

    Keeps the groups of this layout and of the previous one in the pool (switching back and forth stays instant);
    the rest go, so exploring many layouts does not pile up sockets and threads. Every member of a group decides
    the same way, since all ranks apply the same layouts in the same order.
    """
    previous = ctx.config
    ctx.layout = ctx.config = ctx.distributed = ctx.identity = None
    config = layout.config(ctx.rank)
    distributed = Distributed(config, use_cpu=use_cpu, pool=ctx.pool, strict=False)  # a wrong group: one dim fails
    ctx.layout, ctx.config, ctx.distributed = layout, config, distributed
    identity = rank_identity(distributed, layout)
    if ctx.pool is not None:
        ctx.pool.release_groups(_members_of(config) + _members_of(previous))
    ctx.identity = identity
    return identity


def check_built_groups(ctx: RankContext, skip: set[tuple[str, int]], gather_limit: int | None) -> dict[str, Any]:
    """Step 2 of an apply on this rank: the collective checks of its groups not in ``skip`` (``check_groups``)."""
    if ctx.distributed is None or ctx.identity is None:
        raise RuntimeError(f"rank {ctx.rank} has no layout built (its apply failed or never ran)")
    return check_groups(ctx.distributed, ctx.identity, skip, gather_limit)


def builder(layout: Layout | dict[str, Any], use_cpu: bool) -> Any:
    """A rank function doing step 1 of an apply (for ``execute``); ``layout`` may be a ``Layout``'s fields."""

    def build(ctx: RankContext) -> dict[str, Any]:
        return build_layout(ctx, layout if isinstance(layout, Layout) else Layout(**layout), use_cpu)

    return build


def checker(skip: set[tuple[str, int]], gather_limit: int | None) -> Any:
    """A rank function doing step 2 of an apply (for ``execute``)."""

    def check(ctx: RankContext) -> dict[str, Any]:
        return check_built_groups(ctx, skip, gather_limit)

    return check


def _unknown(kind: str) -> Any:
    def fail(ctx: RankContext) -> None:
        raise RuntimeError(f"unknown call kind {kind!r}")

    return fail


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
    """Processes forked by user code must not hold the control socket: its end would then go unnoticed."""
    devnull = os.open(os.devnull, os.O_RDWR)

    def detach() -> None:
        with contextlib.suppress(OSError):
            os.dup2(devnull, fd, inheritable=False)

    os.register_at_fork(after_in_child=detach)


def worker_main(spec: WorkerSpec, rank: int, server_pid: int, authkey: bytes) -> None:
    """Body of one forked local worker; never returns (ends with ``os._exit``)."""
    code = 0
    try:
        code = _worker(spec, rank, server_pid, authkey)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _worker(spec: WorkerSpec, rank: int, server_pid: int, authkey: bytes) -> int:
    die_with_parent(signal.SIGKILL)
    if os.getppid() != server_pid:  # the server died before prctl took effect
        return 1
    signal.signal(signal.SIGINT, _Interruptible.handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    stack_file = open(os.path.join(spec.stack_dir, f"stack-{rank}.txt"), "w")  # noqa: SIM115 - lives with the process
    faulthandler.enable(file=stack_file, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True, chain=False)
    torch.set_num_threads(spec.threads)

    channel = connect(spec.address, authkey, timeout=spec.timeout)
    channel.holds_interrupts = False  # SIGINT raises only inside user code here (see _Interruptible)
    _detach_in_children(channel.fileno())
    channel.send(WorkerHello(rank, os.getpid()))
    backend = DistributedBackend.parse(spec.backend)
    use_cpu = spec.device_type == "cpu"
    try:
        with quiet_harmless_c10d():
            store = client_store(spec.store_port, spec.world_size, spec.timeout, prefix=spec.store_prefix)
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
        if message.kind == "run":
            outcome = execute(ctx, payload=message.payload)
        elif message.kind == "apply":
            outcome = execute(ctx, builder(message.payload, use_cpu), ())
        elif message.kind == "check":
            outcome = execute(ctx, checker(*message.payload), ())
        else:
            outcome = execute(ctx, _unknown(message.kind), ())
        channel.send(Reply(message.call_id, rank, outcome))
