"""Benchmark: predict and check every generator stream of 2**16 ranks, against a naive per-rank loop.

Target (issue 4): 2**16 ranks predicted and checked in well under 5 s. Baseline, measured in the same run on a
smaller world (2**12 ranks by default, the whole world, not extrapolated from a subset of it): for every rank,
``generator_seeds(layout.config(rank), step, phase)`` and, for each of its 5 generators, a fresh
``torch.Generator`` seeded and drawn from -- the obvious way, without sharing work between ranks. The baseline
does no checking at all, so the ratio below (baseline predict per rank / ours predict+check per rank) is
conservative for us.

Run: python benchmarks/bench_streams.py [--repeat N] [--baseline-world 4096]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from fastdist_lab import Layout
from fastdist_lab.seeds import GENERATORS, generator_seeds
from fastdist_lab.streams import predict

LAYOUTS = {
    "tp=8 pp=4 sdp=2": dict(local_world_size=8, tensor_parallel=8, pipeline_parallel=4, sequence_data_parallel=2),
    "tp=1 pp=1 (most distinct streams)": dict(local_world_size=8, tensor_parallel=1, pipeline_parallel=1),
}
DRAWS = 4


def ours(world_size: int, factors: dict) -> tuple[float, float, bool]:
    """Seconds to predict and to check every stream of a world; whether every check passed."""
    layout = Layout(world_size=world_size, **factors)
    begin = time.perf_counter()
    report = predict(layout, 3, "training", DRAWS)
    middle = time.perf_counter()
    ok = bool(report.check()["ok"].all())
    return middle - begin, time.perf_counter() - middle, ok


def naive(world_size: int, factors: dict) -> float:
    """Seconds for the per-rank baseline: one config, one seed dict and five fresh generators per rank."""
    layout = Layout(world_size=world_size, **factors)
    begin = time.perf_counter()
    values = []
    for rank in range(world_size):
        seeds = generator_seeds(layout.config(rank), 3, "training")
        for name in GENERATORS:
            generator = torch.Generator(device="cpu")
            generator.manual_seed(seeds[name])
            values.append(torch.rand(DRAWS, dtype=torch.float64, generator=generator))
    return time.perf_counter() - begin


def main() -> None:
    """Print the figures and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline-world", type=int, default=2**12)
    args = parser.parse_args()
    big, small = 2**16, args.baseline_world
    torch.set_num_threads(1)
    ours(64, LAYOUTS["tp=8 pp=4 sdp=2"])  # warm-up: lazy imports are not part of the figure

    for label, factors in LAYOUTS.items():
        runs = [ours(big, factors) for _ in range(args.repeat)]
        total = [p + c for p, c, _ in runs]
        best = min(range(len(runs)), key=lambda i: total[i])
        pred, check, ok = runs[best]
        base = min(naive(small, factors) for _ in range(max(1, args.repeat // 2)))
        per_rank_ours = total[best] / big
        per_rank_base = base / small
        print(f"[{label}] {big} ranks, {DRAWS} draws per generator:")
        print(
            f"  predict {pred:.3f} s + check {check:.3f} s = {total[best]:.3f} s "
            f"(best of {args.repeat}; median {statistics.median(total):.3f} s); every check ok: {ok}; "
            f"target < 5 s: {'met' if total[best] < 5 else 'NOT met'}"
        )
        print(
            f"  naive per-rank loop (predict only) on {small} ranks: {base:.3f} s = {per_rank_base * 1e6:.1f} us/rank; "
            f"ours (predict + check) {per_rank_ours * 1e6:.2f} us/rank; ratio {per_rank_base / per_rank_ours:.1f}x"
        )


if __name__ == "__main__":
    main()
