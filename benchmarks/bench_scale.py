"""Benchmark of production-size worlds on one machine (issue 15): simulated clusters and the whole-world Layout.

Every figure is measured in this run, next to a baseline measured in the same run:

- threads, 1,024 and 4,096 ranks (128 / 512 nodes x 8, tensor 8, pipeline 8, sequence-data 2): start plus
  ``apply`` (every group of all nine dims checked with real collectives); targets < 30 s and < 120 s; peak memory
  (``maxrss``) < 4 GB. Baseline: the naive check that all-gathers every group (what processes do) run on the same
  built groups as the cluster's own step 2, at two smaller worlds (extrapolated to 1,024 with the growth they show)
  and at 1,024 ranks; its cost grows towards the square of the world, the cluster's check does not.
- fake, 16,384 ranks: membership of every group of every rank (``apply``), target < 60 s; plus torch's DeviceMesh
  built with fake groups for ``cpu`` and ``cuda`` at the sampled ranks. Baseline: the same apply at 2,048 ranks;
  the apply grows linearly (target: ranks**1.2 at most; a tuple hashed anew at every lookup made it quadratic).
- 64 ranks: threads vs processes (``LocalCluster``, gloo over loopback) for the same start plus ``apply``.
- the whole-world ``Layout`` at 2**24 ranks: ``.ranks`` and the groups of every dim, target < 5 s and < 4 GB;
  baseline: one ``DistributedConfig`` per rank, timed on 2**12 ranks and extrapolated per rank.

Each world runs in a child process of its own, so its ``maxrss`` is its own peak; the whole run's peak is the
largest of them and of this process (a ``LocalCluster``'s worker processes are not counted). Memory per rank
(``maxrss`` over the 64-rank world's, per extra rank) is compared with what ``runtime.capacity`` assumes.
Reference figures of the issue (not re-measured): torch's DeviceMesh plus one all-reduce on 1,024 threads took
98 s; a naive per-group probe with the world group's all-gather took 48 s.

Run: ``python benchmarks/bench_scale.py [--quick]`` (``--quick``: smaller worlds, about a minute). Prints the
figures, then a table: figure, value, target, ratio/baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

FACTORS = dict(local_world_size=8, tensor_parallel=8, pipeline_parallel=8, sequence_data_parallel=2)
"""The layout of every world here from 128 ranks up (128 ranks per data-parallel replica)."""
SMALL_FACTORS = dict(local_world_size=8, tensor_parallel=4, pipeline_parallel=4, sequence_data_parallel=2)
"""The layout of the 64-rank worlds (threads vs processes)."""
GB = 1e9
TIMEOUT = 900.0


def maxrss_bytes(who: int = resource.RUSAGE_SELF) -> int:
    """Peak resident memory of this process (or of its largest waited-for child), in bytes (Linux: KiB units)."""
    return resource.getrusage(who).ru_maxrss * 1024


def layout_of(world_size: int, pipeline_first: bool = False) -> Any:
    """The benchmark's layout at ``world_size`` ranks."""
    from fastdist_lab import Layout

    factors = FACTORS if world_size >= 128 else SMALL_FACTORS
    return Layout(world_size=world_size, pipeline_first=pipeline_first, **factors)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- children: one measurement each
def child_simulated(mode: str, world_size: int, probe: int) -> dict[str, Any]:
    """Start a simulated world and apply the layout; ``probe`` > 0: also time step 2 (the collective checks) again
    as the cluster does it and as the naive check (every group all-gathered), on the same built groups, ``probe``
    times each (the best is kept)."""
    from fastdist_lab import SimulatedCluster
    from fastdist_lab.checks.group_check import THREADS_GATHER_LIMIT, check_groups, verify_groups

    layout = layout_of(world_size)
    begin = time.monotonic()
    cluster = SimulatedCluster(world_size, mode=mode, local_world_size=8, timeout=TIMEOUT, progress=False)
    started = time.monotonic()
    try:
        verification = verify_groups(cluster, layout)  # the apply and the collective check, as `check` makes them
        applied = time.monotonic()
        out: dict[str, Any] = {
            "start_s": started - begin,
            "apply_s": applied - started,
            "total_s": applied - begin,
            "ok": bool(verification.ok),
            "groups": len(verification.rows),
        }
        for _ in range(probe):  # the best of ``probe`` rounds, alternating, so both see the same machine load
            for name, limit in (("ours_step2_s", THREADS_GATHER_LIMIT), ("naive_step2_s", None)):
                begin = time.monotonic()
                results = cluster.run(check_groups, set(), limit)
                out[name] = min(out.get(name, float("inf")), time.monotonic() - begin)
                out["ok"] = out["ok"] and bool(results.ok)
    finally:
        cluster.close()
    if mode == "fake":
        from fastdist_lab.checks.fake_mesh import fake_device_mesh_check

        begin = time.monotonic()
        mesh = fake_device_mesh_check(layout, device_types=("cpu", "cuda"))
        out["mesh_s"] = time.monotonic() - begin
        out["mesh_ok"] = bool(mesh.attrs["ok"])
        out["mesh_ranks"] = len(mesh.attrs["ranks"])
    return out


