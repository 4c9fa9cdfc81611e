"""Benchmark: ``estimate`` for a sweep of 1,000 layouts of a 70B model (issue 12).

Target: the whole sweep (build each ``Layout``, ``estimate`` it, read the peak memory and the bus bytes)
in under 1 s. Baseline, measured in the same run on every 20th layout of the sweep: the per-rank way,
building each rank's ``DistributedConfig`` and reading its dims' ``global_ranks`` to find group sizes and the
nodes each group spans (what a tool without the whole-world ``Layout`` does), then the same formulas.

Figures still to come here with the later phase: the Cost panel's redraw at 256 ranks (< 200 ms) and
``replay`` on 8 gloo ranks (< 10 s); each gets its own function in ``FIGURES``.

Run: python benchmarks/bench_cost.py [--repeat N]
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections.abc import Callable

from fastdist_lab import Layout
from fastdist_lab.cost import Training, Transformer, estimate

MODEL = Transformer.preset("llama2-70b")
TRAINING = Training(num_microbatches=32, distributed_optimizer=True, sequence_tensor_parallel=True,
                    recompute="selective")  # fmt: skip
SWEEP = 1000


def sweep_layouts(count: int = SWEEP, seed: int = 0) -> list[dict]:
    """``count`` layout field sets for the 70B model: tp 1-8, pp 1-20, sdp 1-8, bdp 1-32, both orders, 8 per node."""
    combos = [
        dict(world_size=tp * pp * sdp * bdp, local_world_size=8 if tp * pp * sdp * bdp >= 8 else tp * pp * sdp * bdp,
             tensor_parallel=tp, pipeline_parallel=pp, sequence_data_parallel=sdp, pipeline_first=first)
        for tp, pp, sdp, bdp, first in itertools.product(
            (1, 2, 4, 8), (1, 2, 4, 5, 8, 10, 16, 20), (1, 2, 4, 8), (1, 2, 4, 8, 16, 32), (False, True)
        )
        if (tp * pp * sdp * bdp) % 8 == 0 or tp * pp * sdp * bdp < 8
    ]  # fmt: skip
    random.Random(seed).shuffle(combos)
    return combos[:count]


def ours(fields: list[dict]) -> tuple[float, list[tuple[int, float]]]:
    """Seconds to build each Layout, estimate it and read its peak bytes and total bus bytes."""
    start = time.perf_counter()
    out = []
    for f in fields:
        report = estimate(Layout(**f), MODEL, TRAINING)
        out.append((report.peak_bytes, sum(r.calls_per_step * r.bytes_per_call for r in report.rows)))
    return time.perf_counter() - start, out


def with_tables(fields: list[dict]) -> float:
    """Seconds for the same sweep when every report also builds its pandas tables and time per dim."""
    start = time.perf_counter()
    for f in fields:
        report = estimate(Layout(**f), MODEL, TRAINING)
        _ = report.most_loaded, report.communication, report.time("dgx-h100")
    return time.perf_counter() - start


def per_rank(fields: list[dict]) -> float:
    """Seconds for the baseline: each rank's DistributedConfig gives its groups and their node spans."""
    start = time.perf_counter()
    for f in fields:
        layout = Layout(**f)
        spans: dict[str, int] = {}
        for rank in range(layout.world_size):
            dims = layout.config(rank).distributed_dims
            for name in ("tensor", "sequence_data", "pipeline", "data"):
                nodes = {member // layout.local_world_size for member in dims[name].global_ranks}
                spans[name] = max(spans.get(name, 1), len(nodes))
        report = estimate(layout, MODEL, TRAINING)
        for row in report.communication.itertuples(index=False):  # the same answer, checked
            if row.collective != "all_reduce" or row.dim != "pipeline":
                assert spans[row.dim] == row.nodes_spanned, (f, row)
    return time.perf_counter() - start


def sweep_figure(repeat: int) -> None:
    """The 1,000-layout sweep against the per-rank baseline."""
    fields = sweep_layouts()
    ours(fields[:50])  # warm-up (imports, caches)
    runs = [ours(fields)[0] for _ in range(repeat)]
    tables = [with_tables(fields) for _ in range(max(1, repeat // 2))]
    sample = fields[::20]
    sample_ours = statistics.median(ours(sample)[0] for _ in range(repeat))
    sample_base = per_rank(sample)
    ranks = sum(f["world_size"] for f in fields)
    median = statistics.median(runs)
    print(
        f"estimate, {len(fields)} layouts of llama2-70b ({ranks} ranks in all, up to "
        f"{max(f['world_size'] for f in fields)} per layout): median {median * 1e3:.0f} ms "
        f"(min {min(runs) * 1e3:.0f}, max {max(runs) * 1e3:.0f}); target < 1000 ms: "
        f"{'OK' if median < 1 else 'MISSED'}"
    )
    print(f"  with pandas tables and time per dim for every layout: median {statistics.median(tables) * 1e3:.0f} ms")
    print(
        f"baseline (per-rank DistributedConfig dims, then the same formulas) on {len(sample)} of those layouts: "
        f"{sample_base * 1e3:.0f} ms vs ours {sample_ours * 1e3:.1f} ms: ratio {sample_base / sample_ours:.0f}x "
        f"(the whole sweep would take ~{sample_base / len(sample) * len(fields):.0f} s)"
    )


FIGURES: list[Callable[[int], None]] = [sweep_figure]
"""One function per performance target of issue 12 (panel and replay figures join in the later phase)."""


def main() -> None:
    """Print every figure and its ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for figure in FIGURES:
        figure(args.repeat)


if __name__ == "__main__":
    main()
