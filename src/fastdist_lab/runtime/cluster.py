"""``LocalCluster``: persistent worker processes on this machine, driven from a notebook cell or a script.

The controller (this process) owns three things: a loopback-only TCP store for the process groups'
rendezvous, an authenticated ``multiprocessing.connection`` channel on a private unix socket (loopback TCP
where there are no unix sockets), and a fork server started as a fresh interpreter in its own session, which
imports torch once and forks one worker per rank. Nothing is ever forked from the controller itself.

Every call has a deadline. A rank that raises is reported with its traceback; a rank that hangs or dies makes
the call raise ``ClusterTimeout`` / ``ClusterError`` naming it (with Python stacks of the ranks that did not
answer), the workers are killed, and the next call starts fresh ones.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge, wait
from typing import TYPE_CHECKING, Any

import cloudpickle

from ..config import DistributedConfig, LayoutError
from ..layout import Layout
from .errors import ClusterError, ClusterTimeout
from .pool import LOOPBACK, check_nccl, loopback_store
from .procs import kill_quietly, pid_alive, wait_gone
from .progress import ProgressCallback, resolve_progress
from .results import (
    STATUS_DIED,
    STATUS_INTERRUPTED,
    STATUS_OK,
    STATUS_TIMEOUT,
    RankError,
    RankResult,
    RankResults,
    Verification,
)
from .verify import expected_groups

if TYPE_CHECKING:
    import pandas as pd

DEATH_GRACE = 1.0
"""Seconds the other ranks still get to answer once one rank died during a call."""
INTERRUPT_GRACE = 2.0
"""Seconds ranks get to answer after a KeyboardInterrupt was forwarded to them."""
STACK_WAIT = 1.5
"""Seconds to wait for the stack dumps of ranks that did not answer."""

_LIVE: weakref.WeakSet[LocalCluster] = weakref.WeakSet()


def _close_all() -> None:
    for cluster in list(_LIVE):
        cluster.close()


atexit.register(_close_all)


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold a SIGINT back while a message is sent or received whole, then deliver it (main thread only).

    An interrupt in the middle of a message would leave the channel out of step with the worker.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[Any] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(signal.SIGINT, caught[0])
            elif previous != signal.SIG_IGN:
                raise KeyboardInterrupt


def resolve_backend(backend: str, local_world_size: int) -> str:
    """``"auto"`` -> ``"nccl"`` with one visible GPU per local rank (and NCCL built in), else ``"gloo"``."""
    name = str(getattr(backend, "value", backend)).strip().lower()
    if name not in ("auto", "gloo", "nccl"):
        raise LayoutError(f"backend={backend!r} is not a backend; use 'auto', 'gloo' or 'nccl'")
    if name == "gloo":
        return "gloo"
    if name == "nccl":
        check_nccl(local_world_size)
        return "nccl"
    try:
        check_nccl(local_world_size)
    except ClusterError:
        return "gloo"
    return "nccl"


class _Worker:
    __slots__ = ("rank", "pid", "connection", "ready")

    def __init__(self, connection: Connection):
        self.connection = connection
        self.rank = -1
        self.pid = -1
        self.ready = False


def _ranks_text(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, sorted(ranks)))


class LocalCluster:
    """``world_size`` persistent worker processes on this machine, one per rank (gloo on CPU or NCCL on GPUs).

    ``backend``: ``"auto"`` (NCCL when every local rank gets a GPU, else gloo), ``"gloo"`` or ``"nccl"``.
    ``local_world_size``: ranks per (emulated) node, default ``world_size``. ``timeout``: seconds for start-up
    and the default deadline of each call. ``progress``: ``None`` (a bar in a notebook, text on a terminal),
    ``False`` (silent) or ``progress(done, total, message)``. Starts at once unless ``start=False``.

    Use as a context manager, or call ``close()``; the workers also go away at interpreter exit and when this
    process dies.
    """

    def __init__(
        self,
        world_size: int,
        backend: str = "auto",
        local_world_size: int | None = None,
        timeout: float = 60,
        progress: ProgressCallback | bool | None = None,
        *,
        start: bool = True,
    ):
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise LayoutError(f"world_size={world_size!r} must be an integer > 0")
        local = world_size if local_world_size is None else local_world_size
        if isinstance(local, bool) or not isinstance(local, int) or local < 1 or world_size % local:
            raise LayoutError(f"local_world_size={local_world_size!r} must be an integer > 0 dividing {world_size}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise LayoutError(f"timeout={timeout!r} must be a number of seconds > 0")
        self._world_size = world_size
        self._local_world_size = local
        self._timeout = float(timeout)
        self._backend = resolve_backend(backend, local)
        self._progress_option = progress
        self._lock = threading.RLock()
        self._closed = True
        self._broken = False
        self._layout: Layout | None = None
        self._workers: list[_Worker] = []
        self._zygote: subprocess.Popen | None = None
        self._zygote_connection: Connection | None = None
        self._zygote_pid = -1
        self._listener: socket.socket | None = None
        self._address: Any = None
        self._family = "AF_UNIX"
        self._authkey = b""
        self._store: Any = None
        self._tmpdir: str | None = None
        self._call_id = 0
        self._generation = 0
        self.startup_seconds: float | None = None
        """Seconds the last start (or restart) took until every rank was ready."""
        if start:
            self.start()

    # ------------------------------------------------------------------ properties
    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return self._world_size

    @property
    def local_world_size(self) -> int:
        """Ranks per (emulated) node."""
        return self._local_world_size

    @property
    def backend(self) -> str:
        """``"gloo"`` or ``"nccl"``."""
        return self._backend

    @property
    def device_type(self) -> str:
        """``"cuda"`` for NCCL, else ``"cpu"``."""
        return "cuda" if self._backend == "nccl" else "cpu"

    @property
    def timeout(self) -> float:
        """Default deadline of a call, in seconds."""
        return self._timeout

    @property
    def layout(self) -> Layout | None:
        """The layout applied last, as it was given (workers run it with the cluster's backend), or ``None``."""
        return self._layout

    @property
    def running(self) -> bool:
        """Whether the fork server and every worker are alive and ready for the next call.

        ``False`` after a failure that stopped the workers (the next call starts fresh ones) and after ``close()``.
        """
        if self._closed or self._broken or len(self._workers) != self._world_size:
            return False
        if self._zygote is None or self._zygote.poll() is not None:
            return False
        return all(pid_alive(worker.pid) for worker in self._workers)

    @property
    def pids(self) -> list[int]:
        """Worker process ids, indexed by rank (empty when not running)."""
        return [worker.pid for worker in sorted(self._workers, key=lambda w: w.rank)]

    @property
    def server_pid(self) -> int | None:
        """Process id of the fork server (the workers' parent), or ``None``."""
        return self._zygote.pid if self._zygote is not None else None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> LocalCluster:
        if self._closed:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> LocalCluster:
        """Start the fork server and the workers (no-op when running); returns ``self``."""
        with self._lock:
            if self.running:
                return self
            if not self._closed:
                self._stop_processes()
            self._closed = False
            _LIVE.add(self)
            progress = resolve_progress(self._progress_option)
            begin = time.monotonic()
            try:
                self._start_server(progress, begin)
                self._spawn_workers(progress, begin)
            except BaseException:
                self._stop_processes()
                self._closed = True
                _LIVE.discard(self)
                raise
            self.startup_seconds = time.monotonic() - begin
            if progress is not None:
                total = self._world_size + 2
                message = f"{self._world_size} ranks ready ({self._backend}) in {self.startup_seconds:.1f} s"
                progress(total, total, message)
            return self

    def restart(self) -> LocalCluster:
        """Replace every worker by a fresh one (keeping the fork server when alive) and re-apply the layout."""
        with self._lock:
            layout, self._layout = self._layout, None
            if not self._closed and self._zygote is not None and self._zygote.poll() is None:
                self._kill_workers()
                begin = time.monotonic()
                self._spawn_workers(None, begin)
                self.startup_seconds = time.monotonic() - begin
            else:
                if not self._closed:
                    self._stop_processes()
                    self._closed = True
                self.start()
            if layout is not None:
                verification = self.apply(layout)
                if not verification.ok:
                    raise ClusterError(f"re-applying the layout after a restart failed:\n{verification}")
            return self

    def close(self) -> None:
        """Stop every worker and the fork server; nothing of this cluster is left running (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._layout = None
            self._stop_processes()
            _LIVE.discard(self)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: S110 - interpreter teardown
            pass

    # ------------------------------------------------------------------ public calls
    def run(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> RankResults:
        """Run ``fn(ctx, *args)`` on every rank and return every rank's value or error.

        ``fn`` and ``args`` travel by value (cloudpickle), so notebook functions and closures work. Raises
        ``ClusterTimeout`` when a rank does not answer within ``timeout`` (default: the cluster's), and
        ``ClusterError`` when a worker dies; a rank that raises is reported in the results instead.
        """
        if not callable(fn):
            raise TypeError(f"fn={fn!r} is not callable")
        payload = cloudpickle.dumps((fn, args))
        return self._call("run", payload, timeout, label=getattr(fn, "__name__", "run"))

    def apply(self, layout: Layout | DistributedConfig, timeout: float | None = None) -> Verification:
        """Build ``Distributed(layout.config(rank))`` on every rank and check each group with real collectives.

        The layout's backend is replaced by the cluster's. Returns the ``Verification``; raises
        ``ClusterTimeout`` / ``ClusterError`` when ranks hang or die, ``LayoutError`` when the sizes do not fit.
        """
        if isinstance(layout, DistributedConfig):
            layout = Layout.from_config(layout)
        if not isinstance(layout, Layout):
            raise TypeError(f"apply() needs a Layout, got {type(layout).__name__}")
        if layout.world_size != self._world_size:
            raise LayoutError(
                f"layout world_size={layout.world_size} does not match the cluster's {self._world_size} ranks"
            )
        if layout.local_world_size > self._local_world_size:
            raise LayoutError(
                f"layout local_world_size={layout.local_world_size} is larger than the cluster's "
                f"local_world_size={self._local_world_size}"
            )
        fields = dict(layout.fields(), backend=self._backend)
        applied = Layout(**fields)
        with self._lock:
            self._layout = None
            begin = time.monotonic()
            results = self._call("apply", fields, timeout, label="apply", layout=applied)
            seconds = time.monotonic() - begin
            report_fields = {k: (v.value if hasattr(v, "value") else v) for k, v in fields.items()}
            verification = Verification.from_rank_rows(
                expected_groups(applied), results, report_fields, self._backend, seconds
            )
            if results.ok:
                self._layout = layout
            else:  # ranks disagree about their groups now: start over on the next call
                self._kill_workers()
            return verification

    def device_mesh(self, layout: Layout | None = None, timeout: float | None = None) -> pd.DataFrame:
        """Build the real torch ``DeviceMesh`` of ``layout.device_mesh_spec()`` on every rank and check its groups.

        ``layout`` defaults to the applied one. One row per named dim with an ``ok`` column; see
        ``fastdist_lab.conventions.device_mesh_check`` (imported here lazily: conventions sit above the runtime).
        """
        from ..conventions import device_mesh_check

        return device_mesh_check(self, layout, timeout)

    # ------------------------------------------------------------------ start-up
    def _report(self, progress: ProgressCallback | None, done: int, message: str) -> None:
        if progress is not None:
            progress(done, self._world_size + 2, message)

    def _deadline_left(self, begin: float, what: str) -> float:
        left = begin + self._timeout - time.monotonic()
        if left <= 0:
            raise ClusterTimeout(f"start-up timed out after {self._timeout:g} s: {what}")
        return left

    def _start_server(self, progress: ProgressCallback | None, begin: float) -> None:
        self._report(progress, 0, "starting the worker server")
        self._tmpdir = tempfile.mkdtemp(prefix="fastdist-lab-")
        self._authkey = os.urandom(32)
        path = os.path.join(self._tmpdir, "ctl")
        if hasattr(socket, "AF_UNIX") and len(path) < 100:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            self._address, self._family = path, "AF_UNIX"
        else:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.bind((LOOPBACK, 0))
            self._address, self._family = listener.getsockname(), "AF_INET"
        listener.listen(max(128, 2 * self._world_size))
        self._listener = listener
        env = dict(os.environ)
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
        # Until it is ready, the server's stderr goes to a log whose tail a start-up error quotes; then it
        # switches to this process's stderr (handed over as an extra descriptor), which its workers inherit.
        try:
            stderr_fd: int | None = os.dup(sys.__stderr__.fileno() if sys.__stderr__ is not None else 2)
        except (OSError, ValueError, AttributeError):
            stderr_fd = None
        try:
            with open(self._server_log(), "wb") as log:
                self._zygote = subprocess.Popen(
                    [sys.executable, "-m", "fastdist_lab.runtime.zygote"],
                    stdin=subprocess.PIPE,
                    stderr=log,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=() if stderr_fd is None else (stderr_fd,),
                )
        finally:
            if stderr_fd is not None:
                os.close(stderr_fd)
        config = {
            "address": self._address,
            "family": self._family,
            "authkey": self._authkey.hex(),
            "stderr_fd": stderr_fd,
            # prctl's parent-death signal follows the thread that started the child: only from the main thread.
            "die_with_parent": threading.current_thread() is threading.main_thread(),
        }
        assert self._zygote.stdin is not None
        self._zygote.stdin.write((json.dumps(config) + "\n").encode())
        self._zygote.stdin.close()
        connection = self._accept(begin, "the worker server did not connect")
        kind, self._zygote_pid = self._recv_until(connection, begin, "the worker server did not connect")
        self._zygote_connection = connection
        self._report(progress, 0, "importing torch in the worker server")
        kind, _ = self._recv_until(connection, begin, "the worker server did not import torch")
        if kind != "zygote-ready":
            raise ClusterError(f"the worker server said {kind!r} instead of being ready")
        self._report(progress, 1, "torch imported")

    def _server_log(self) -> str:
        return os.path.join(self._tmpdir or tempfile.gettempdir(), "server.log")

    def _check_server(self) -> None:
        if self._zygote is None or self._zygote.poll() is not None:
            code = None if self._zygote is None else self._zygote.returncode
            try:
                with open(self._server_log(), encoding="utf-8", errors="replace") as file:
                    tail = file.read()[-4000:].strip()
            except OSError:
                tail = ""
            detail = f":\n{tail}" if tail else "; see its output above"
            raise ClusterError(f"the worker server exited (code {code}){detail}")

    def _accept(self, begin: float, what: str) -> Connection:
        assert self._listener is not None
        while True:
            self._check_server()
            left = self._deadline_left(begin, what)
            if not wait([self._listener], timeout=min(left, 0.2)):
                continue
            raw, _ = self._listener.accept()
            raw.setblocking(True)
            connection = Connection(raw.detach())
            try:
                deliver_challenge(connection, self._authkey)
                answer_challenge(connection, self._authkey)
            except Exception:  # not one of ours: drop it
                connection.close()
                continue
            return connection

    def _recv_until(self, connection: Connection, begin: float, what: str) -> Any:
        while True:
            self._check_server()
            left = self._deadline_left(begin, what)
            if connection.poll(min(left, 0.2)):
                return connection.recv()

    def _spawn_workers(self, progress: ProgressCallback | None, begin: float) -> None:
        self._generation += 1
        self._store = None
        self._store, port = loopback_store(self._world_size, self._timeout)
        stack_dir = os.path.join(self._tmpdir or tempfile.gettempdir(), f"gen{self._generation}")
        os.makedirs(stack_dir, exist_ok=True)
        cpus = os.cpu_count() or 1
        spec = {
            "ranks": list(range(self._world_size)),
            "world_size": self._world_size,
            "local_world_size": self._local_world_size,
            "backend": self._backend,
            "device_type": self.device_type,
            "timeout": self._timeout,
            "port": port,
            "address": self._address,
            "family": self._family,
            "stack_dir": stack_dir,
            "threads": max(1, cpus // self._local_world_size),
            "sys_path": list(sys.path),
            "cwd": os.getcwd(),
        }
        assert self._zygote_connection is not None
        self._zygote_connection.send(("spawn", spec))
        kind, _pids = self._recv_until(self._zygote_connection, begin, "the worker server did not fork the workers")
        self._report(progress, 1, f"starting {self._world_size} ranks")
        assert self._listener is not None
        workers: list[_Worker] = []
        self._workers = []
        ready = 0
        try:
            while ready < self._world_size:
                self._check_server()
                left = self._deadline_left(begin, f"{self._world_size - ready} ranks did not become ready")
                waiting = [w.connection for w in workers if not w.ready]
                readable = wait([self._listener, *waiting], timeout=min(left, 0.2))
                for item in readable:
                    if item is self._listener:
                        if len(workers) < self._world_size:
                            workers.append(_Worker(self._accept(begin, "a rank did not connect")))
                        continue
                    worker = next(w for w in workers if w.connection is item)
                    try:
                        message = item.recv()
                    except (EOFError, OSError):
                        raise ClusterError(
                            f"rank {worker.rank} (pid {worker.pid}) exited during start-up; see its output above"
                        ) from None
                    if message[0] == "hello":
                        worker.rank, worker.pid = message[1], message[2]
                    elif message[0] == "ready":
                        worker.ready = True
                        ready += 1
                        self._report(progress, 1 + ready, f"rank {worker.rank} ready")
                    elif message[0] == "failed":
                        error = RankError(**message[2])
                        raise ClusterError(f"rank {message[1]} could not start: {error}\n{error.traceback}")
        except BaseException:
            self._workers = workers
            self._kill_workers()
            raise
        self._workers = sorted(workers, key=lambda w: w.rank)
        self._broken = False

    # ------------------------------------------------------------------ shutdown
    def _kill_workers(self) -> None:
        """SIGKILL every worker and wait until they are gone; the cluster restarts on its next call."""
        workers, self._workers = self._workers, []
        self._broken = True
        pids = [w.pid for w in workers if w.pid > 0]
        if self._zygote_connection is not None and self._zygote is not None and self._zygote.poll() is None:
            try:
                self._zygote_connection.send(("kill",))
                if self._zygote_connection.poll(5):
                    self._zygote_connection.recv()
            except (OSError, EOFError):
                pass
        for pid in pids:
            kill_quietly(pid)
        for worker in workers:
            worker.connection.close()
        wait_gone(pids, 5)
        self._store = None

    def _stop_processes(self) -> None:
        workers = self._workers
        for worker in workers:
            try:
                worker.connection.send(("exit",))
            except OSError:
                pass
        deadline = time.monotonic() + 0.5
        open_connections = [w.connection for w in workers]
        while open_connections and time.monotonic() < deadline:
            for connection in wait(open_connections, timeout=max(0.0, deadline - time.monotonic())):
                try:
                    connection.recv()
                except (EOFError, OSError):
                    open_connections.remove(connection)
        self._kill_workers()
        zygote, self._zygote = self._zygote, None
        if self._zygote_connection is not None:
            try:
                self._zygote_connection.send(("exit",))
            except OSError:
                pass
        if zygote is not None:
            try:
                zygote.wait(timeout=5)
            except subprocess.TimeoutExpired:
                try:  # not reaped yet, so its process group id is still its own
                    os.killpg(zygote.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                zygote.wait()
        if self._zygote_connection is not None:
            self._zygote_connection.close()
            self._zygote_connection = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._store = None
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    # ------------------------------------------------------------------ calls
    def _ensure_running(self) -> None:
        if self._closed:
            raise ClusterError("the cluster is closed; call start() or use a new LocalCluster")
        if not self.running:
            if not self._broken and self._workers:
                gone = [w.rank for w in self._workers if not pid_alive(w.pid)]
                what = f"{_ranks_text(gone)} died" if gone else "the worker server died"
                warnings.warn(
                    f"{what} since the last call; starting fresh workers (per-rank state is lost)",
                    RuntimeWarning,
                    stacklevel=4,
                )
            self.restart()

    def _coordinates(self, layout: Layout | None) -> list[dict[str, int]] | None:
        if layout is None:
            return None
        records = layout.ranks.reset_index().to_dict(orient="records")
        return [{k: int(v) for k, v in row.items()} for row in records]

    def _call(
        self, kind: str, payload: Any, timeout: float | None, label: str, layout: Layout | None = None
    ) -> RankResults:
        with self._lock:
            self._ensure_running()
            limit = self._timeout if timeout is None else float(timeout)
            if not limit > 0:
                raise ValueError(f"timeout={timeout!r} must be > 0")
            self._call_id += 1
            call_id = self._call_id
            records: dict[int, RankResult] = {}
            dead: set[int] = set()
            pending: set[int] = set()
            begin = time.monotonic()
            try:
                with deferred_interrupt():
                    for worker in self._workers:
                        try:
                            worker.connection.send((kind, call_id, payload))
                            pending.add(worker.rank)
                        except OSError:
                            dead.add(worker.rank)
                self._collect(call_id, pending, records, dead, begin + limit)
            except KeyboardInterrupt:
                self._interrupt(call_id, pending, records, dead)
                raise
            coordinates = self._coordinates(layout or self._layout)
            if not pending and not dead:
                return RankResults(list(records.values()), coordinates, label)
            return self._fail(label, limit, call_id, pending, records, dead, coordinates)

    def _collect(
        self,
        call_id: int,
        pending: set[int],
        records: dict[int, RankResult],
        dead: set[int],
        deadline: float,
    ) -> None:
        by_connection = {w.connection: w for w in self._workers}
        death_cutoff: float | None = None
        while pending:
            now = time.monotonic()
            if dead and death_cutoff is None:
                death_cutoff = now + DEATH_GRACE
            cutoff = deadline if death_cutoff is None else min(deadline, death_cutoff)
            if now >= cutoff:
                return
            connections = [w.connection for w in self._workers if w.rank in pending]
            for connection in wait(connections, timeout=min(cutoff - now, 0.25)):
                worker = by_connection[connection]
                try:
                    with deferred_interrupt():  # a message is taken and recorded whole
                        message = connection.recv()
                        if message[0] == "result" and message[1] == call_id:
                            records[worker.rank] = self._record(worker.rank, message[3])
                            pending.discard(worker.rank)
                except (EOFError, OSError):
                    pending.discard(worker.rank)
                    dead.add(worker.rank)
            if self._zygote is None or self._zygote.poll() is not None:
                dead.update(pending)
                pending.clear()

    def _record(self, rank: int, reply: dict[str, Any]) -> RankResult:
        error = None if reply["error"] is None else RankError(**reply["error"])
        value = None
        if reply["value"] is not None:
            try:
                value = cloudpickle.loads(reply["value"])
            except Exception as caught:
                error = RankError(type(caught).__name__, f"the value could not be unpickled here: {caught}")
                reply = dict(reply, status="error")
        if error is not None and reply.get("exception") is not None:
            try:
                error.exception = cloudpickle.loads(reply["exception"])
            except Exception:
                error.exception = None
        return RankResult(
            rank=rank,
            status=reply["status"],
            value=value,
            error=error,
            stdout=reply["stdout"],
            stderr=reply["stderr"],
            seconds=reply["seconds"],
        )

    def _interrupt(self, call_id: int, pending: set[int], records: dict[int, RankResult], dead: set[int]) -> None:
        """Forward a KeyboardInterrupt to the ranks still running; kill them if they do not stop in time."""
        for worker in self._workers:
            if worker.rank in pending:
                kill_quietly(worker.pid, signal.SIGINT)
        try:
            self._collect(call_id, pending, records, dead, time.monotonic() + INTERRUPT_GRACE)
        except KeyboardInterrupt:
            pass
        if pending or dead:
            self._kill_workers()

    def _stacks(self, ranks: set[int]) -> dict[int, str]:
        """Python stacks of ``ranks`` (faulthandler dumps triggered with SIGUSR1)."""
        stack_dir = os.path.join(self._tmpdir or "", f"gen{self._generation}")
        targets = {}
        for worker in self._workers:
            if worker.rank in ranks and pid_alive(worker.pid):
                path = os.path.join(stack_dir, f"stack-{worker.rank}.txt")
                try:
                    targets[worker.rank] = (path, os.path.getsize(path))
                except OSError:
                    continue
                kill_quietly(worker.pid, signal.SIGUSR1)
        stacks: dict[int, str] = {}
        deadline = time.monotonic() + STACK_WAIT
        sizes: dict[int, int] = {}
        while targets and time.monotonic() < deadline:
            time.sleep(0.05)
            for rank, (path, offset) in list(targets.items()):
                size = os.path.getsize(path)
                if size > offset and sizes.get(rank) == size:  # grew and then stopped growing
                    with open(path, encoding="utf-8", errors="replace") as file:
                        file.seek(offset)
                        stacks[rank] = file.read()
                    del targets[rank]
                sizes[rank] = size
        for rank in targets:
            stacks[rank] = "(no stack: the process did not answer SIGUSR1)"
        return stacks

    def _fatal_text(self, rank: int) -> str:
        """What faulthandler wrote for ``rank`` (a fatal error's stack, e.g. after a segfault), if anything."""
        path = os.path.join(self._tmpdir or "", f"gen{self._generation}", f"stack-{rank}.txt")
        try:
            with open(path, encoding="utf-8", errors="replace") as file:
                return file.read()[-20000:]
        except OSError:
            return ""

    def _exit_statuses(self, pids: list[int]) -> dict[int, str]:
        connection = self._zygote_connection
        if connection is None or self._zygote is None or self._zygote.poll() is not None:
            return {}
        wait_gone(pids, 0.5)
        try:
            connection.send(("status", pids))
            if connection.poll(2):
                kind, statuses = connection.recv()
                return {int(pid): text for pid, text in statuses.items()}
        except (OSError, EOFError):
            pass
        return {}

    def _fail(
        self,
        label: str,
        limit: float,
        call_id: int,
        pending: set[int],
        records: dict[int, RankResult],
        dead: set[int],
        coordinates: list[dict[str, int]] | None,
    ) -> RankResults:
        pids = {w.rank: w.pid for w in self._workers}
        stacks = self._stacks(pending) if pending else {}
        statuses = self._exit_statuses([pids[r] for r in dead if r in pids]) if dead else {}
        for rank in dead:
            how = statuses.get(pids.get(rank, -1), "connection lost")
            message = f"worker process {pids.get(rank)} died ({how})"
            error = RankError("WorkerDied", message, self._fatal_text(rank))
            records[rank] = RankResult(rank, STATUS_DIED, error=error)
        for rank in pending:
            records[rank] = RankResult(
                rank,
                STATUS_TIMEOUT,
                error=RankError("Timeout", f"no answer within {limit:g} s", stacks.get(rank, "")),
            )
        results = RankResults(list(records.values()), coordinates, label)
        self._kill_workers()
        answered = sorted(r for r, rec in records.items() if rec.status not in (STATUS_DIED, STATUS_TIMEOUT))
        if dead:
            parts = [f"{_ranks_text(sorted(dead))} died during {label}"]
            parts += [f"  rank {r}: {records[r].error}" for r in sorted(dead)]
            if pending:
                parts.append(f"{_ranks_text(sorted(pending))} did not answer afterwards")
            parts.append("the workers were stopped; the next call starts fresh ones")
            raise ClusterError("\n".join(parts), results=results, ranks=sorted(dead | pending))
        lines = [
            f"{label} timed out after {limit:g} s: {_ranks_text(sorted(pending))} did not answer"
            + (f" ({_ranks_text(answered)} did)" if answered else ""),
            "the workers were stopped; the next call starts fresh ones",
        ]
        for rank in sorted(pending):
            lines.append(f"--- stack of rank {rank} (pid {pids.get(rank)}) ---")
            lines.append(stacks.get(rank, "").rstrip())
        raise ClusterTimeout("\n".join(lines), results=results, ranks=sorted(pending), stacks=stacks)

    # ------------------------------------------------------------------ display
    def _state(self) -> str:
        if self._closed:
            return "closed"
        if self._broken or len(self._workers) != self._world_size:
            return "stopped (restarts on the next call)"
        return "running"

    def __repr__(self) -> str:
        layout = "no layout" if self._layout is None else repr(self._layout)
        return (
            f"LocalCluster(world_size={self._world_size}, backend={self._backend!r}, "
            f"local_world_size={self._local_world_size}, {self._state()}; {layout})"
        )

    def _repr_html_(self) -> str:
        import html

        text = html.escape(repr(self)[len("LocalCluster") :])
        return f"<div class='fastdist-cluster'><b>LocalCluster</b> {text}</div>"

    # ------------------------------------------------------------------ cost replay (runtime/replay.py)
    def replay(
        self, layout: Layout | None, model: Any, training: Any = None, scale: float | None = None, **options: Any
    ) -> pd.DataFrame:
        """Replay one training step's collectives on this cluster's real groups; see ``runtime.replay.replay``."""
        from .replay import replay

        return replay(self, layout, model, training, scale, **options)

    def bandwidth(self, dim: str, sizes: Any = None, **options: Any) -> pd.DataFrame:
        """Sweep all-reduce / all-gather / reduce-scatter on ``dim``'s groups; see ``runtime.replay.bandwidth``."""
        from .replay import SWEEP_SIZES, bandwidth

        return bandwidth(self, dim, SWEEP_SIZES if sizes is None else sizes, **options)


STATUSES = (STATUS_OK, STATUS_INTERRUPTED, STATUS_TIMEOUT, STATUS_DIED)
"""Status values a ``RankResult`` of a cluster call can take (plus ``"error"``)."""