def child_processes(world_size: int) -> dict[str, Any]:
    """Start a ``LocalCluster`` of gloo processes and apply the layout."""
    from fastdist_lab import LocalCluster
    from fastdist_lab.checks import verify_groups

    begin = time.monotonic()
    cluster = LocalCluster(world_size, backend="gloo", local_world_size=8, timeout=TIMEOUT, progress=False)
    started = time.monotonic()
    try:
        verification = verify_groups(cluster, layout_of(world_size))
        applied = time.monotonic()
    finally:
        cluster.close()
    seconds = {"start_s": started - begin, "apply_s": applied - started, "total_s": applied - begin}
    return {**seconds, "ok": bool(verification.ok)}


def child_layout(world_size: int) -> dict[str, Any]:
    """Seconds to build the whole-world Layout and materialise ``.ranks`` and every dim's groups (pandas, which
    ``.ranks`` imports on first use, is imported before the clock starts)."""
    import pandas  # noqa: F401

    from fastdist_lab.config import DIM_NAMES

    begin = time.monotonic()
    layout = layout_of(world_size)
    rows = len(layout.ranks)
    groups = sum(int(layout.groups(name).shape[0]) for name in DIM_NAMES)
    return {"total_s": time.monotonic() - begin, "ok": rows == world_size, "groups": groups}


def per_rank_configs(world_size: int) -> float:
    """The baseline: seconds to build one ``DistributedConfig`` per rank and read every dim's members."""
    from fastdist_lab import DistributedConfig

    begin = time.monotonic()
    for rank in range(world_size):
        config = DistributedConfig(world_size=world_size, rank=rank, **FACTORS)  # type: ignore[arg-type]
        for dim in config.distributed_dims.values():
            _ = dim.global_ranks
    return time.monotonic() - begin


def run_child(*args: str) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; its figures plus its own peak memory (``maxrss``)."""
    command = [sys.executable, __file__, "--child", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT + 60, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(args)} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def child_main(kind: str, *args: str) -> None:
    """Entry of a child: one measurement, printed as one JSON line with the child's ``maxrss``."""
    if kind == "simulated":
        out = child_simulated(args[0], int(args[1]), int(args[2]))
    elif kind == "processes":
        out = child_processes(int(args[0]))
    elif kind == "layout":
        out = child_layout(int(args[0]))
    else:
        raise SystemExit(f"unknown child {kind!r}")
    out["maxrss"] = maxrss_bytes()
    print(json.dumps(out), flush=True)


# --------------------------------------------------------------------------- the run
def growth(small: tuple[int, float], large: tuple[int, float]) -> float:
    """Exponent ``p`` of ``seconds ~ ranks**p`` through two measurements."""
    import math

    return math.log(large[1] / small[1]) / math.log(large[0] / small[0])


def verdict(value: float, limit: float, unit: str) -> str:
    """The target cell of the table: ``"< 30 s OK"`` or ``"< 30 s MISSED"``."""
    return f"< {limit:g} {unit} {'OK' if value < limit else 'MISSED'}"


