"""The control channel: typed messages between the controller, the worker server and the workers.

One module both ends import. Every message is a frozen dataclass or a named tuple; ``Channel.receive`` names
the types it accepts and refuses anything else, so a start-up handshake verifies what it got. Requests to the
server carry a number and ``Channel.ask`` drops replies to other numbers (a reply left over from an interrupted
request cannot be taken for the next one). A worker's call reply becomes a ``RankResult`` in exactly one place,
``outcome_to_result``, used by the local cluster and by the torchrun path alike.

The channel is a unix socket with a short address (a path in the cluster's private directory, or an abstract name
where that path would be too long). Each connection first proves, both ways, that it knows the cluster's random
key (HMAC-SHA256 over fresh nonces, fixed-size frames with a deadline), so a stranger can neither command workers
nor stall the controller by connecting and saying nothing.
"""

from __future__ import annotations

import dataclasses
import hmac
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

import cloudpickle

from ..errors import ClusterError, ClusterTimeout, ProtocolError
from .procs import hold_interrupts, interrupts_held
from .results import RankError, RankResult

HANDSHAKE_TIMEOUT = 5.0
"""Seconds a new connection gets to prove it knows the key before it is dropped."""
PENDING_LIMIT = 1024
"""Connections at most in the middle of their handshake at once (the oldest is dropped beyond)."""
MAX_PATH = 100
"""Longest unix socket path used (the system limit is 104 to 108 bytes)."""

_MAGIC = b"fdlab\x01ch"
_NONCE = 32
_DIGEST = 32


# ----------------------------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class WorkerSpec:
    """What the server needs to start a generation of workers, and what each worker needs to join it."""

    ranks: tuple[int, ...]
    world_size: int
    local_world_size: int
    backend: str
    device_type: str
    timeout: float
    address: str
    stack_dir: str
    threads: int
    sys_path: tuple[str, ...]
    cwd: str
    store_prefix: str
    store_port: int = 0


class Outcome(NamedTuple):
    """A worker's answer to one call: status, pickled value or error, captured output and duration.

    (``Outcome``, ``Call`` and ``Reply`` travel on every call: tuples, which are quicker to build and pickle.)
    """

    status: str
    value: bytes | None
    error: dict[str, str] | None
    exception: bytes | None
    stdout: str
    stderr: str
    seconds: float


@dataclass(frozen=True)
class ServerStarted:
    """The server connected (before importing torch)."""

    pid: int


@dataclass(frozen=True)
class ServerReady:
    """The server imported torch and the worker code: it can fork workers now."""

    pid: int


@dataclass(frozen=True)
class Spawn:
    """Request: start one worker per rank of ``spec`` (and a fresh rendezvous store for them)."""

    request: int
    spec: WorkerSpec


@dataclass(frozen=True)
class Spawned:
    """Reply to ``Spawn``: rank -> pid of the new workers and the store's pid, or why they could not start."""

    request: int
    pids: dict[int, int]
    store_pid: int
    error: str = ""


@dataclass(frozen=True)
class KillWorkers:
    """Request: end every process below the server (workers, their children, the store)."""

    request: int


@dataclass(frozen=True)
class WorkersKilled:
    """Reply to ``KillWorkers``: nothing runs below the server any more."""

    request: int


@dataclass(frozen=True)
class ExitStatuses:
    """Request: how did these processes end?"""

    request: int
    pids: tuple[int, ...]


@dataclass(frozen=True)
class Statuses:
    """Reply to ``ExitStatuses``: pid -> words (``"killed by SIGKILL"``, ``"exited with code 3"``)."""

    request: int
    statuses: dict[int, str]


@dataclass(frozen=True)
class Exit:
    """Stop: a worker leaves its loop, the server ends everything below it and exits."""


@dataclass(frozen=True)
class WorkerHello:
    """A worker connected."""

    rank: int
    pid: int


@dataclass(frozen=True)
class WorkerReady:
    """A worker joined the store and waits for calls."""

    rank: int


@dataclass(frozen=True)
class WorkerFailed:
    """A worker could not start; ``error`` is a ``RankError.to_dict()``."""

    rank: int
    error: dict[str, str]


class Call(NamedTuple):
    """Request to every worker: ``kind`` ``"run"`` (payload: pickled ``(fn, args)``) or ``"apply"`` (layout fields)."""

    call_id: int
    kind: str
    payload: Any


