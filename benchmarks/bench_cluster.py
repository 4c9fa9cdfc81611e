"""Benchmark of ``LocalCluster``: cold start to a first all-reduce, *Start* on a prewarmed server, warm re-apply,
and start-up plus apply at 64 to 256 ranks, in one run.

Baselines, measured in the same run and interleaved with the cluster (so both see the same machine load):

- ``torch.multiprocessing.spawn`` of the same number of workers, each importing torch and meeting the others in one
  gloo group (``init_process_group`` + an all-reduce): "ready" is when every worker has the all-reduce's result;
- the cluster's own cold path (a fresh worker server importing torch) against a server started ahead of need
  (``LocalCluster.prewarm()``, which ``lab()`` calls when it opens).

Issue 23's figures (measured on the same 2-core machine, medians of 2) are printed beside ours: cold start
``LocalCluster`` 1.57 / 1.18 / 1.27 s at 4 / 8 / 16 ranks (0.89 / 0.91 / 0.97 s a round earlier), ``spawn`` 2.75 /
5.64 / 13.46 s; apply of a tp2 pp2 sdp2 layout 3.23 / 10.77 / 44.2 s at 64 / 128 / 256 ranks (1.67 / 5.92 / 26.5 s a
round earlier), start-up at 256 ranks 14.35 s (12.28 s). Targets: cold start under 1 s at 4 / 8 / 16 ranks; *Start* on
8 prewarmed ranks under 0.5 s; apply at 256 ranks at most 26.5 s; a warm re-apply of a new layout under 2 s at 8.

Run: ``python benchmarks/bench_cluster.py [--cold 4,8,16] [--worlds 64,128,256] [--repeat 2]`` (``--worlds ""``
skips the big worlds, which need several GB of memory and minutes). Prints the figures and the ratios.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from typing import Any

ISSUE_COLD = {4: 1.57, 8: 1.18, 16: 1.27}
EARLIER_COLD = {4: 0.89, 8: 0.91, 16: 0.97}
ISSUE_SPAWN = {4: 2.75, 8: 5.64, 16: 13.46}
ISSUE_APPLY = {64: 3.23, 128: 10.77, 256: 44.2}
EARLIER_APPLY = {64: 1.67, 128: 5.92, 256: 26.5}
ISSUE_START_256, EARLIER_START_256 = 14.35, 12.28


def dim_seconds(verification: Any, column: str) -> dict[str, float]:
    """Per dim: the slowest group's ``seconds`` (creation plus checks) or ``create_seconds``."""
    out: dict[str, float] = {}
    for row in verification.rows:
        out[row["dim"]] = max(out.get(row["dim"], 0.0), float(row.get(column, 0.0)))
    return out


def _baseline_worker(rank: int, world_size: int, port: int, ready: Any, release: Any) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=120),
    )
    value = torch.ones(1)
    dist.all_reduce(value)
    ready.put((rank, time.monotonic()))
    release.wait()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def baseline_start(world_size: int) -> float:
    """Seconds from ``torch.multiprocessing.spawn`` until every worker has a gloo all-reduce's result."""
    import torch.multiprocessing as tmp

    context = tmp.get_context("spawn")
    ready, release = context.Queue(), context.Event()
    begin = time.monotonic()
    processes = tmp.spawn(
        _baseline_worker, args=(world_size, _free_port(), ready, release), nprocs=world_size, join=False
    )
    for _ in range(world_size):
        ready.get(timeout=300)
    seconds = time.monotonic() - begin
    release.set()
    processes.join()
    return seconds


def _all_reduce(ctx: Any) -> float:
    """A gloo all-reduce on the group of every rank (created from the rank's pool); returns the sum."""
    import torch

    group = ctx.pool.get_process_group(range(ctx.world_size), ctx.rank)
    value = torch.ones(1)
    group.allreduce([value]).wait()
    return float(value.item())


def cluster_cold(world_size: int, prewarmed: bool) -> float:
    """Seconds from ``LocalCluster(...)`` to a first all-reduce's result on every rank (the cluster is closed)."""
    from fastdist_lab import LocalCluster
    from fastdist_lab.runtime import supervisor

    if prewarmed:
        LocalCluster.prewarm()
        supervisor._spare.wait_ready(120)  # type: ignore[union-attr] - the server has had its time to import torch
    begin = time.monotonic()
    with LocalCluster(world_size, backend="gloo", progress=False, timeout=300) as cluster:
        assert cluster.run(_all_reduce).values == [float(world_size)] * world_size
        return time.monotonic() - begin


def panel_start(world_size: int) -> tuple[float, float]:
    """Seconds of the lab's *Start* on a prewarmed server: the cluster alone, and with the layout applied."""
    from fastdist_lab import Layout, LocalCluster
    from fastdist_lab.runtime import supervisor
    from fastdist_lab.widgets import ClusterPanel

    layout = Layout(world_size=world_size, local_world_size=world_size, tensor_parallel=2, pipeline_parallel=2)
    LocalCluster.prewarm()
    supervisor._spare.wait_ready(120)  # type: ignore[union-attr]
    panel = ClusterPanel(layout, backend="gloo", apply_on_start=False)
    begin = time.monotonic()
    assert panel.start(), panel.message
    started = time.monotonic() - begin
    assert panel.apply(), panel.message
    applied = time.monotonic() - begin
    panel.stop()
    return started, applied


def torch_import() -> float:
    """Seconds from starting a fresh interpreter until it has imported torch (not until it exits: torch's teardown
    is slow): the floor under any cold start of a worker server."""
    import subprocess
    import sys

    begin = time.monotonic()
    child = subprocess.Popen([sys.executable, "-c", "import torch; print(flush=True)"], stdout=subprocess.PIPE)
    assert child.stdout is not None
    child.stdout.readline()
    seconds = time.monotonic() - begin
    child.wait()
    return seconds


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} s  ({', '.join(f'{v:.2f}' for v in values)})"


