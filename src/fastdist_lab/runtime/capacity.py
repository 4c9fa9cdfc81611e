"""Will a world fit on this machine? What its ranks need against what the machine has, asked before anything starts.

A ``LocalCluster`` of ``N`` ranks is ``N`` worker processes forked by one worker server: about ``WORKER_MEMORY``
of private memory, ``TASKS_PER_WORKER`` kernel tasks (threads count against the process limits) and
``files_needed(N)`` open files each. A threaded simulated world is ``N`` threads of this process, about
``THREAD_RANK_MEMORY`` each; a fake one is ``N`` sets of objects, about ``FAKE_RANK_MEMORY`` each. What the machine
has: available memory (``MemAvailable``, a cgroup's memory limit, or the budget set in ``MEMORY_BUDGET_ENV``), the
tasks this user may still start (``RLIMIT_NPROC``, which the kernel does not apply to root), the tasks a pids
cgroup and the kernel still allow, and the open-file limit. ``check_capacity`` refuses with one line naming the
numbers, and the mode that would fit.

The per-rank figures are measured on torch 2.13 (CPU) with ``benchmarks/bench_scale.py`` and rounded up.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import CapacityError, LayoutError
from ..validation import check_int
from .procs import FILES_PER_PROCESS, file_limits, files_needed

MIB = 2**20
GIB = 2**30
WORKER_MEMORY = 16 * MIB
"""Private memory of one gloo worker process with its groups (measured 6-7 MiB at 8-64 ranks, ~14.5 MiB per rank
at 256 ranks)."""
SERVER_MEMORY = 400 * MIB
"""The worker server (one interpreter with torch imported)."""
TASKS_PER_WORKER = 16
"""Kernel tasks of one worker process (measured: 15 threads, gloo's and torch's included)."""
THREAD_RANK_MEMORY = 1 * MIB
"""One rank of a threaded simulated world: its thread, pool, groups, generators (measured ~0.35 MiB at 4,096)."""
FAKE_RANK_MEMORY = MIB // 4
"""One rank of a fake simulated world (no thread of its own)."""
MEMORY_BUDGET_ENV = "FASTDIST_LAB_MEMORY_BUDGET"
"""Environment variable capping the memory a world may use (bytes, or a number with K, M, G, T: ``"2G"``)."""


@dataclass
class Machine:
    """What this machine offers a new world (``machine_resources()``)."""

    memory: int
    """Bytes of memory available."""
    memory_source: str
    tasks: int | None
    """Tasks (processes and threads) that may still be started, or ``None`` when no limit applies."""
    tasks_source: str = ""
    files: int = 1 << 30
    """Hard limit on open files per process."""
    notes: list[str] = field(default_factory=list)


@dataclass
class Needs:
    """What a world needs: memory in bytes, tasks, open files per process."""

    memory: int
    tasks: int
    files: int
    what: str


def parse_bytes(text: str) -> int:
    """``"2G"`` -> 2 GiB, ``"512M"``, ``"1.5T"``, or a plain number of bytes; ``ValueError`` otherwise."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), flags=re.IGNORECASE)
    if not match:
        raise ValueError(f"{MEMORY_BUDGET_ENV}={text!r} is not an amount of memory (e.g. 8G, 512M, 1000000)")
    scale = {"": 1, "K": 2**10, "M": MIB, "G": GIB, "T": 2**40}[match.group(2).upper()]
    return int(float(match.group(1)) * scale)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as file:
            return file.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_files(controller: str, names: tuple[str, str]) -> tuple[int, int] | None:
    """(limit, usage) of this process's cgroup for ``controller`` (v2 or v1), ``None`` when unlimited/unknown."""
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            base = f"/sys/fs/cgroup{path}"
        elif controller in controllers.split(","):
            base = f"/sys/fs/cgroup/{controller}{path}"
        else:
            continue
        limit, usage = _read(f"{base}/{names[0]}"), _read(f"{base}/{names[1]}")
        if limit and usage and limit.isdigit() and usage.isdigit() and int(limit) < 1 << 60:
            return int(limit), int(usage)
    return None


def _memory() -> tuple[int, str]:
    available, source = 1 << 60, "unknown"
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemAvailable:"):
            available, source = int(line.split()[1]) * 1024, "available"
    for names in (("memory.max", "memory.current"), ("memory.limit_in_bytes", "memory.usage_in_bytes")):
        group = _cgroup_files("memory", names)
        if group is not None and group[0] - group[1] < available:
            available, source = max(0, group[0] - group[1]), "left under this cgroup's memory limit"
    budget = os.environ.get(MEMORY_BUDGET_ENV, "").strip()
    if budget:
        value = parse_bytes(budget)
        if value < available:
            available, source = value, f"allowed by {MEMORY_BUDGET_ENV}={budget}"
    return available, source


