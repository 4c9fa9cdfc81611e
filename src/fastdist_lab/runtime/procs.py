"""Small process utilities shared by the controller, the worker server and the workers (Linux first, POSIX else):
parent-death signals, child subreaping, liveness, killing a whole subtree, exit-status words and file limits."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

FILES_PER_PROCESS = 64
"""Open files a worker or controller holds besides its sockets (libraries, pipes, logs): a generous allowance."""
FILES_PER_PEER = 3
"""Sockets a worker may hold per other rank: its process groups of the current and the previous layout."""


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(option, int(value), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux ``prctl``); False elsewhere."""
    return _prctl(PR_SET_PDEATHSIG, sig)


def become_subreaper() -> bool:
    """Make this process the child subreaper of its subtree (Linux): orphaned descendants are re-parented to it
    instead of to init, so it can still find and end them. False where not supported."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (a zombie counts as alive until reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_running(pid: int) -> bool:
    """Whether ``pid`` exists and has not exited (a zombie, exited but not yet reaped, counts as gone).

    When ``/proc`` cannot be read (no file descriptor left, ...), the kernel is asked another way that needs none
    (``pid_alive``: a zombie then counts until its parent reaps it): a full descriptor table is never taken for a
    death.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            state = file.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return pid_alive(pid) if not os.path.isdir("/proc") else False
    except OSError:
        return pid_alive(pid)
    return state not in (b"Z", b"X")


def kill_quietly(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to ``pid``, ignoring a process that is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait until none of ``pids`` exists or ``timeout`` passes; returns those still there."""
    deadline = time.monotonic() + timeout
    left = [pid for pid in pids if pid_alive(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = [pid for pid in left if pid_alive(pid)]
    return left


def children_of(pid: int) -> set[int]:
    """Pids whose parent is ``pid`` (zombies included), read from ``/proc``."""
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tasks = []
    listed = False
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as file:
                found.update(int(item) for item in file.read().split())
            listed = True
        except OSError:
            continue
    if listed or not os.path.isdir("/proc"):
        return found
    for entry in os.listdir("/proc"):  # kernels without the children file: scan every process's parent
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as file:
                    if int(file.read().rsplit(b")", 1)[1].split()[1]) == pid:
                        found.add(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


def reap(statuses: dict[int, int]) -> None:
    """Collect every exited child of this process without waiting, recording ``pid -> waitpid status``."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        statuses[pid] = status


def end_subtree(statuses: dict[int, int], keep: Iterable[int] = (), timeout: float = 10.0) -> None:
    """SIGKILL every descendant of this process except ``keep`` and reap them, until none is left.

    Meant for a child subreaper: the children of a killed child come back to it and are ended in the next round,
    whatever process group or session they moved to.
    """
    me, kept = os.getpid(), set(keep)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap(statuses)
        targets = children_of(me) - kept
        if not targets:
            return
        for pid in targets:
            kill_quietly(pid)
        time.sleep(0.005)


def describe_status(status: int | None) -> str:
    """Words for a ``waitpid`` status (``None``: unknown)."""
    if status is None:
        return "exit status unknown"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    if os.WIFEXITED(status):
        return f"exited with code {os.WEXITSTATUS(status)}"
    return f"status {status}"


def die_by(sig: int) -> None:
    """End this process by ``sig``'s default action (its parent then sees it killed by that signal, as it was asked
    to end); never returns."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)  # a signal whose default action does not end the process


def status_to_code(status: int | None) -> int:
    """A ``waitpid`` status passed on as an exit code of one's own, as a shell does: the code it exited with, or 128
    plus the number of the signal that ended it (0 when unknown). The guard exits so with its server's status."""
    if status is None:
        return 0
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0


def describe_code(code: int) -> str:
    """Words for an exit code made by ``status_to_code`` (above 128: ended by that signal), or for a
    ``Popen.returncode`` (below 0: ended by that signal)."""
    if code < 0:
        return describe_status(-code)
    return describe_status(code - 128 if code > 128 else code << 8)


def files_needed(world_size: int) -> int:
    """Open files one worker of a ``world_size`` cluster may need (its groups' sockets plus an allowance)."""
    return FILES_PER_PROCESS + FILES_PER_PEER * world_size


def file_limits() -> tuple[int, int]:
    """This process's (soft, hard) limit on open files; ``RLIM_INFINITY`` as a very large number."""
    try:
        import resource
    except ImportError:  # no such limit on this platform
        return (1 << 30, 1 << 30)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinite = resource.RLIM_INFINITY
    return (1 << 30 if soft == infinite else soft, 1 << 30 if hard == infinite else hard)


def raise_file_limit(needed: int) -> int:
    """Raise this process's soft limit on open files to ``needed`` when it is lower and the hard limit allows;
    returns the soft limit now in force (children started afterwards inherit it)."""
    soft, hard = file_limits()
    if soft >= needed or hard < needed:
        return soft
    import resource

    _, hard_raw = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard_raw))
    except (ValueError, OSError):
        return soft
    return needed


def preload(*modules: str) -> threading.Thread | None:
    """Import ``modules`` in a background thread, where no ``KeyboardInterrupt`` can cut an import in half (SIGINT
    only ever raises in the main thread; a module whose import was cut can be broken for good, such as numpy's and
    pandas' compiled parts). A lazy ``import`` of them in the main thread later finds them whole, or waits for this
    import to end. Returns the thread, or ``None`` when every module is imported already. Failures are left to that
    later import to report."""
    missing = [name for name in modules if name not in sys.modules]
    if not missing:
        return None

    def load() -> None:
        for name in missing:
            with contextlib.suppress(Exception):
                importlib.import_module(name)

    thread = threading.Thread(target=load, name="fastdist-preload", daemon=True)
    thread.start()
    return thread


_holding = False
"""Whether ``hold_interrupts`` is active in the main thread (an inner one then has nothing to do)."""


class HeldInterrupts:
    """What ``hold_interrupts`` yields: ``deliver()`` hands a SIGINT caught so far to the previous handler now (a
    safe point inside the block); the block's end delivers one caught afterwards."""

    def __init__(self, previous: Any = None):
        self.previous = previous
        self.caught: list[Any] = []

    def deliver(self) -> None:
        """Deliver a caught SIGINT now (the default handler raises ``KeyboardInterrupt``); nothing if none."""
        if not self.caught:
            return
        frame = self.caught[0]
        self.caught.clear()
        if callable(self.previous):
            self.previous(signal.SIGINT, frame)
        elif self.previous != signal.SIG_IGN:
            raise KeyboardInterrupt


def interrupts_held() -> bool:
    """Whether a SIGINT cannot raise here now: ``hold_interrupts`` is active, or this is not the main thread."""
    return _holding or threading.current_thread() is not threading.main_thread()


@contextlib.contextmanager
def hold_interrupts() -> Iterator[HeldInterrupts]:
    """Hold a SIGINT back until the block is done, then deliver it (main thread only; elsewhere a no-op).

    For work that must happen whole: a message sent or received (half a message would leave a channel out of step),
    processes killed, state marked. A long block can call ``deliver()`` on what it gets at its safe points.
    """
    global _holding
    if interrupts_held():
        yield HeldInterrupts()  # held further out (which delivers the interrupt), or none can arrive here
        return
    held = HeldInterrupts()
    try:
        held.previous = signal.signal(signal.SIGINT, lambda signum, frame: held.caught.append(frame))
    except ValueError:  # not the main interpreter
        yield held
        return
    _holding = True
    try:
        yield held
    finally:
        _holding = False
        signal.signal(signal.SIGINT, held.previous)
        held.deliver()
