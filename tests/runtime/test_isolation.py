"""Another local process against a running cluster (issue 23, attacks 3 to 5): a flood of silent connections under
the common 1,024-descriptor limit, a full descriptor table, a process that lists and overwrites the rendezvous
store's keys during applies (as another user, and as the same user), and the processes a rank starts when the
worker server is SIGKILLed. Every attacker aims at this test's own cluster only: its processes' ports, sockets and
directory, found by pid, never by a name."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from fastdist_lab import ClusterError, Layout, LocalCluster
from fastdist_lab.runtime.procs import wait_gone

ROOT = os.geteuid() == 0
NOBODY = 65534


def _tree(pid: int) -> list[psutil.Process]:
    process = psutil.Process(pid)
    return [process, *process.children(recursive=True)]


def _read_json_line(process: subprocess.Popen, timeout: float) -> dict:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "the controller did not answer"
    line = process.stdout.readline()
    assert line, f"the controller ended (code {process.wait()}): {process.stderr.read() if process.stderr else ''}"
    return json.loads(line)


def _ask(process: subprocess.Popen, command: str, timeout: float = 120) -> dict:
    assert process.stdin is not None
    process.stdin.write(command + "\n")
    process.stdin.flush()
    return _read_json_line(process, timeout)


_VICTIM = textwrap.dedent(
    """
    import json, os, sys, time
    from fastdist_lab import LocalCluster

    def sleepy(ctx):
        import time
        time.sleep(0.8)  # long enough for several liveness checks of the awaited ranks
        return ctx.rank

    cluster = LocalCluster(2, backend="gloo", local_world_size=2, progress=False, timeout=60)
    print(json.dumps({"pid": os.getpid()}), flush=True)
    hoard = []
    for line in sys.stdin:
        command = line.strip()
        begin = time.monotonic()
        try:
            if command == "fill":  # every descriptor this process may open, opened
                try:
                    while True:
                        hoard.append(os.open(os.devnull, os.O_RDONLY))
                except OSError as error:
                    out = {"filled": len(hoard), "errno": error.errno}
            elif command == "free":
                while hoard:
                    os.close(hoard.pop())
                out = {"freed": True}
            elif command == "restart":
                cluster.restart()
                out = {"values": cluster.run(lambda ctx: ctx.rank).values}
            elif command == "sleepy":
                out = {"values": cluster.run(sleepy).values}
            else:
                out = {"values": cluster.run(lambda ctx: ctx.rank).values}
        except Exception as error:
            out = {"error": f"{type(error).__name__}: {error}"}
        out["seconds"] = time.monotonic() - begin
        print(json.dumps(out), flush=True)
    cluster.close()
    """
)


@contextlib.contextmanager
def _victim(tmp_path: Path, soft_limit: int):
    """A controller process under ``soft_limit`` open files, with a 2-rank cluster, driven by lines on stdin."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft_limit, hard))

    process = subprocess.Popen(
        [sys.executable, "-c", _VICTIM], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=dict(os.environ, TMPDIR=str(tmp_path)), preexec_fn=limit,
    )  # fmt: skip
    try:
        assert _read_json_line(process, 120)["pid"] == process.pid
        yield process
        process.stdin.close()  # type: ignore[union-attr]
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# ----------------------------------------------------------------------------------------------- attack 3

_FLOOD = textwrap.dedent(
    """
    import json, select, socket, sys
    # silent connections to every unix socket given, kept up until told to stop, as fast as they go: a full backlog is
    # retried, so each connection the listener takes from its backlog is replaced at once
    addresses, wanted = json.loads(sys.argv[1]), int(sys.argv[2])
    held, told, tries = [], False, 0
    while True:
        tries += 1
        for address in addresses:
            if len(held) >= wanted:
                break
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.setblocking(False)
            try:
                client.connect(address)
                held.append(client)
            except OSError:  # the backlog is full (or the socket is gone): try again
                client.close()
        if not told and (len(held) >= 128 or not addresses):
            print(len(held), flush=True)  # the listener's backlog is full: the victim may restart now
            told = True
        if tries % 64 == 0 and select.select([sys.stdin], [], [], 0 if addresses else 0.05)[0]:
            break
    print(len(held), flush=True)
    """
)


