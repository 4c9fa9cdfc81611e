"""Benchmark of one real training step on a layout's groups against one process (issue 22, ``check_training``).

Every figure is measured in this run, next to a baseline measured in the same run: the one-process reference step
alone (``tiny_gpt.reference_step`` on the same model and batch), which every ``check_training`` also runs.

- 8 gloo ranks (tensor 2, pipeline 2, sequence-data 2; 8 worker processes): from a fresh interpreter, start the
  ``LocalCluster`` and run ``check_training`` once (cold: apply, the step on every rank, the reference, the
  comparison); target < 20 s. Then the same again on the running cluster (warm); target < 5 s.
- 256 threads (32 nodes x 8: tensor 4, pipeline 4, sequence-data 4, batch-data 4): start the ``SimulatedCluster``
  and run ``check_training`` (4 micro-batches); target < 120 s and peak memory (``maxrss``) < 4 GB.

- With ``--moe`` (issue 28), the same on expert layouts (the model's MLPs become mixtures of experts,
  ``checks.moe_layer``), each next to the dense figure of the same run (ratio MoE / dense): 8 gloo ranks in one
  fresh interpreter, the cases of ``tests/checks/test_train_moe.py`` (EP 2 and 4, ETP 1 and the tensor size, one
  with 2 pipeline stages): cold (start + the first case's first check; target < 20 s), warm (its second check on
  the same cluster; target < 5 s), then each other case's first check (a new layout applied on the running
  cluster) and second (warm; target < 5 s); and 256 threads on the dense 256-thread layout with expert parallel 4
  (target < 120 s, peak memory < 4 GB).

Each measurement runs in a child process of its own (a fresh interpreter: its import time and ``maxrss`` are its
own; a ``LocalCluster``'s workers are not counted in ``maxrss``). Run: ``python benchmarks/bench_train_step.py
[--quick] [--moe]`` (``--quick``: 64 threads instead of 256; ``--moe``: the MoE cases too). Prints the figures, then
a table: figure, value, target, ratio to the baseline (and, for MoE, to the dense figure).

Measured here on 2026-12-02, 2 busy cores (``--moe``): baseline 22 ms; dense 8 gloo ranks cold 14.3 s (start 9.0 s),
warm 1.00 s, 256 threads 27.3 s (0.62 GB); MoE 8 gloo ranks cold 14.9 s (1.04x dense), warm 1.36-2.08 s (1.35x-2.07x
dense; EP 4 the slowest), a new expert layout's first check on the running cluster 1.5-2.6 s, 256 threads with EP 4
47.3 s (1.73x dense, 0.73 GB). Every target met.
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
MOE_CASES: dict[str, dict[str, int]] = {
    "ep2-etp1-tp2": dict(tensor_parallel=2, expert_parallel=2, expert_tensor_parallel=1),
    "ep4-etp2-tp2": dict(tensor_parallel=2, expert_parallel=4, expert_tensor_parallel=2),
    "ep4-etp1": dict(expert_parallel=4, expert_tensor_parallel=1),
    "ep2-etp2-tp2-pp2": dict(tensor_parallel=2, pipeline_parallel=2, expert_parallel=2, expert_tensor_parallel=2),
}
"""The 8-rank expert layouts (those of ``tests/checks/test_train_moe.py``); the first is the cold one."""
BIG_MOE = dict(BIG, expert_parallel=4)
"""The 256-thread layout with experts: the dense one, expert parallel 4 (ETP the tensor size, 4; EDP 4)."""


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


def child_gloo_moe() -> dict[str, Any]:
    """Cold: import, start 8 gloo workers, the first MoE case's check; then every case's first and second check."""
    begin = time.perf_counter()
    from fastdist_lab import Layout, LocalCluster
    from fastdist_lab.checks import check_training

    cases: dict[str, dict[str, Any]] = {}
    with LocalCluster(8, backend="gloo", timeout=300, progress=False) as cluster:
        started = time.perf_counter()
        for name, sizes in MOE_CASES.items():
            layout = Layout(world_size=8, backend="gloo", **sizes)
            first_begin = time.perf_counter()
            first = check_training(cluster, layout)
            first_end = time.perf_counter()
            second = check_training(cluster, layout)
            cases[name] = {"first_s": first_end - first_begin, "warm_s": time.perf_counter() - first_end,
                           "ok": first.ok and second.ok, "phases_warm": second.seconds}  # fmt: skip
    cold = next(iter(cases))
    return {"cold_s": started - begin + cases[cold]["first_s"], "start_s": started - begin, "cases": cases}


def child_threads(world_size: int, moe: bool = False) -> dict[str, Any]:
    """Start a simulated world of ``world_size`` threads and run one check (on the expert layout with ``moe``);
    time and peak memory."""
    begin = time.perf_counter()
    from fastdist_lab import Layout, SimulatedCluster
    from fastdist_lab.checks import check_training
    from fastdist_lab.cost import Training

    layout = Layout(world_size=world_size, **(BIG_MOE if moe else BIG))
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
    parser.add_argument("--moe", action="store_true", help="the expert layouts too, against the dense figures")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind = args.child[0]
        children = {"gloo": child_gloo, "gloo-moe": child_gloo_moe, "reference": child_reference}
        value = children[kind]() if kind in children else child_threads(int(args.child[1]), kind == "threads-moe")
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
    if args.moe:
        met &= moe_figures(world, baseline, gloo, threads)
    return 0 if met else 1


def moe_figures(world: int, baseline: float, gloo: dict[str, Any], threads: dict[str, Any]) -> bool:
    """Measure the expert layouts, print them and their table against the dense figures; whether all are met."""
    moe = run_child("gloo-moe")
    moe_threads = run_child("threads-moe", str(world))
    cases = moe["cases"]
    cold = next(iter(cases))
    print(f"\nMoE, 8 gloo ranks: cold {moe['cold_s']:.1f} s (of which start {moe['start_s']:.1f} s; {cold})")
    for name, case in cases.items():
        print(f"  {name}: first check {case['first_s']:.2f} s, warm {case['warm_s']:.2f} s; "
              f"phases warm {case['phases_warm']}")  # fmt: skip
    print(f"MoE, {world} threads (EP 4): {moe_threads['total_s']:.1f} s, peak "
          f"{moe_threads['maxrss_bytes'] / GB:.2f} GB; phases {moe_threads['phases']}")  # fmt: skip
    rows = [(f"MoE 8 gloo ranks, cold ({cold})", moe["cold_s"], 20.0, cases[cold]["ok"], gloo["cold_s"])]
    for name, case in cases.items():
        rows.append((f"MoE 8 gloo ranks, warm ({name})", case["warm_s"], 5.0, case["ok"], gloo["warm_s"]))
    rows.append((f"MoE {world} threads, EP 4", moe_threads["total_s"], 120.0, moe_threads["ok"], threads["total_s"]))
    print(f"\n{'figure':<48} {'value':>10} {'target':>10} {'ratio/baseline':>15} {'MoE/dense':>10}  ok")
    met = True
    for name, value, target, ok, dense in rows:
        met &= ok and value < target
        print(f"{name:<48} {value:>9.2f}s {target:>9.0f}s {value / baseline:>15.0f} {value / dense:>9.2f}x  "
              f"{ok and value < target}")  # fmt: skip
    peak = moe_threads["maxrss_bytes"] / GB
    print(f"{f'MoE {world} threads, peak memory (maxrss)':<48} {peak:>8.2f}GB {4:>8}GB {'':>15} "
          f"{peak / (threads['maxrss_bytes'] / GB):>9.2f}x  {peak < 4.0}")  # fmt: skip
    return met and peak < 4.0


if __name__ == "__main__":
    sys.exit(main())
