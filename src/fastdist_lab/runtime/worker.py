"""Worker side of the runtime: the loop each ``LocalCluster`` rank runs, and the torchrun entry point.

A local worker is forked by the cluster's fork server (``runtime.zygote``) with torch already imported,
connects back to the controller over an authenticated ``multiprocessing.connection`` channel, joins the
loopback TCP store, and then executes commands (``run`` a function, ``apply`` a layout) until told to exit or
until the controller goes away.

``python -m fastdist_lab.worker`` (see ``main``) runs the same layout verification under torchrun instead.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

import cloudpickle
import torch

from ..config import DistributedBackend, DistributedConfig, LayoutError
from ..layout import Layout
from .pool import LOOPBACK, Distributed, ProcessGroupPool, client_store
from .procs import die_with_parent
from .results import STATUS_ERROR, STATUS_INTERRUPTED, STATUS_OK, RankError
from .verify import check_rank

OUTPUT_LIMIT = 1 << 20
"""Characters of captured stdout / stderr kept per rank and call."""


class RankContext:
    """What a function run on a rank receives as its first argument.

    ``rank`` and ``world_size`` always; once a layout is applied, ``layout``, ``config`` (this rank's
    ``DistributedConfig``) and ``distributed`` (this rank's ``Distributed``, whose ``*_group`` attributes are
    real process groups). ``device`` is where tensors of this rank live; ``pool`` is the process-group pool;
    ``state`` is a dict kept between calls (until the workers restart).
    """

    def __init__(self, rank: int, world_size: int, pool: ProcessGroupPool | None):
        self.rank = rank
        self.world_size = world_size
        self.pool = pool
        self.layout: Layout | None = None
        self.config: DistributedConfig | None = None
        self.distributed: Distributed | None = None
        self.state: dict[str, Any] = {}

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


class _Tee(io.StringIO):
    """A StringIO that stops growing at ``OUTPUT_LIMIT`` characters."""

    def write(self, text: str) -> int:
        if self.tell() < OUTPUT_LIMIT:
            super().write(text[: OUTPUT_LIMIT - self.tell()])
        return len(text)


def execute(ctx: RankContext, fn: Any = None, args: tuple = (), payload: bytes | None = None) -> dict[str, Any]:
    """Call ``fn(ctx, *args)`` capturing output, time and the value or error; returns a message dict.

    With ``payload``, ``(fn, args)`` are unpickled from it first (interruptible and reported like the call).
    """
    out, err = _Tee(), _Tee()
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
    return {
        "status": status,
        "value": value_bytes,
        "error": None if error is None else error.to_dict(),
        "exception": None if exception is None else _pickled_exception(exception),
        "stdout": out.getvalue(),
        "stderr": err.getvalue(),
        "seconds": seconds,
    }


def _members_of(config: DistributedConfig | None) -> list[tuple[int, ...]]:
    if config is None:
        return []
    return [tuple(dim.global_ranks) for dim in config.distributed_dims.values()]


def _apply(ctx: RankContext, fields: dict[str, Any], use_cpu: bool) -> dict[str, Any]:
    previous = ctx.config
    ctx.layout = ctx.config = ctx.distributed = None
    layout = Layout(**fields)
    config = layout.config(ctx.rank)
    distributed = Distributed(config, use_cpu=use_cpu, pool=ctx.pool)
    ctx.layout, ctx.config, ctx.distributed = layout, config, distributed
    if ctx.pool is not None:
        # Keep the groups of this layout and of the previous one (switching back and forth stays instant);
        # the rest go, so exploring many layouts does not pile up sockets and threads. Every member of a group
        # decides the same way, since all ranks apply the same layouts in the same order.
        ctx.pool.release_groups(_members_of(config) + _members_of(previous))
    return check_rank(distributed)


def _reader(connection: Any, inbox: queue.Queue) -> None:
    """Move commands from the controller to ``inbox``; end the process when the controller goes away."""
    try:
        while True:
            inbox.put(connection.recv())
    except BaseException:
        os._exit(0)


def worker_main(spec: dict[str, Any], rank: int, zygote_pid: int) -> None:
    """Body of one forked local worker; never returns (ends with ``os._exit``)."""
    code = 0
    try:
        code = _worker(spec, rank, zygote_pid)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _worker(spec: dict[str, Any], rank: int, zygote_pid: int) -> int:
    from multiprocessing.connection import Client

    die_with_parent(signal.SIGKILL)
    if os.getppid() != zygote_pid:  # the fork server died before prctl took effect
        return 1
    signal.signal(signal.SIGINT, _Interruptible.handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    stack_file = open(os.path.join(spec["stack_dir"], f"stack-{rank}.txt"), "w")  # noqa: SIM115 - lives with the process
    faulthandler.enable(file=stack_file, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True, chain=False)
    torch.set_num_threads(spec["threads"])

    connection = Client(spec["address"], family=spec["family"], authkey=spec["authkey"])
    connection.send(("hello", rank, os.getpid()))
    backend = DistributedBackend.parse(spec["backend"])
    use_cpu = spec["device_type"] == "cpu"
    try:
        store = client_store(spec["port"], spec["world_size"], spec["timeout"])
        pool = ProcessGroupPool(
            rank,
            spec["world_size"],
            spec["local_world_size"],
            spec["timeout"],
            use_cpu,
            backend=backend,
            store=store,
            gloo_hostname=LOOPBACK,
        )
    except BaseException as error:
        connection.send(("failed", rank, error_of(error).to_dict()))
        return 1
    ctx = RankContext(rank, spec["world_size"], pool)
    inbox: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(connection, inbox), name="fastdist-reader", daemon=True).start()
    connection.send(("ready", rank, os.getpid()))

    while True:
        message = inbox.get()
        kind = message[0]
        if kind == "exit":
            pool.shutdown()
            return 0
        call_id = message[1]
        if kind == "run":
            reply = execute(ctx, payload=message[2])
        elif kind == "apply":
            reply = execute(ctx, _applier(message[2], use_cpu), ())
        else:
            reply = execute(ctx, _unknown(kind), ())
        connection.send(("result", call_id, rank, reply))


def _applier(fields: dict[str, Any], use_cpu: bool) -> Any:
    def apply(ctx: RankContext) -> dict[str, Any]:
        return _apply(ctx, fields, use_cpu)

    return apply


def _unknown(kind: str) -> Any:
    def fail(ctx: RankContext) -> None:
        raise RuntimeError(f"unknown command {kind!r}")

    return fail


# --------------------------------------------------------------------------- torchrun entry point
def _store_of(pool: ProcessGroupPool) -> Any:
    return pool.store


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fastdist_lab.worker [layout flags] [--backend] [--report PATH]`` under torchrun (env://).

    Every rank builds ``Distributed`` for the layout, checks each group with real collectives and sends its rows
    to rank 0 through the store; rank 0 prints the verification table and writes the JSON report. Exit code 0
    when every group passed, 1 when one failed, 2 for bad input.
    """
    import argparse
    import json

    from ..commands.common import add_layout_arguments, layout_from_args
    from .results import RankResult, RankResults, Verification
    from .verify import expected_groups

    parser = argparse.ArgumentParser(
        prog="python -m fastdist_lab.worker",
        description="verify a layout with real process groups on every rank (run under torchrun)",
    )
    add_layout_arguments(parser)
    parser.set_defaults(world_size=None)
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for the rendezvous and each collective")
    parser.add_argument("--report", default=None, help="write the JSON report here (rank 0)")
    args = parser.parse_args(argv)

    env_world = DistributedConfig.default_world_size()
    if args.world_size is None:
        args.world_size = env_world
    elif "WORLD_SIZE" in os.environ and args.world_size != env_world:
        sys.stderr.write(f"fastdist_lab.worker: error: --world-size={args.world_size} but WORLD_SIZE={env_world}\n")
        return 2
    if args.local_world_size is None:
        args.local_world_size = DistributedConfig.default_local_world_size()
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and hasattr(torch.distributed, "ProcessGroupNCCL") else "gloo"
    try:
        layout = layout_from_args(args, backend=backend, timeout=args.timeout)
    except LayoutError as error:
        sys.stderr.write(f"fastdist_lab.worker: error: {error}\n")
        return 2
    rank = DistributedConfig.default_rank()
    use_cpu = backend == "gloo"
    begin = time.perf_counter()
    pool = ProcessGroupPool(rank, layout.world_size, layout.local_world_size, args.timeout, use_cpu, backend=backend)
    ctx = RankContext(rank, layout.world_size, pool)
    reply = execute(ctx, _applier(layout.fields(), use_cpu), ())
    record = RankResult(
        rank=rank,
        status=reply["status"],
        value=cloudpickle.loads(reply["value"]) if reply["value"] is not None else None,
        error=None if reply["error"] is None else RankError(**reply["error"]),
        stdout=reply["stdout"],
        stderr=reply["stderr"],
        seconds=reply["seconds"],
    )
    store = _store_of(pool)
    if store is None:  # a world of one
        records = [record]
    else:
        store.set(f"fastdist_report/{rank}", json.dumps(record.to_dict()))
        records = []
        if rank == 0:
            for other in range(layout.world_size):
                records.append(RankResult.from_dict(json.loads(store.get(f"fastdist_report/{other}"))))
            store.set("fastdist_report/done", "1")
        else:
            store.get("fastdist_report/done")
    code = 0 if record.ok else 1
    if rank == 0:
        coordinates = [layout.config(r).coordinates() for r in range(layout.world_size)]
        results = RankResults(records, coordinates, label="verify")
        verification = Verification.from_rank_rows(
            expected_groups(layout), results, layout.fields(), backend, time.perf_counter() - begin
        )
        if args.report:
            verification.save(args.report)
        print(verification.to_text())
        code = 0 if verification.ok else 1
    ctx.distributed = None
    pool.shutdown()
    return code