class Reply(NamedTuple):
    """A worker's answer to the call ``call_id``."""

    call_id: int
    rank: int
    outcome: Outcome


def outcome_to_result(rank: int, outcome: Outcome) -> RankResult:
    """The ``RankResult`` of one rank's ``Outcome`` (the value and exception unpickled here)."""
    status = outcome.status
    error = None if outcome.error is None else RankError(**outcome.error)
    value = None
    if outcome.value is not None:
        try:
            value = cloudpickle.loads(outcome.value)
        except Exception as caught:
            error = RankError(type(caught).__name__, f"the value could not be unpickled here: {caught}")
            status = "error"
    if error is not None and outcome.exception is not None:
        try:
            error.exception = cloudpickle.loads(outcome.exception)
        except Exception:
            error.exception = None
    return RankResult(rank, status, value, error, outcome.stdout, outcome.stderr, outcome.seconds)


# ----------------------------------------------------------------------------------------------- channel
class Channel:
    """One authenticated connection carrying typed messages; ``peer`` names the other end in errors."""

    def __init__(self, connection: Connection, peer: str):
        self.connection = connection
        self.peer = peer
        self.holds_interrupts = True
        """Whether sending and receiving hold SIGINT back (not needed where SIGINT never raises meanwhile)."""
        self._requests = 0

    def fileno(self) -> int:
        """The socket's descriptor (for ``multiprocessing.connection.wait``)."""
        return self.connection.fileno()

    def send(self, message: object) -> None:
        """Send one message whole (an interrupt waits until it is out)."""
        if not self.holds_interrupts or interrupts_held():
            self.connection.send(message)
            return
        with hold_interrupts():
            self.connection.send(message)

    def poll(self, timeout: float = 0.0) -> bool:
        """Whether a message (or the end of the stream) is waiting."""
        return self.connection.poll(timeout)

    def receive(self, *expected: type) -> Any:
        """Take one message whole; ``ProtocolError`` unless it is of one of the ``expected`` types.

        Raises ``EOFError`` / ``OSError`` when the peer is gone.
        """
        if not self.holds_interrupts or interrupts_held():
            message = self.connection.recv()
        else:
            with hold_interrupts():
                message = self.connection.recv()
        if expected and not isinstance(message, expected):
            names = " or ".join(kind.__name__ for kind in expected)
            raise ProtocolError(f"{self.peer} sent {type(message).__name__} where {names} was expected")
        return message

    def ask(self, request: Any, reply_type: type, deadline: float, what: str, check: Callable[[], None]) -> Any:
        """Send ``request`` under a fresh number and wait for the ``reply_type`` with that number.

        Replies to other (earlier, interrupted) requests are dropped. ``check()`` runs while waiting (it raises
        when the peer died); ``ClusterTimeout`` naming ``what`` once ``deadline`` (monotonic) passes.
        """
        self._requests += 1
        number = self._requests
        self.send(dataclasses.replace(request, request=number))
        while True:
            check()
            left = deadline - time.monotonic()
            if left <= 0:
                raise ClusterTimeout(f"{what}: no answer from the {self.peer}")
            if not self.poll(min(left, 0.2)):
                continue
            reply = self.receive()
            if getattr(reply, "request", number) != number:
                continue  # the answer to an earlier request that an interrupt cut short
            if not isinstance(reply, reply_type):
                raise ProtocolError(f"{self.peer} sent {type(reply).__name__} where {reply_type.__name__} was expected")
            return reply

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self.connection.close()


# ----------------------------------------------------------------------------------------------- addresses
def control_address(directory: str) -> str:
    """A unix socket address for a listener: ``<directory>/ctl`` when short enough, else an abstract name."""
    path = os.path.join(directory, "ctl")
    if len(os.fsencode(path)) <= MAX_PATH:
        return path
    if not sys.platform.startswith("linux"):
        raise ClusterError(
            f"the temporary directory {directory!r} is too long for a unix socket path; set TMPDIR to a shorter one"
        )
    return "\0fastdist-lab-" + os.urandom(12).hex()