def main() -> int:
    """Run every measurement and print the figures and the final table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller worlds (1,024 threads, 4,096 fake, 2**20)")
    args = parser.parse_args()
    import torch

    threads_big = 1024 if args.quick else 4096
    fake_big = 4096 if args.quick else 16384
    layout_big = 2**20 if args.quick else 2**24
    probes = (128, 256) if args.quick else (256, 512)
    print(f"torch {torch.__version__}; {os.cpu_count()} CPUs; layout {FACTORS}; {'quick' if args.quick else 'full'}")
    table: list[tuple[str, str, str, str]] = []
    peaks: dict[str, int] = {}

    def world(label: str, *child: str) -> dict[str, Any]:
        out = run_child(*child)
        peaks[label] = out["maxrss"]
        if not out["ok"]:
            raise RuntimeError(f"{label}: the verification failed: {out}")
        return out

    def row(figure: str, value: str, target: str = "", ratio: str = "") -> None:
        table.append((figure, value, target, ratio))

    # the naive check (every group all-gathered) at two smaller worlds, then both at 1,024 on the same groups
    probe = {n: world(f"threads {n}", "simulated", "threads", str(n), "2") for n in probes}
    small, large = ((n, probe[n]["naive_step2_s"]) for n in probes)
    power = growth(small, large)
    naive_1024 = large[1] * (1024 / large[0]) ** power
    for n in probes:
        ours, naive = probe[n]["ours_step2_s"], probe[n]["naive_step2_s"]
        print(
            f"threads {n:>5}: step 2 as the cluster checks {ours:6.2f} s; naive (every group gathered) {naive:6.2f} s"
        )
    print(f"naive step 2 grows as ranks**{power:.2f}; extrapolated to 1,024 ranks: {naive_1024:.1f} s")

    t1024 = world("threads 1024", "simulated", "threads", "1024", "1")
    naive, ours, total = t1024["naive_step2_s"], t1024["ours_step2_s"], t1024["total_s"]
    print(
        f"threads  1024: start {t1024['start_s']:.2f} s + apply {t1024['apply_s']:.2f} s = {total:.2f} s "
        f"({t1024['groups']} groups); step 2 again {ours:.2f} s, naive {naive:.2f} s; "
        f"maxrss {t1024['maxrss'] / GB:.2f} GB"
    )
    ratio = f"step 2: ours {ours:.1f} s, naive (gather all) {naive:.1f} s = {naive / ours:.1f}x"
    row("threads 1,024 ranks, start + apply", f"{total:.1f} s", verdict(total, 30, "s"), ratio)
    last = growth(large, (1024, naive))
    ratio = (
        f"extrapolated to 1,024: {naive_1024:.1f} s; measured {naive:.1f} s ({large[0]} -> 1,024: ranks**{last:.2f})"
    )
    row(f"naive step 2 growth, {probes[0]} -> {probes[1]} ranks", f"ranks**{power:.2f}", "", ratio)

    big = world(f"threads {threads_big} (no probe)", "simulated", "threads", str(threads_big), "0")
    print(
        f"threads {threads_big:>5}: start {big['start_s']:.2f} s + apply {big['apply_s']:.2f} s = "
        f"{big['total_s']:.2f} s ({big['groups']} groups); maxrss {big['maxrss'] / GB:.2f} GB"
    )
    scale = threads_big / 1024
    target = verdict(big["total_s"], 120, "s") if threads_big == 4096 else ""
    ratio = f"1,024 ranks x {scale:.0f} = {total * scale:.1f} s (linear): {big['total_s'] / (total * scale):.2f}x"
    row(f"threads {threads_big:,} ranks, start + apply", f"{big['total_s']:.1f} s", target, ratio)

    fake = world(f"fake {fake_big}", "simulated", "fake", str(fake_big), "0")
    mesh = "ok" if fake["mesh_ok"] else "MISMATCH"
    print(
        f"fake    {fake_big:>5}: start {fake['start_s']:.2f} s + apply {fake['apply_s']:.2f} s = "
        f"{fake['total_s']:.2f} s ({fake['groups']} groups); fake DeviceMesh cpu+cuda at {fake['mesh_ranks']} "
        f"ranks {fake['mesh_s']:.2f} s ({mesh}); maxrss {fake['maxrss'] / GB:.2f} GB"
    )
    as_threads = total / 1024 * fake_big
    target = verdict(fake["total_s"], 60, "s") if fake_big == 16384 else ""
    ratio = f"threads, 1,024's per rank x {fake_big:,}: {as_threads:.0f} s = {as_threads / fake['total_s']:.1f}x"
    row(f"fake {fake_big:,} ranks, start + apply", f"{fake['total_s']:.1f} s", target, ratio)
    row(f"fake DeviceMesh cpu+cuda, {fake['mesh_ranks']} ranks of {fake_big:,}", f"{fake['mesh_s']:.1f} s", "", mesh)
    # the apply's growth: each rank looks its world group up ~10 times; a member tuple that hashed anew each time
    # (every member walked) made it grow with the square of the world (runtime.members.SharedMembers hashes once)
    fake_small_size = fake_big // 8
    fake_small = world(f"fake {fake_small_size}", "simulated", "fake", str(fake_small_size), "0")
    power = growth((fake_small_size, fake_small["apply_s"]), (fake_big, fake["apply_s"]))
    per_rank = (fake_small["apply_s"] / fake_small_size * 1e3, fake["apply_s"] / fake_big * 1e3)
    ratio = f"{fake_small_size:,} ranks: {per_rank[0]:.2f} ms per rank; {fake_big:,}: {per_rank[1]:.2f} ms"
    row(f"fake apply growth, {fake_small_size:,} -> {fake_big:,} ranks", f"ranks**{power:.2f}",
        verdict(power, 1.2, "(linear)"), ratio)  # fmt: skip

    threads64 = world("threads 64", "simulated", "threads", "64", "0")
    processes64 = world("processes 64 (controller)", "processes", "64")
    print(
        f"64 ranks ({SMALL_FACTORS}): threads {threads64['total_s']:.2f} s (apply {threads64['apply_s']:.2f}); "
        f"processes {processes64['total_s']:.2f} s (apply {processes64['apply_s']:.2f})"
    )
    for key, what in (("total_s", "start + apply"), ("apply_s", "apply only")):
        mine, theirs = threads64[key], processes64[key]
        row(f"64 ranks, {what}: threads", f"{mine:.2f} s", "", f"processes {theirs:.2f} s = {theirs / mine:.1f}x")

    exp = layout_big.bit_length() - 1
    whole = world(f"Layout 2**{exp}", "layout", str(layout_big))
    base_ranks = 2**12
    per_rank = per_rank_configs(base_ranks) / base_ranks
    print(
        f"Layout {layout_big:,} ranks: .ranks + {whole['groups']:,} groups of 9 dims {whole['total_s']:.2f} s, "
        f"maxrss {whole['maxrss'] / GB:.2f} GB; one DistributedConfig per rank: {per_rank * 1e6:.0f} us per rank "
        f"(timed on {base_ranks:,}), {per_rank * layout_big:.0f} s at {layout_big:,}"
    )
    baseline = per_rank * layout_big
    ratio = f"per-rank configs, extrapolated: {baseline:.0f} s = {baseline / whole['total_s']:.0f}x"
    row(
        f"Layout 2**{exp}: .ranks + every dim's groups",
        f"{whole['total_s']:.2f} s",
        verdict(whole["total_s"], 5, "s"),
        ratio,
    )
    row(f"Layout 2**{exp}: peak memory", f"{whole['maxrss'] / GB:.2f} GB", verdict(whole["maxrss"] / GB, 4, "GB"))

    from fastdist_lab.runtime.capacity import FAKE_RANK_MEMORY, MIB, THREAD_RANK_MEMORY

    floor = threads64["maxrss"]  # an interpreter with torch and a small world: what every world pays once
    for label, out, size, assumed in (
        (f"threads {threads_big}", big, threads_big, THREAD_RANK_MEMORY),
        (f"fake {fake_big}", fake, fake_big, FAKE_RANK_MEMORY),
    ):
        per = (out["maxrss"] - floor) / (size - 64)
        target = f"<= {assumed / MIB:g} MiB {'OK' if per <= assumed else 'MISSED'}"
        row(
            f"memory per rank, {label} (over 64 ranks)",
            f"{per / MIB:.3f} MiB",
            target,
            "what the capacity guard assumes",
        )

    peaks["this process"] = maxrss_bytes()
    worst = max(peaks, key=lambda name: peaks[name])
    simulated = max(v for k, v in peaks.items() if k.startswith(("threads", "fake")))
    print("peak memory (maxrss) per process: " + "; ".join(f"{k} {v / GB:.2f} GB" for k, v in peaks.items()))
    row("peak memory of one simulated world", f"{simulated / GB:.2f} GB", verdict(simulated / GB, 4, "GB"))
    row(
        f"peak memory of the whole run (largest process: {worst})",
        f"{peaks[worst] / GB:.2f} GB",
        verdict(peaks[worst] / GB, 4, "GB"),
        "processes' worker processes not included",
    )
    row("issue's anchors (not re-measured)", "98 s / 48 s", "", "torch DeviceMesh + 1 all-reduce / naive gather, 1,024")

    lines = [("figure", "value", "target", "ratio / baseline"), *table]
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    print()
    for line in lines:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child_main(*sys.argv[2:])
        raise SystemExit(0)
    raise SystemExit(main())
