"""A rank's side outside any call: what a function run on it receives (``RankContext``) and the life of a
``LocalCluster`` worker process.

A local worker is forked by the cluster's worker server (``runtime.server``) with torch already imported and its end
of a socket pair to the controller, opens its generation's rendezvous store (a ``FileStore`` in the cluster's private
directory: no port, nothing another user can open), and then runs calls (``channel.execute``) until told to exit or
until the controller goes away. SIGINT raises only inside a call's function (``channel.UserCodeInterrupts``).
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
import traceback
from multiprocessing.connection import Connection
from typing import Any

import torch
import torch.distributed

from ..config import DistributedBackend, DistributedConfig
from ..layout import Layout
from .channel import Call, Channel, Reply, UserCodeInterrupts, error_of, execute
from .pool import LOOPBACK, Distributed, ProcessGroupPool
from .procs import die_with_parent
from .server_messages import Exit, WorkerFailed, WorkerReady, WorkerSpec


class RankContext:
    """What a function run on a rank receives as its first argument.

    ``rank`` and ``world_size`` always; once a layout is applied, ``layout``, ``config`` (this rank's
    ``DistributedConfig``) and ``distributed`` (this rank's ``Distributed``, whose ``*_group`` attributes are
    real process groups). ``device`` is where tensors of this rank live; ``pool`` is the process-group pool;
    ``state`` is a dict kept between calls (until the workers restart); ``identity`` what the last apply found
    of this rank's groups before any communication (``pool.rank_identity``).
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
    signal.signal(signal.SIGINT, UserCodeInterrupts.handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    stack_file = open(os.path.join(spec.stack_dir, f"stack-{rank}.txt"), "w")  # noqa: SIM115 - lives with the process
    faulthandler.enable(file=stack_file, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True, chain=False)
    torch.set_num_threads(spec.threads)

    channel = Channel(Connection(end.detach()), "controller")
    channel.holds_interrupts = False  # SIGINT raises only inside user code here (see UserCodeInterrupts)
    _detach_in_children(channel.fileno())
    backend = DistributedBackend.parse(spec.backend)
    use_cpu = spec.device_type == "cpu"
    try:
        store = torch.distributed.FileStore(spec.store_path, -1)
        store.set_timeout(datetime.timedelta(seconds=spec.timeout))
        pool = ProcessGroupPool(rank, spec.world_size, spec.local_world_size, spec.timeout, use_cpu, backend=backend,
                                store=store, gloo_hostname=LOOPBACK)  # fmt: skip
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
