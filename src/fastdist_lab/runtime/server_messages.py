"""The messages that start, supervise and stop a generation of worker processes: between the controller, its worker
server (``runtime.server``) and a starting worker (``runtime.rank_loop``). Each is a frozen dataclass; they travel on
a ``channel.Channel``, whose ``receive`` names the types it accepts. (A call's own messages, ``Call``, ``Reply`` and
``Outcome``, are in ``channel``.)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerSpec:
    """What the server needs to start a generation of workers, and what each worker needs to join it."""

    ranks: tuple[int, ...]
    world_size: int
    local_world_size: int
    backend: str
    device_type: str
    timeout: float
    stack_dir: str
    store_path: str
    threads: int
    sys_path: tuple[str, ...]
    cwd: str
    file_limit: int


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
    """Request: start one worker per rank of ``spec``, each with a fresh rendezvous store file."""

    request: int
    spec: WorkerSpec


@dataclass(frozen=True)
class Spawned:
    """Reply to ``Spawn``: rank -> pid of the new workers, or why they could not start. ``handles`` descriptors
    follow it on the wire: the controller's end of each worker's channel, in rank order (``fds`` once received)."""

    request: int
    pids: dict[int, int]
    error: str = ""
    handles: int = 0
    fds: tuple[int, ...] = ()


@dataclass(frozen=True)
class KillWorkers:
    """Request: end every process below the server (workers and their children)."""

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
class WorkerReady:
    """A worker joined the store and waits for calls."""

    rank: int


@dataclass(frozen=True)
class WorkerFailed:
    """A worker could not start; ``error`` is a ``RankError.to_dict()``."""

    rank: int
    error: dict[str, str]
