"""Benchmark: a whole-world Layout (ranks table + all 9 dims' groups) against one DistributedConfig per rank.

Target (issue 2): 2**20 ranks with every dim in under 0.5 s, and at least 100x faster per rank than building
one ``DistributedConfig`` per rank and reading its ``distributed_dims`` (measured here at 2**14 ranks).

Run: python benchmarks/bench_layout.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import time

from fastdist_lab import DistributedConfig, Layout
from fastdist_lab.config import DIM_NAMES

FACTORS = dict(local_world_size=8, tensor_parallel=8, pipeline_parallel=16, sequence_data_parallel=4)


def whole_world(world_size: int) -> float:
    """Seconds to build a Layout and materialise .ranks and every dim's groups."""
    start = time.perf_counter()
    layout = Layout(world_size=world_size, **FACTORS)
    _ = layout.ranks
    for name in DIM_NAMES:
        layout.groups(name)
    return time.perf_counter() - start


def per_rank_loop(world_size: int) -> float:
    """Seconds to build one DistributedConfig per rank and read every dim (the baseline)."""
    start = time.perf_counter()
    for rank in range(world_size):
        config = DistributedConfig(world_size=world_size, rank=rank, **FACTORS)
        for dim in config.distributed_dims.values():
            _ = dim.global_ranks
    return time.perf_counter() - start


def main() -> None:
    """Print the figures and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    big, small = 2**20, 2**14
    whole_world(small)  # warm-up: lazy imports (pandas) are not part of the figure
    layout_big = [whole_world(big) for _ in range(args.repeat)]
    layout_small = [whole_world(small) for _ in range(args.repeat)]
    baseline_small = [per_rank_loop(small) for _ in range(max(1, args.repeat // 2))]

    med_big = statistics.median(layout_big)
    med_small = statistics.median(layout_small)
    med_base = statistics.median(baseline_small)
    per_rank_layout = med_big / big
    per_rank_base = med_base / small
    print(
        f"Layout, {big} ranks, .ranks + 9 dims' groups: median {med_big * 1e3:.1f} ms "
        f"(min {min(layout_big) * 1e3:.1f}, max {max(layout_big) * 1e3:.1f}); target < 500 ms: "
        f"{'OK' if med_big < 0.5 else 'MISSED'}"
    )
    print(f"Layout, {small} ranks: median {med_small * 1e3:.2f} ms")
    print(
        f"baseline: one DistributedConfig per rank, {small} ranks: median {med_base * 1e3:.0f} ms "
        f"({per_rank_base * 1e6:.1f} us per rank; {big} ranks would take ~{per_rank_base * big:.1f} s)"
    )
    print(f"ratio per rank (baseline / Layout at {big}): {per_rank_base / per_rank_layout:.0f}x (target >= 100x)")
    print(f"ratio at equal size ({small} ranks, baseline / Layout): {med_base / med_small:.0f}x")


if __name__ == "__main__":
    main()