def listen(address: str, backlog: int) -> socket.socket:
    """A listening unix socket at ``address`` (path or abstract name)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(address)
        listener.listen(backlog)
    except BaseException:
        listener.close()
        raise
    return listener


# ----------------------------------------------------------------------------------------------- handshake
def _digest(key: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(key, role + nonce, "sha256").digest()


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the controller closed the connection during the handshake")
        data += chunk
    return bytes(data)


def connect(address: str, authkey: bytes, peer: str = "controller", timeout: float = HANDSHAKE_TIMEOUT) -> Channel:
    """Connect to a listener at ``address`` and prove both ways that each side knows ``authkey``.

    A full backlog (the listener is busy) is waited out until ``timeout``.
    """
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(address)
            break
        except (BlockingIOError, InterruptedError):
            sock.close()
            if time.monotonic() >= deadline:
                raise ClusterError(f"the control socket {address!r} accepted no connection for {timeout:g} s") from None
            time.sleep(0.01)
        except BaseException:
            sock.close()
            raise
    try:
        hello = _recv_exact(sock, len(_MAGIC) + _NONCE)
        if not hello.startswith(_MAGIC):
            raise ClusterError(f"{address!r} is not a fastdist-lab control socket")
        mine = os.urandom(_NONCE)
        sock.sendall(_digest(authkey, b"client", hello[len(_MAGIC) :]) + mine)
        if not hmac.compare_digest(_recv_exact(sock, _DIGEST), _digest(authkey, b"server", mine)):
            raise ClusterError(f"the listener at {address!r} does not know this cluster's key")
        sock.settimeout(None)
        return Channel(Connection(sock.detach()), peer)
    finally:
        sock.close()


class Acceptor:
    """Accepts connections on ``listener`` and runs their handshakes side by side without ever blocking.

    ``waitables()`` are the objects to wait on; ``advance(ready)`` moves every handshake on and returns the
    connections that completed one. A connection that stays silent past ``HANDSHAKE_TIMEOUT``, says something
    else or fails the proof is closed; so is the oldest one when more than ``PENDING_LIMIT`` are pending.
    """

    def __init__(self, listener: socket.socket, authkey: bytes, timeout: float = HANDSHAKE_TIMEOUT):
        self.listener = listener
        self.authkey = authkey
        self.timeout = timeout
        self._pending: dict[socket.socket, tuple[float, bytes, bytearray]] = {}
        listener.setblocking(False)

    def waitables(self) -> list[socket.socket]:
        """The listener and every connection in the middle of its handshake."""
        return [self.listener, *self._pending]

    def _accept_all(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. out of descriptors: the connection stays queued for later
                return
            sock.setblocking(False)
            nonce = os.urandom(_NONCE)
            try:
                sock.send(_MAGIC + nonce)
            except OSError:
                sock.close()
                continue
            self._pending[sock] = (time.monotonic() + self.timeout, nonce, bytearray())
            while len(self._pending) > PENDING_LIMIT:
                self._drop(next(iter(self._pending)))

    def _drop(self, sock: socket.socket) -> None:
        self._pending.pop(sock, None)
        sock.close()

    def _step(self, sock: socket.socket) -> Channel | None:
        _, nonce, data = self._pending[sock]
        try:
            chunk = sock.recv(_DIGEST + _NONCE - len(data))
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(sock)
            return None
        data += chunk
        if len(data) < _DIGEST + _NONCE:
            return None
        del self._pending[sock]
        if not hmac.compare_digest(bytes(data[:_DIGEST]), _digest(self.authkey, b"client", nonce)):
            sock.close()
            return None
        try:
            sock.setblocking(True)
            sock.sendall(_digest(self.authkey, b"server", bytes(data[_DIGEST:])))
        except OSError:
            sock.close()
            return None
        return Channel(Connection(sock.detach()), "worker")

    def advance(self, ready: list[Any]) -> list[Channel]:
        """Accept what ``ready`` says is waiting, move handshakes on, drop expired ones; returns finished channels."""
        done = []
        for item in ready:
            if item is self.listener:
                self._accept_all()
            elif item in self._pending:
                channel = self._step(item)
                if channel is not None:
                    done.append(channel)
        now = time.monotonic()
        for sock in [sock for sock, (deadline, _, _) in self._pending.items() if deadline < now]:
            self._drop(sock)
        return done

    def close(self) -> None:
        """Close every pending connection (the listener stays with its owner)."""
        for sock in list(self._pending):
            self._drop(sock)