def _unix_listeners(processes: list[psutil.Process]) -> list[str]:
    """Addresses of the listening unix sockets these processes hold (``/proc/net/unix``: flag ``__SO_ACCEPTCON``)."""
    inodes = set()
    for process in processes:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{process.pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{process.pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    found = []
    with open("/proc/net/unix") as table:
        for line in list(table)[1:]:
            fields = line.split()
            if len(fields) >= 8 and int(fields[3], 16) & 0x10000 and fields[6] in inodes:
                path = fields[7]
                found.append("\0" + path[1:] if path.startswith("@") else path)
    return found


@pytest.mark.timeout(240)
def test_a_flood_of_silent_connections_under_1024_descriptors_does_not_break_a_restart(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1300:
        pytest.skip(f"the flood needs 1,300 descriptors, this machine allows {hard}")
    with _victim(tmp_path, 1024) as victim:
        listeners = _unix_listeners(_tree(victim.pid))
        flood = subprocess.Popen(
            [sys.executable, "-c", _FLOOD, json.dumps(listeners), "1140"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1300, hard)),
        )  # fmt: skip
        try:
            int(flood.stdout.readline())  # type: ignore[union-attr]
            during = _ask(victim, "restart")
            for _ in range(3):  # the flood goes on: restarts and calls still work
                if during.get("values") == [0, 1]:
                    during = _ask(victim, "restart")
            then = _ask(victim, "run")
        finally:
            flood.stdin.close()  # type: ignore[union-attr]
            held = int(flood.stdout.readline() or 0)  # type: ignore[union-attr]
            flood.wait(timeout=30)
        assert during.get("values") == [0, 1] and during["seconds"] < 30, (held, during)
        assert then.get("values") == [0, 1], (held, then)
        assert _ask(victim, "run")["values"] == [0, 1]
    assert not listeners, f"the cluster listens on unix sockets a stranger can flood: {listeners}"


@pytest.mark.timeout(240)
def test_a_full_descriptor_table_is_never_taken_for_dead_workers(tmp_path):
    with _victim(tmp_path, 1024) as victim:
        assert _ask(victim, "run")["values"] == [0, 1]
        filled = _ask(victim, "fill")
        assert filled["errno"] == 24 and filled["filled"] > 900
        assert _ask(victim, "sleepy")["values"] == [0, 1]  # liveness unreadable from /proc: asked another way
        refused = _ask(victim, "restart")["error"]  # new channels need descriptors: the error says so
        assert "file descriptor" in refused and "died" not in refused and "exit status" not in refused, refused
        assert _ask(victim, "free")["freed"]
        assert _ask(victim, "run")["values"] == [0, 1]
        assert _ask(victim, "restart")["values"] == [0, 1]


# ----------------------------------------------------------------------------------------------- attack 4

_STORE_ATTACKER = textwrap.dedent(
    """
    import fcntl, glob, json, os, struct, sys, threading, time
    from datetime import timedelta
    import torch.distributed as dist

    directory, ports, seconds = sys.argv[1], [int(p) for p in sys.argv[2].split(",") if p], float(sys.argv[3])
    if len(sys.argv) > 4:  # another user from here on (torch is imported: its files need not be readable to them)
        os.setgroups([])
        os.setgid(int(sys.argv[4]))
        os.setuid(int(sys.argv[4]))
    found = {"stores": 0, "keys_read": 0, "keys_written": 0, "files": 0}
    end = time.monotonic() + seconds

    def tcp_store(port):  # a TCPStore on any port of the cluster: list its keys, overwrite them, again and again
        while time.monotonic() < end:
            try:
                store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=1))
                keys = store.list_keys()
                found["stores"] += 1
                found["keys_read"] += len(keys)
                for key in keys:
                    store.set(key, b"\\x00attacker")
                    found["keys_written"] += 1
            except Exception:
                time.sleep(0.05)

    def file_store(path):  # a torch FileStore (keys and values length-prefixed): read, appended to under its lock
        with open(path, "r+b") as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            data, keys, at = file.read(), set(), 0
            while at + 4 <= len(data):
                (size,) = struct.unpack_from("<I", data, at)
                key = data[at + 4 : at + 4 + size]
                (size2,) = struct.unpack_from("<I", data, at + 4 + size) if at + 8 + size <= len(data) else (0,)
                at += 8 + size + size2
                if key.startswith(b"/"):
                    keys.add(key)
            found["stores"] += 1
            found["keys_read"] += len(keys)
            for key in keys:
                file.write(struct.pack("<I", len(key)) + key + struct.pack("<I", 9) + b"\\x00attacker")
                found["keys_written"] += 1

    for port in ports:
        threading.Thread(target=tcp_store, args=(port,), daemon=True).start()
    while time.monotonic() < end:
        for path in glob.glob(os.path.join(directory, "fastdist-lab-*", "**", "store*"), recursive=True):
            try:
                if path not in found:
                    found[path] = found["files"] = found["files"] + 1
                file_store(path)
            except OSError:
                pass
        time.sleep(0.002)
    print(json.dumps({key: value for key, value in found.items() if "/" not in key}), flush=True)
    os._exit(0)  # a client stuck on a port that is no store is left behind
    """
)


def _store_attack(cluster: LocalCluster, directory: Path, user: int | None, seconds: float) -> subprocess.Popen:
    ports = {c.laddr.port for p in _tree(os.getpid()) for c in p.net_connections(kind="inet")
             if c.status == psutil.CONN_LISTEN and p.pid != os.getpid()}  # fmt: skip
    command = [sys.executable, "-c", _STORE_ATTACKER, str(directory), ",".join(map(str, sorted(ports))), str(seconds)]
    return subprocess.Popen([*command, *([] if user is None else [str(user)])], stdout=subprocess.PIPE, text=True)


def _layouts() -> list[Layout]:
    return [
        Layout(world_size=8, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2),
        Layout(world_size=8, local_world_size=8, tensor_parallel=4, pipeline_parallel=2),
        Layout(world_size=8, local_world_size=8, tensor_parallel=2, pipeline_parallel=4),
    ]


@pytest.mark.timeout(240)
@pytest.mark.skipif(not ROOT, reason="only root can run the attacker as another user")
def test_another_user_can_neither_read_nor_write_the_rendezvous_store(private_tmpdir):
    with LocalCluster(8, backend="gloo", local_world_size=8, progress=False, timeout=60) as cluster:
        assert cluster.apply(_layouts()[0]).ok  # gloo devices listen now: the attacker tries those ports too
        attacker = _store_attack(cluster, private_tmpdir, NOBODY, 8.0)
        try:
            end, applied = time.monotonic() + 8.0, 0
            while time.monotonic() < end:
                for layout in _layouts()[1:] + _layouts()[:1]:
                    verification = cluster.apply(layout, timeout=30)
                    assert verification.ok, verification
                    applied += 1
            found = json.loads(attacker.communicate(timeout=60)[0])
        finally:
            if attacker.poll() is None:
                attacker.kill()
                attacker.wait()
        assert applied >= 3
        assert found == {"stores": 0, "keys_read": 0, "keys_written": 0, "files": 0}


@pytest.mark.timeout(240)
def test_a_process_overwriting_the_stores_keys_gets_one_clear_error_and_the_next_call_succeeds(private_tmpdir):
    with LocalCluster(8, backend="gloo", local_world_size=8, progress=False, timeout=60) as cluster:
        assert cluster.apply(_layouts()[0]).ok
        attacker = _store_attack(cluster, private_tmpdir, None, 6.0)  # this user: it may open the store's file
        outcomes = []
        try:
            end = time.monotonic() + 6.0
            while time.monotonic() < end:
                for layout in _layouts()[1:] + _layouts()[:1]:
                    try:
                        verification = cluster.apply(layout, timeout=30)
                        outcomes.append("ok" if verification.ok else str(verification))
                    except ClusterError as error:
                        outcomes.append(str(error))
            found = json.loads(attacker.communicate(timeout=60)[0])
        finally:
            if attacker.poll() is None:
                attacker.kill()
                attacker.wait()
        for outcome in outcomes:  # each apply verified its layout, or failed naming the group it could not create
            assert outcome == "ok" or ("could not create the gloo group" in outcome.splitlines()[0]), outcome
        assert found["keys_written"] > 0, found  # this user can open the store's file: it did overwrite keys
        assert cluster.apply(_layouts()[1]).ok  # the attacker gone, the next call succeeds
        assert cluster.run(lambda ctx: ctx.rank).values == list(range(8))


# ----------------------------------------------------------------------------------------------- attack 5


def _spawn_tree(ctx):
    """A child, and a double-forked daemon in a new session whose parent exited at once; returns their pids."""
    import os
    import subprocess
    import time

    pids = [subprocess.Popen(["sleep", "600"]).pid]
    read, write = os.pipe()
    first = os.fork()
    if first == 0:
        os.close(read)
        os.setsid()
        grandchild = os.fork()
        if grandchild == 0:
            os.close(write)
            time.sleep(600)
            os._exit(0)
        os.write(write, str(grandchild).encode())
        os._exit(0)
    os.close(write)
    pids.append(int(os.read(read, 32)))
    os.close(read)
    os.waitpid(first, 0)
    return pids


@pytest.mark.timeout(120)
def test_what_a_rank_starts_ends_with_the_cluster_also_when_the_server_is_sigkilled():
    cluster = LocalCluster(2, backend="gloo", local_world_size=2, progress=False, timeout=60)
    started: list[int] = []
    try:
        results = cluster.run(_spawn_tree)
        assert results.ok, results
        started = [pid for pids in results.values for pid in pids]
        assert len(started) == 4 and not [pid for pid in started if not psutil.pid_exists(pid)]
        processes = [*cluster.pids, cluster.server_pid]
        os.kill(cluster.server_pid, signal.SIGKILL)  # as the OOM killer would
        time.sleep(0.5)
        cluster.close()
        left = wait_gone([*started, *processes], 10)
        assert not left, f"still running after close(): {left}"
    finally:
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        cluster.close()
