"""Benchmark: a whole-world Layout (ranks table + all 9 dims' groups) against one DistributedConfig per rank.

Target (issue 2): 2**20 ranks with every dim in under 0.5 s, and at least 100x faster per rank than building
one ``DistributedConfig`` per rank and reading its ``distributed_dims`` (measured here at 2**14 ranks).

Target (issue 28): the same whole-world build at 2**20 ranks with experts (``expert_parallel`` 8 and 16,
``expert_tensor_parallel`` 1 and None) -- the ranks table, the nine dense dims' groups and the four expert dims'
groups -- in under 0.5 s, printed next to the dense figure of the same run with the ratio expert / dense.
Measured here on 2026-12-02, 2 busy cores: dense 57 ms, with experts 88-116 ms (1.5x-2.0x the dense build).

Run: python benchmarks/bench_layout.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import time

from fastdist_lab import DistributedConfig, Layout
from fastdist_lab.config import DIM_NAMES

FACTORS = dict(local_world_size=8, tensor_parallel=8, pipeline_parallel=16, sequence_data_parallel=4)
EXPERT_CASES: tuple[tuple[int, int | None], ...] = ((8, 1), (8, None), (16, 1), (16, None))
"""(expert_parallel, expert_tensor_parallel) of the expert cases (ETP None: the tensor size, 8)."""


def whole_world(world_size: int) -> float:
    """Seconds to build a Layout and materialise .ranks and every dim's groups."""
    start = time.perf_counter()
    layout = Layout(world_size=world_size, **FACTORS)
    _ = layout.ranks
    for name in DIM_NAMES:
        layout.groups(name)
    return time.perf_counter() - start


def whole_world_experts(world_size: int, expert_parallel: int, expert_tensor_parallel: int | None) -> float:
    """Seconds to build a Layout with experts and materialise .ranks and every dense and expert dim's groups."""
    start = time.perf_counter()
    layout = Layout(
        world_size=world_size, expert_parallel=expert_parallel, expert_tensor_parallel=expert_tensor_parallel, **FACTORS
    )
    _ = layout.ranks
    assert len(layout.group_dims) == len(DIM_NAMES) + 4, layout.group_dims  # the four expert dims are built too
    for name in layout.group_dims:
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
    whole_world_experts(small, *EXPERT_CASES[0])  # warm-up of the expert path
    experts_big = {case: [whole_world_experts(big, *case) for _ in range(args.repeat)] for case in EXPERT_CASES}

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
    for (ep, etp), times in experts_big.items():
        med = statistics.median(times)
        print(
            f"Layout with experts (EP {ep}, ETP {etp}), {big} ranks, .ranks + 9 dense + 4 expert dims' groups: "
            f"median {med * 1e3:.1f} ms (min {min(times) * 1e3:.1f}); dense {med_big * 1e3:.1f} ms, ratio "
            f"expert / dense {med / med_big:.2f}x; target < 500 ms: {'OK' if med < 0.5 else 'MISSED'}"
        )


if __name__ == "__main__":
    main()
