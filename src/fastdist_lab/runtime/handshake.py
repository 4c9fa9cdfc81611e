"""How a connection becomes a ``Channel``: the control socket's address, and the handshake that proves, both ways,
that each end knows the cluster's random key.

The control socket is a unix socket with a short address (a path in the cluster's private directory, or an abstract
name where that path would be too long). Each connection first proves that it knows the key (HMAC-SHA256 over fresh
nonces, fixed-size frames with a deadline), so a stranger can neither command workers nor stall the controller by
connecting and saying nothing. ``connect`` is the side of the server and the workers; ``Acceptor`` the controller's,
which runs every pending handshake side by side without ever blocking.
"""

from __future__ import annotations

import hmac
import os
import socket
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

from .channel import Channel
from .errors import ClusterError

HANDSHAKE_TIMEOUT = 5.0
"""Seconds a new connection gets to prove it knows the key before it is dropped."""
PENDING_LIMIT = 1024
"""Connections at most in the middle of their handshake at once (the oldest is dropped beyond)."""
MAX_PATH = 100
"""Longest unix socket path used (the system limit is 104 to 108 bytes)."""

_MAGIC = b"fdlab\x01ch"
_NONCE = 32
_DIGEST = 32


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
