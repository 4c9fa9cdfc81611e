"""Small process utilities shared by the controller, the fork server and the workers (Linux first, POSIX else)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux ``prctl``); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (a zombie counts as alive until reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_quietly(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to ``pid``, ignoring a process that is already gone."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait until none of ``pids`` exists or ``timeout`` passes; returns those still there."""
    deadline = time.monotonic() + timeout
    left = [pid for pid in pids if pid_alive(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = [pid for pid in left if pid_alive(pid)]
    return left