def cold_figures(sizes: list[int], repeat: int) -> None:
    """Cold start to a first all-reduce at each size: spawn, the cold cluster, the prewarmed one (interleaved)."""
    print("cold start to a first gloo all-reduce (controller with torch imported), interleaved:")
    for size in sizes:
        spawn, cold, warm, floor = [], [], [], []
        for _ in range(repeat):
            spawn.append(baseline_start(size))
            floor.append(torch_import())
            cold.append(cluster_cold(size, prewarmed=False))
            warm.append(cluster_cold(size, prewarmed=True))
        base, mine, ready = (statistics.median(x) for x in (spawn, cold, warm))
        print(f"  {size:>3} ranks  spawn + gloo group {_median(spawn)}   issue: {ISSUE_SPAWN.get(size, '-')}")
        print(f"             import torch alone {_median(floor)}   (the floor of a cold start)")
        print(f"             LocalCluster, cold {_median(cold)}   issue: {ISSUE_COLD.get(size, '-')} "
              f"(a round earlier {EARLIER_COLD.get(size, '-')}); target < 1 s")  # fmt: skip
        print(f"             after prewarm()    {_median(warm)}")
        print(f"             ratios: cold / spawn = {mine / base:.2f}, prewarmed / cold = {ready / mine:.2f}, "
              f"cold / issue = {mine / ISSUE_COLD.get(size, mine):.2f}; cold - import torch = "
              f"{mine - statistics.median(floor):.2f} s")  # fmt: skip


def reapply_figures(world: int) -> None:
    """First apply, warm re-applies of new layouts, and group creation per dim, at ``world`` ranks."""
    from fastdist_lab import Layout, LocalCluster
    from fastdist_lab.checks import verify_groups

    def layout(**factors: object) -> Layout:
        return Layout(world_size=world, local_world_size=world, **factors)  # type: ignore[arg-type]

    sdp = 2 if world % 8 == 0 else 1
    first = layout(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=sdp)
    second = layout(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=sdp, pipeline_first=True)
    third = layout(tensor_parallel=2, pipeline_parallel=4 if world % 8 == 0 else 1)
    with LocalCluster(world, backend="gloo", progress=False, timeout=300) as cluster:
        begin = time.monotonic()
        verification = verify_groups(cluster, first)
        first_apply = time.monotonic() - begin
        assert verification.ok, verification
        print(f"first apply at {world} ranks (every group new): {first_apply:.2f} s")
        print("warm re-apply (same workers), target < 2 s for a new layout:")
        for name, target in (("pipeline-first", second), ("tp2-pp4", third), ("first again", first)):
            begin = time.monotonic()
            result = verify_groups(cluster, target)
            seconds = time.monotonic() - begin
            assert result.ok, result
            created = len({tuple(row["members"]) for row in result.rows if row["created"]})
            print(f"  {name:<15} {seconds:.2f} s  ({created} groups newly created, the rest reused from the pool)")
        create, total = dim_seconds(verification, "create_seconds"), dim_seconds(verification, "seconds")
        print("group creation per dim on the first apply (slowest group, seconds):")
        for dim in first.dim_names:
            size = int(first.groups(dim).shape[1])
            print(f"  {dim:<26} size {size:>3}: create {create[dim]:.4f}  create+check {total[dim]:.4f}")


def scale_figures(worlds: list[int]) -> None:
    """Start-up and the apply of a tp2 pp2 sdp2 layout (8 ranks per node) at each world size."""
    from fastdist_lab import Layout, LocalCluster
    from fastdist_lab.checks import verify_groups

    print("start-up and apply of tp2 pp2 sdp2 (8 ranks per node):")
    for world in worlds:
        layout = Layout(world_size=world, local_world_size=8, tensor_parallel=2, pipeline_parallel=2,
                        sequence_data_parallel=2)  # fmt: skip
        begin = time.monotonic()
        with LocalCluster(world, backend="gloo", local_world_size=8, progress=False, timeout=600) as cluster:
            start = time.monotonic() - begin
            begin = time.monotonic()
            verification = verify_groups(cluster, layout)
            apply = time.monotonic() - begin
            assert verification.ok, verification
        issue, earlier = ISSUE_APPLY.get(world), EARLIER_APPLY.get(world)
        line = f"  {world:>4} ranks: start {start:6.2f} s, apply {apply:6.2f} s"
        if issue is not None and earlier is not None:
            line += f"   issue: apply {issue} s (a round earlier {earlier} s); apply / earlier = {apply / earlier:.2f}"
        if world == 256:
            line += f"; start / issue's {ISSUE_START_256} s = {start / ISSUE_START_256:.2f}"
        print(line, flush=True)


def main() -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", default="4,8,16", help="world sizes of the cold-start figures")
    parser.add_argument("--worlds", default="64,128,256", help="world sizes of the start-up and apply figures")
    parser.add_argument("--world-size", type=int, default=8, help="world size of Start and the warm re-apply")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    import torch  # every contender starts from a controller that has torch imported

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}; {os.cpu_count()} CPUs, load average {load:.1f}; gloo over loopback")
    cold_figures([int(n) for n in args.cold.split(",") if n], args.repeat)
    starts = [panel_start(args.world_size) for _ in range(args.repeat)]
    print(f"Start in the lab on a prewarmed server, {args.world_size} ranks (target < 0.5 s):")
    print(f"  the cluster {_median([s for s, _ in starts])}, with the layout applied {_median([a for _, a in starts])}")
    reapply_figures(args.world_size)
    scale_figures([int(n) for n in args.worlds.split(",") if n])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