def _user_tasks(uid: int) -> int:
    """Tasks (threads) of every process whose real user is ``uid``."""
    count = 0
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        text = _read(f"/proc/{entry}/status") or ""
        uid_line = re.search(r"^Uid:\s+(\d+)", text, flags=re.MULTILINE)
        threads = re.search(r"^Threads:\s+(\d+)", text, flags=re.MULTILINE)
        if uid_line and threads and int(uid_line.group(1)) == uid:
            count += int(threads.group(1))
    return count


def _tasks() -> tuple[int | None, str]:
    """Tasks that may still start, and the limit that says so (the tightest of those that apply)."""
    options: list[tuple[int, str]] = []
    with contextlib.suppress(ImportError, OSError, ValueError):
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
        if soft != resource.RLIM_INFINITY and os.geteuid() != 0:  # the kernel does not apply it to root
            used = _user_tasks(os.getuid())
            options.append((soft - used, f"this user's process limit ('ulimit -u' {soft:,}, {used:,} in use)"))
    group = _cgroup_files("pids", ("pids.max", "pids.current"))
    if group is not None:
        options.append((group[0] - group[1], f"this cgroup's task limit ({group[0]:,}, {group[1]:,} in use)"))
    loadavg = (_read("/proc/loadavg") or "").split()
    total = int(loadavg[3].split("/")[1]) if len(loadavg) > 3 and "/" in loadavg[3] else None
    for path, what in (("/proc/sys/kernel/threads-max", "threads-max"), ("/proc/sys/kernel/pid_max", "pid_max")):
        value = _read(path)
        if total is not None and value and value.isdigit():
            options.append((int(value) - total, f"the kernel's {what} ({int(value):,}, {total:,} tasks running)"))
    if not options:
        return None, ""
    return min(options)


def machine_resources() -> Machine:
    """What this machine offers now (memory, tasks, open files); see the module docstring."""
    memory, memory_source = _memory()
    tasks, tasks_source = _tasks()
    return Machine(memory, memory_source, tasks, tasks_source, file_limits()[1])


def world_needs(world_size: int, mode: str = "processes") -> Needs:
    """What a world of ``world_size`` ranks needs in ``mode`` (``"processes"``, ``"threads"`` or ``"fake"``)."""
    if mode == "processes":
        memory = SERVER_MEMORY + world_size * WORKER_MEMORY
        what = f"{world_size:,} ranks as processes"
        return Needs(memory, world_size * TASKS_PER_WORKER + 2, files_needed(world_size), what)
    if mode == "threads":
        return Needs(world_size * THREAD_RANK_MEMORY, world_size, FILES_PER_PROCESS, f"{world_size:,} rank threads")
    return Needs(world_size * FAKE_RANK_MEMORY, 1, FILES_PER_PROCESS, f"{world_size:,} fake ranks")


def _size(count: int) -> str:
    return f"{count / GIB:.1f} GiB" if count >= GIB else f"{count / MIB:.0f} MiB"


def capacity_problems(needs: Needs, machine: Machine) -> list[str]:
    """Each shortfall of ``machine`` for ``needs``, in words (empty when the world fits)."""
    problems = []
    if needs.memory > machine.memory:
        problems.append(f"about {_size(needs.memory)} of memory, {_size(machine.memory)} {machine.memory_source}")
    if machine.tasks is not None and needs.tasks > machine.tasks:
        problems.append(f"{needs.tasks:,} tasks, {max(0, machine.tasks):,} left under {machine.tasks_source}")
    if needs.files > machine.files:
        problems.append(f"{needs.files:,} open files per process, at most {machine.files:,} ('ulimit -Hn')")
    return problems


def fits(world_size: int, mode: str = "processes", machine: Machine | None = None) -> bool:
    """Whether a world of ``world_size`` ranks in ``mode`` fits on this machine now."""
    return not capacity_problems(world_needs(world_size, mode), machine or machine_resources())


def check_capacity(world_size: int, mode: str = "processes", machine: Machine | None = None) -> None:
    """Raise ``CapacityError`` (one line: what is needed, what there is, what to use instead) unless a world of
    ``world_size`` ranks in ``mode`` fits on this machine."""
    machine = machine or machine_resources()
    needs = world_needs(world_size, mode)
    problems = capacity_problems(needs, machine)
    if not problems:
        return
    alternative = next((m for m in ("threads", "fake") if m != mode and fits(world_size, m, machine)), None)
    if alternative == "threads" and mode == "fake":
        alternative = None
    advice = f"; simulate it in one process instead (--simulate {alternative}; SimulatedCluster(mode={alternative!r}))"
    message = f"{needs.what} need {'; '.join(problems)}{advice if alternative is not None else ''}"
    raise CapacityError(message, problems, alternative)


def cluster_sizes(world_size: Any, local_world_size: Any) -> tuple[int, int]:
    """``(world_size, local_world_size)`` checked (``LayoutError`` naming the value); local defaults to world."""
    world_size = check_int("world_size", world_size, minimum=1)
    local = check_int("local_world_size", world_size if local_world_size is None else local_world_size, minimum=1)
    if world_size % local:
        raise LayoutError(f"local_world_size={local} must divide world_size={world_size}")
    return world_size, local
