"""Benchmark of one real training step on a layout's groups against one process (issue 22, ``check_training``).

Every figure is measured in this run, next to a baseline measured in the same run: the one-process reference step
alone (``tiny_gpt.reference_step`` on the same model and batch), which every ``check_training`` also runs.

- 8 gloo ranks (tensor 2, pipeline 2, sequence-data 2; 8 worker processes): from a fresh interpreter, start the
  ``LocalCluster`` and run ``check_training`` once (cold: apply, the step on every rank, the reference, the
  comparison); target < 20 s. Then the same again on the running cluster (warm); target < 5 s.
- 256 threads (32 nodes x 8: tensor 4, pipeline 4, sequence-data 4, batch-data 4): start the ``SimulatedCluster``
  and run ``check_training`` (4 micro-batches); target < 120 s and peak memory (``maxrss``) < 4 GB.

Each measurement runs in a child process of its own (a fresh interpreter: its import time and ``maxrss`` are its
own; a ``LocalCluster``'s workers are not counted in ``maxrss``). Run: ``python benchmarks/bench_train_step.py
[--quick]`` (``--quick``: 64 threads instead of 256). Prints the figures, then a table: figure, value, target,
ratio to the baseline.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

GB = 1e9
MAIN = dict(world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
BIG = dict(local_world_size=8, tensor_parallel=4, pipeline_parallel=4, sequence_data_parallel=4)


def child_gloo() -> dict[str, Any]:
    """Cold: import, start 8 gloo workers, one check; warm: one more check on the running cluster."""
    begin = time.perf_counter()
    from fastdist_lab import Layout, LocalCluster
    from fastdist_lab.checks import check_training

    layout = Layout(**MAIN)
    with LocalCluster(8, backend="gloo", timeout=300, progress=False) as cluster:
        started = time.perf_counter()
        cold = check_training(cluster, layout)
        first = time.perf_counter()
        warm = check_training(cluster, layout)
        second = time.perf_counter()
    return {"cold_s": first - begin, "start_s": started - begin, "warm_s": second - first,
            "ok": cold.ok and warm.ok, "phases_cold": cold.seconds, "phases_warm": warm.seconds}  # fmt: skip


def child_threads(world_size: int) -> dict[str, Any]:
    """Start a simulated world of ``world_size`` threads and run one check; time and peak memory."""
    begin = time.perf_counter()
    from fastdist_lab import Layout, SimulatedCluster
    from fastdist_lab.checks import check_training
    from fastdist_lab.cost import Training

    layout = Layout(world_size=world_size, **BIG)
    with SimulatedCluster(world_size, local_world_size=8, progress=False) as cluster:
        check = check_training(cluster, layout, training=Training(num_microbatches=4))
    return {"total_s": time.perf_counter() - begin, "ok": check.ok, "phases": check.seconds,
            "maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}  # fmt: skip


def child_reference() -> dict[str, Any]:
    """The baseline: the one-process reference step alone, on the main layout's batch (best of 5, after a warm-up)."""
    import torch

    from fastdist_lab.checks import TinyGPT
    from fastdist_lab.checks.tiny_gpt import reference_step

    model = TinyGPT()
    weights = model.initial_weights(0)
    tokens = torch.randint(model.vocab_size, (4, model.sequence_length + 1), generator=torch.Generator().manual_seed(1))
    reference_step(model, weights, tokens, 0.1)
    times = []
    for _ in range(5):
        begin = time.perf_counter()
        reference_step(model, weights, tokens, 0.1)
        times.append(time.perf_counter() - begin)
    return {"reference_s": min(times)}


def run_child(*arguments: str) -> dict[str, Any]:
    """Run this file as a child measuring one thing; its JSON answer."""
    out = subprocess.run([sys.executable, __file__, "--child", *arguments], capture_output=True, text=True,
                         check=True, timeout=900)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    """Measure, print the figures and the table; 0 when every target is met."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 threads instead of 256")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind = args.child[0]
        value = child_gloo() if kind == "gloo" else child_reference() if kind == "reference" else None
        value = value if value is not None else child_threads(int(args.child[1]))
        print(json.dumps(value))
        return 0
    world = 64 if args.quick else 256
    baseline = run_child("reference")["reference_s"]
    gloo = run_child("gloo")
    threads = run_child("threads", str(world))
    print(f"baseline, the one-process reference step alone: {baseline * 1e3:.1f} ms")
    print(f"8 gloo ranks: cold {gloo['cold_s']:.1f} s (of which start {gloo['start_s']:.1f} s), warm "
          f"{gloo['warm_s']:.2f} s; phases cold {gloo['phases_cold']}, warm {gloo['phases_warm']}")  # fmt: skip
    print(f"{world} threads: {threads['total_s']:.1f} s, peak {threads['maxrss_bytes'] / GB:.2f} GB; "
          f"phases {threads['phases']}")  # fmt: skip
    rows = [
        ("8 gloo ranks, cold (start + step + reference)", gloo["cold_s"], 20.0, gloo["ok"]),
        ("8 gloo ranks, warm", gloo["warm_s"], 5.0, gloo["ok"]),
        (f"{world} threads (start + step + reference)", threads["total_s"], 120.0, threads["ok"]),
    ]
    print(f"\n{'figure':<48} {'value':>10} {'target':>10} {'ratio/baseline':>15}  ok")
    met = True
    for name, value, target, ok in rows:
        met &= ok and value < target
        print(f"{name:<48} {value:>9.2f}s {target:>9.0f}s {value / baseline:>15.0f}  {ok and value < target}")
    peak = threads["maxrss_bytes"] / GB
    met &= peak < 4.0
    print(f"{f'{world} threads, peak memory (maxrss)':<48} {peak:>8.2f}GB {4:>8}GB {'':>15}  {peak < 4.0}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
