"""How many package files one ``LocalCluster.apply`` passes through, and how often it switches between them.

The project's method (ARCHITECTURE.md, "Runtime"): ``sys.setprofile`` traces a warm ``apply`` on running workers,
in the controller and, from inside, in a worker (a ``run`` call sets the profile on the worker's call thread, the
next ``run`` takes it off and returns what it saw). Every Python call and return inside the package records the file
of the function entered (``call`` events); consecutive repeats collapse. Printed:

- the package files entered on each side, split into the call path (runtime modules that pass the call along) and
  the leaves (runtime modules that pass nothing along: results, progress, procs, capture, members, expert_groups)
  and the core;
- the number of switches between ``cluster.py``, ``verification.py`` and ``channel.py`` in the controller (the
  sequence restricted to those three files, repeats collapsed, minus one), the figure issue 26 quotes (18 before).

Figures with this method (call-path files: controller, worker, both sides; controller switches): 3, 4, 5 and 18 at
e5f92ba (before issue 26); 3, 3, 5 and 8 once the checks left the transport; 3, 2, 4 and 8 since ``execute`` lives
with the wire (``channel.py``) and ``build_layout`` with the groups it builds (``pool.py``).

Run from the repository root: ``python scripts/trace_apply.py`` (about 10 s; starts a 2-rank gloo cluster).
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

import fastdist_lab
from fastdist_lab import Layout, LocalCluster

PACKAGE = os.path.dirname(os.path.abspath(fastdist_lab.__file__)) + os.sep
LEAVES = {
    "runtime/results.py",
    "runtime/progress.py",
    "runtime/procs.py",
    "runtime/capture.py",
    "runtime/members.py",
    "runtime/expert_groups.py",
}
"""The runtime modules ARCHITECTURE.md named leaves before issue 26: they pass nothing along (and, since issue 28,
``expert_groups.py``: the expert dims' groups and the check of a dim's group as the pool holds it, which
``pool.build_layout`` calls). (Since issue 26,
``verification.py`` holds only the verdict, a leaf too; it is counted on the call path here all the same, so that
the figures before and after compare.)"""
SWITCHED = ("runtime/cluster.py", "runtime/verification.py", "runtime/channel.py")
"""The three files between which issue 26 counts an apply's switches."""


def _relative(filename: str) -> str | None:
    path = os.path.abspath(filename)
    return path[len(PACKAGE) :] if path.startswith(PACKAGE) else None


class Tracer:
    """A ``sys.setprofile`` function recording the package file of each Python function entered."""

    def __init__(self) -> None:
        self.sequence: list[str] = []

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        name = _relative(frame.f_code.co_filename)
        if name is not None and (not self.sequence or self.sequence[-1] != name):
            self.sequence.append(name)


def start_trace(ctx: Any) -> None:
    """On a rank: trace this thread (the worker's call loop) from now on."""
    tracer = Tracer()
    ctx.state["tracer"] = tracer
    sys.setprofile(tracer)


def stop_trace(ctx: Any) -> list[str]:
    """On a rank: stop tracing; the sequence seen since ``start_trace``."""
    sys.setprofile(None)
    return ctx.state.pop("tracer").sequence


def switches(sequence: list[str], files: tuple[str, ...] = SWITCHED) -> int:
    """Transitions in ``sequence`` restricted to ``files`` (repeats collapsed)."""
    kept: list[str] = []
    for name in sequence:
        if name in files and (not kept or kept[-1] != name):
            kept.append(name)
    return max(0, len(kept) - 1)


def files_of(sequence: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(call-path runtime files, runtime leaves, other package files) in order of first entry."""
    seen = list(dict.fromkeys(sequence))
    path = [n for n in seen if n.startswith("runtime/") and n not in LEAVES]
    leaves = [n for n in seen if n in LEAVES]
    other = [n for n in seen if not n.startswith("runtime/")]
    return path, leaves, other


def main() -> None:
    """Trace one warm apply on a 2-rank gloo cluster and print the counts."""
    first = Layout(world_size=2, local_world_size=2, tensor_parallel=2)
    second = Layout(world_size=2, local_world_size=2, pipeline_parallel=2)
    with tempfile.TemporaryDirectory() as private:
        os.environ["TMPDIR"] = private
        tempfile.tempdir = private
        with LocalCluster(2, backend="gloo", local_world_size=2, progress=False, timeout=60) as cluster:
            cluster.apply(first)  # warm: the workers, the pool, the imports
            cluster.apply(second)
            cluster.run(start_trace)
            tracer = Tracer()
            sys.setprofile(tracer)
            try:
                cluster.apply(first)
            finally:
                sys.setprofile(None)
            worker = cluster.run(stop_trace)[0].value
    controller = tracer.sequence
    # the worker's trace also holds the end of the run that started it and the start of the one that stops it
    path_c, leaves_c, other_c = files_of(controller)
    path_w, leaves_w, other_w = files_of(worker)
    call_path = sorted(set(path_c) | set(path_w))
    print(f"controller, call path ({len(path_c)}): {', '.join(path_c)}")
    print(f"controller, leaves: {', '.join(leaves_c)}; other package files: {', '.join(other_c)}")
    print(f"worker, call path ({len(path_w)}): {', '.join(path_w)}")
    print(f"worker, leaves: {', '.join(leaves_w)}; other package files: {', '.join(other_w)}")
    print(f"package files on the call path, both sides: {len(call_path)} ({', '.join(call_path)})")
    print(f"switches between {', '.join(n.split('/')[1] for n in SWITCHED)} in the controller: {switches(controller)}")
    print(f"switches between {', '.join(n.split('/')[1] for n in SWITCHED)} in the worker: {switches(worker)}")


if __name__ == "__main__":
    main()
