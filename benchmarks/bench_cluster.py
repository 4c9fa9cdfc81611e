"""Benchmark of ``LocalCluster``: cold start, warm re-apply and group creation per dim, in one run.

Baseline, measured in the same run: ``torch.multiprocessing.spawn`` of the same number of workers, each
importing torch and meeting the others in one gloo group (``init_process_group`` + a barrier all-reduce);
"ready" is when every worker has reported from inside the group. Targets (issue 3): the cluster's cold start
at most half the baseline's; a warm re-apply of a new layout under 2 s for 8 ranks.

Run: ``python benchmarks/bench_cluster.py [--world-size 8] [--repeat 3]``. Prints the figures and the ratios.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time


def dim_seconds(verification: object, column: str) -> dict[str, float]:
    """Per dim: the slowest group's ``seconds`` (creation plus checks) or ``create_seconds``."""
    out: dict[str, float] = {}
    for row in verification.rows:  # type: ignore[attr-defined]
        out[row["dim"]] = max(out.get(row["dim"], 0.0), float(row.get(column, 0.0)))
    return out


def _baseline_worker(rank: int, world_size: int, port: int, ready: object, release: object) -> None:
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
    ready.put((rank, time.monotonic()))  # type: ignore[attr-defined]
    release.wait()  # type: ignore[attr-defined]
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def baseline_start(world_size: int) -> float:
    """Seconds from ``torch.multiprocessing.spawn`` until every worker is inside one gloo group."""
    import torch.multiprocessing as tmp

    context = tmp.get_context("spawn")
    ready, release = context.Queue(), context.Event()
    begin = time.monotonic()
    processes = tmp.spawn(
        _baseline_worker,
        args=(world_size, _free_port(), ready, release),
        nprocs=world_size,
        join=False,
    )
    for _ in range(world_size):
        ready.get(timeout=300)
    seconds = time.monotonic() - begin
    release.set()
    processes.join()
    return seconds


def cluster_start(world_size: int) -> tuple[float, object]:
    """Seconds from ``LocalCluster(...)`` until every rank is ready (the cluster is returned running)."""
    from fastdist_lab import LocalCluster

    begin = time.monotonic()
    cluster = LocalCluster(world_size, backend="gloo", progress=False, timeout=300)
    return time.monotonic() - begin, cluster


def main() -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    world = args.world_size

    import torch  # both contenders start from a controller that has torch imported

    from fastdist_lab import Layout

    print(f"torch {torch.__version__}; world_size={world}; repeat={args.repeat}; gloo over loopback")
    baseline, cold = [], []
    for _ in range(args.repeat):  # interleaved, so both see the same machine load
        baseline.append(baseline_start(world))
        seconds, cluster = cluster_start(world)
        cold.append(seconds)
        cluster.close()  # type: ignore[attr-defined]
    base, mine = statistics.median(baseline), statistics.median(cold)
    print(f"cold start to ready, median of {args.repeat}:")
    print(f"  torch.multiprocessing.spawn + gloo group: {base:6.2f} s  ({', '.join(f'{s:.2f}' for s in baseline)})")
    print(f"  LocalCluster:                             {mine:6.2f} s  ({', '.join(f'{s:.2f}' for s in cold)})")
    print(f"  ratio LocalCluster / baseline = {mine / base:.2f}  (target <= 0.50)")

    def layout(**factors: object) -> Layout:
        return Layout(world_size=world, local_world_size=world, **factors)  # type: ignore[arg-type]

    first = layout(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2 if world % 8 == 0 else 1)
    second = layout(
        tensor_parallel=2,
        pipeline_parallel=2,
        sequence_data_parallel=2 if world % 8 == 0 else 1,
        pipeline_first=True,
    )
    _, cluster = cluster_start(world)
    try:
        begin = time.monotonic()
        verification = cluster.apply(first)  # type: ignore[attr-defined]
        first_apply = time.monotonic() - begin
        assert verification.ok, verification
        reapply = []
        third = layout(tensor_parallel=2, pipeline_parallel=4 if world % 8 == 0 else 1)
        for name, target in (("pipeline-first", second), ("tp2-pp4", third), ("first again", first)):
            begin = time.monotonic()
            result = cluster.apply(target)  # type: ignore[attr-defined]
            seconds = time.monotonic() - begin
            assert result.ok, result
            created = len({tuple(row["members"]) for row in result.rows if row["created"]})
            reapply.append((name, seconds, created))
        print(f"first apply (every group new): {first_apply:.2f} s")
        print("warm re-apply (same workers), target < 2 s for a new layout:")
        for name, seconds, created in reapply:
            print(f"  {name:<15} {seconds:.2f} s  ({created} groups newly created, the rest reused from the pool)")
        print("group creation per dim on the first apply (slowest group, seconds):")
        create = dim_seconds(verification, "create_seconds")
        total = dim_seconds(verification, "seconds")
        for dim in first.dim_names:
            size = int(first.groups(dim).shape[1])
            print(f"  {dim:<26} size {size:>3}: create {create[dim]:.4f}  create+check {total[dim]:.4f}")
    finally:
        cluster.close()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
