"""The capacity guard: a world that does not fit is refused before anything starts, in one line naming the numbers
and the mode that would fit (``runtime.capacity``)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from fastdist_lab import LocalCluster, SimulatedCluster
from fastdist_lab.errors import CapacityError
from fastdist_lab.runtime import capacity
from fastdist_lab.runtime.capacity import GIB, MIB, Machine, check_capacity, fits, parse_bytes, world_needs

SRC = str(Path(__file__).resolve().parents[2] / "src")
ROOT = os.geteuid() == 0


def machine(memory: int = 64 * GIB, tasks: int | None = 100_000, files: int = 1 << 20) -> Machine:
    """A machine of these resources (what ``machine_resources()`` would report)."""
    return Machine(memory, "available", tasks, "this user's process limit ('ulimit -u' 100,000, 0 in use)", files)


def children() -> set[int]:
    """Pids of the processes whose parent is this one (read from /proc, no psutil)."""
    me, out = str(os.getpid()), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as file:
                    fields = file.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[1] == me:
                out.add(int(entry))
    return out


def test_a_world_that_fits_passes_and_the_needs_grow_with_it():
    check_capacity(8, "processes", machine())
    small, large = world_needs(8), world_needs(4096)
    assert small.memory < large.memory and small.tasks < large.tasks and small.files < large.files
    assert world_needs(4096, "threads").tasks == 4096 and world_needs(16384, "fake").tasks == 1
    assert fits(4096, "threads", machine()) and not fits(4096, "processes", machine())


def test_an_oversized_process_world_is_refused_in_one_line_naming_the_numbers():
    with pytest.raises(CapacityError) as caught:
        check_capacity(4096, "processes", machine(memory=8 * GIB, tasks=10_000, files=1024))
    error = caught.value
    message = str(error)
    assert "\n" not in message
    assert message.startswith("4,096 ranks as processes need ")
    need = world_needs(4096)
    assert f"about {need.memory / GIB:.1f} GiB of memory, 8.0 GiB available" in message
    assert f"{need.tasks:,} tasks, 10,000 left under this user's process limit" in message
    assert f"{need.files:,} open files per process, at most 1,024" in message
    assert "--simulate threads" in message and error.alternative == "threads" and len(error.problems) == 3


@pytest.mark.parametrize(
    ("mode", "resources", "alternative"),
    [
        ("processes", dict(memory=2 * GIB), "fake"),  # 4,096 threads need 4 GiB: only fake fits
        ("threads", dict(memory=2 * GIB), "fake"),
        ("threads", dict(tasks=1000), "fake"),
        ("fake", dict(memory=512 * MIB), None),
    ],
)
def test_the_advice_names_a_mode_that_fits_or_none(mode, resources, alternative):
    with pytest.raises(CapacityError) as caught:
        check_capacity(4096, mode, machine(**resources))
    assert caught.value.alternative == alternative
    assert ("--simulate" in str(caught.value)) == (alternative is not None)
    if alternative:
        assert f"--simulate {alternative}" in str(caught.value)


def test_no_task_limit_means_no_task_shortfall():
    check_capacity(1024, "threads", machine(tasks=None))
    with pytest.raises(CapacityError) as caught:
        check_capacity(1024, "threads", machine(tasks=1023))
    assert "1,024 tasks, 1,023 left" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "value"),
    [("2G", 2 * GIB), ("512M", 512 * MIB), ("1.5T", int(1.5 * 2**40)), ("1000000", 1_000_000), ("2GiB", 2 * GIB),
     ("64k", 64 * 1024), (" 3 g ", 3 * GIB), ("8GB", 8 * GIB)],
)  # fmt: skip
def test_the_memory_budget_parses_amounts(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["lots", "-1G", "2X", "G", "1e9", "2 G B"])
def test_a_bad_memory_budget_names_the_variable_and_the_value(text):
    with pytest.raises(ValueError) as caught:
        parse_bytes(text)
    assert f"FASTDIST_LAB_MEMORY_BUDGET={text!r}" in str(caught.value)


def test_the_budget_caps_the_memory_considered(monkeypatch):
    monkeypatch.setenv(capacity.MEMORY_BUDGET_ENV, "300M")
    found = capacity.machine_resources()
    assert found.memory == 300 * MIB and found.memory_source == "allowed by FASTDIST_LAB_MEMORY_BUDGET=300M"
    monkeypatch.setenv(capacity.MEMORY_BUDGET_ENV, "1T")  # more than the machine has: the machine's figure wins
    assert capacity.machine_resources().memory < 2**40
    monkeypatch.setenv(capacity.MEMORY_BUDGET_ENV, "plenty")
    with pytest.raises(ValueError, match="FASTDIST_LAB_MEMORY_BUDGET='plenty'"):
        LocalCluster(8, backend="gloo", local_world_size=8, progress=False)


@pytest.mark.parametrize(("world", "budget"), [(4096, "2G"), (8, "64M")])
def test_a_local_cluster_that_does_not_fit_is_refused_before_anything_starts(monkeypatch, world, budget):
    monkeypatch.setenv(capacity.MEMORY_BUDGET_ENV, budget)
    before, threads = children(), threading.active_count()
    with pytest.raises(CapacityError) as caught:
        LocalCluster(world, backend="gloo", local_world_size=8, progress=False)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{world:,} ranks as processes need about ")
    assert f"allowed by FASTDIST_LAB_MEMORY_BUDGET={budget}" in message
    assert "--simulate" in message
    assert children() == before and threading.active_count() == threads  # nothing was started


def test_a_simulated_world_that_does_not_fit_is_refused_before_any_thread_starts(monkeypatch):
    monkeypatch.setenv(capacity.MEMORY_BUDGET_ENV, "1G")
    threads = threading.active_count()
    with pytest.raises(CapacityError, match=r"4,096 rank threads need about 4\.0 GiB .*--simulate fake"):
        SimulatedCluster(4096, "threads", local_world_size=8, progress=False)
    assert threading.active_count() == threads


NPROC_CHILD = textwrap.dedent(
    """
    import json, resource
    from fastdist_lab import CapacityError, LocalCluster
    from fastdist_lab.runtime.capacity import check_capacity, machine_resources
    out = {"limit": resource.getrlimit(resource.RLIMIT_NPROC)[0], "tasks": machine_resources().tasks_source}
    try:
        check_capacity(64)
        out["refused"] = None  # (the cluster itself is not started: 64 processes are more than a test needs)
    except CapacityError:
        try:
            LocalCluster(64, backend="gloo", local_world_size=8, progress=False).close()
            out["refused"] = "LocalCluster started"
        except CapacityError as error:
            out["refused"] = str(error)
    print(json.dumps(out))
    """
)


def _run_with_process_limit(headroom: int) -> dict:
    """Run ``NPROC_CHILD`` under a soft RLIMIT_NPROC of the tasks this user runs now plus ``headroom``."""
    limit = capacity._user_tasks(os.getuid()) + headroom
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NPROC, (limit, hard))

    done = subprocess.run(
        [sys.executable, "-c", NPROC_CHILD],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lower,  # in the child, before python starts: the kernel applies it to non-root users
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]),
            capacity.MEMORY_BUDGET_ENV: "",
        },
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["limit"] == limit
    return out


@pytest.mark.skipif(ROOT, reason="the kernel does not apply RLIMIT_NPROC to root (see the root test below)")
def test_a_lowered_process_limit_refuses_a_process_world_with_the_numbers():
    out = _run_with_process_limit(headroom=300)
    message = out["refused"]
    assert message is not None and "\n" not in message
    need = world_needs(64).tasks
    assert f"{need:,} tasks, " in message and "left under this user's process limit ('ulimit -u' " in message
    assert "--simulate threads" in message


@pytest.mark.skipif(not ROOT, reason="only root is exempt from RLIMIT_NPROC")
def test_as_root_a_lowered_process_limit_is_not_counted():
    # The kernel lets root exceed RLIMIT_NPROC, so the guard must not refuse root on its account; the memory
    # budget and cgroup limits (tested above through the budget) still apply to root.
    out = _run_with_process_limit(headroom=300)
    assert "process limit" not in out["tasks"]
    assert out["refused"] is None or "process limit" not in out["refused"]
