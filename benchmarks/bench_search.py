"""Benchmark: the performance targets of issue 21 (the step time and the layout search), on this machine.

1. ``search`` over the whole space of a 530B model (Megatron-Turing NLG: 105 layers, hidden 20480, 128 heads) on
   5,128 A100 for 2,520 sequences (Calculon's example, Isaev et al. 2023; 5,128 = 8 x 641 divides no batch of
   2,520, so ``allow_smaller_batch=True`` as Calculon's rule): < 1 s. Baseline in the same run: a naive loop
   calling ``estimate(...).step()`` for each set-up, timed on a sample and scaled to all of them.
2. ``step()`` for one layout (Llama 2 70B on 64 H100, tensor 8, pipeline 2, 16 micro-batches): < 5 ms. Baseline:
   ``estimate()`` alone (building the report the step reads).
3. The schedule table the step runs: ours (pure Python) against torch's ``get_schedule_ops`` for the same sizes
   (the choice between deriving the tables from torch's classes and writing them here).

Run: python benchmarks/bench_search.py [--repeat N]
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import time

from fastdist_lab import Layout
from fastdist_lab.cost import Training, Transformer, estimate, schedule, search
from fastdist_lab.cost.search.candidates import LIMITS, candidates, shared_training

MTNLG = Transformer(hidden_size=20480, num_layers=105, num_attention_heads=128, vocab_size=50257, seq_length=2048)


def search_530b(top: int | None) -> tuple[float, int, int]:
    """Seconds of the whole search, rows returned and set-ups searched."""
    start = time.perf_counter()
    result = search(MTNLG, 5128, hardware="a100-sxm-80gb", global_batch_size=2520, allow_smaller_batch=True, top=top)
    return time.perf_counter() - start, len(result), result.searched


def naive_530b(sample: int = 40) -> tuple[float, int]:
    """Seconds per set-up of estimate(...).step() on a sample of the search's set-ups, and how many there are."""
    chosen = {**LIMITS, "allow_smaller_batch": True}
    rows = candidates(MTNLG, 5128, 8, 2520, chosen, shared_training(chosen))
    count = len(rows["tensor_parallel"])
    picks = random.Random(0).sample(range(count), min(sample, count))
    start = time.perf_counter()
    for i in picks:
        layout = Layout(world_size=5128, local_world_size=8, tensor_parallel=int(rows["tensor_parallel"][i]),
                        pipeline_parallel=int(rows["pipeline_parallel"][i]),
                        sequence_data_parallel=int(rows["sequence_data_parallel"][i]),
                        pipeline_first=bool(rows["pipeline_first"][i]))  # fmt: skip
        training = Training(micro_batch_size=int(rows["micro_batch_size"][i]),
                            num_microbatches=int(rows["num_microbatches"][i]), zero_stage=int(rows["zero_stage"][i]),
                            sequence_tensor_parallel=bool(rows["sequence_tensor_parallel"][i]),
                            recompute=("none", "selective", "full")[int(rows["recompute"][i])],
                            schedule=str(rows["schedule"][i]),
                            virtual_pipeline_stages=int(rows["virtual_pipeline_stages"][i]))  # fmt: skip
        estimate(layout, MTNLG, training).step("a100-sxm-80gb")
    return (time.perf_counter() - start) / len(picks), count


def step_once(repeat: int) -> tuple[float, float]:
    """Median seconds of estimate(...) and of estimate(...).step() for one 70B layout."""
    layout = Layout(world_size=64, local_world_size=8, tensor_parallel=8, pipeline_parallel=2)
    training = Training(num_microbatches=16, recompute="full", sequence_tensor_parallel=True)
    estimate(layout, "llama2-70b", training).step("h100-sxm-80gb")  # warm the caches (schedule table, groups)
    only, both = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        report = estimate(layout, "llama2-70b", training)
        middle = time.perf_counter()
        report.step("h100-sxm-80gb")
        end = time.perf_counter()
        only.append(middle - start)
        both.append(end - middle)
    return statistics.median(only), statistics.median(both)


def tables(repeat: int) -> tuple[float, float]:
    """Median seconds to build the interleaved 1F1B table of 8 ranks x 2 stages x 32 micro-batches: ours
    (uncached) and torch's get_schedule_ops."""
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    logging.getLogger("torch.distributed.pipelining").setLevel(logging.ERROR)
    ours, theirs = [], []
    for _ in range(repeat):
        schedule.cache_clear()
        start = time.perf_counter()
        schedule("interleaved-1f1b", 8, 32, 2)
        middle = time.perf_counter()
        get_schedule_ops("Interleaved1F1B", 8, 32, 2)
        theirs.append(time.perf_counter() - middle)
        ours.append(middle - start)
    return statistics.median(ours), statistics.median(theirs)


def main() -> None:
    """Print each figure with its baseline and ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    import pandas  # noqa: F401  (imported once per process, not part of a search)

    seconds, rows, searched = search_530b(top=100)  # cold: schedule tables and their counts built on the way
    warm = statistics.median(search_530b(top=100)[0] for _ in range(3))
    every, _, _ = search_530b(top=None)
    per_setup, count = naive_530b()
    naive = per_setup * count
    print(
        f"search, 530B on 5,128 A100 (target < 1 s): {seconds:.3f} s cold, {warm:.3f} s warm, for the best {rows} "
        f"of {searched:,} set-ups ({every:.3f} s simulating every one that fits); naive step() loop: "
        f"{per_setup * 1e3:.1f} ms x {count:,} = {naive:.1f} s; ratio naive / search {naive / seconds:.0f}x"
    )
    report_s, step_s = step_once(args.repeat)
    print(f"step() for one layout (target < 5 ms): {step_s * 1e3:.2f} ms; baseline estimate() alone "
          f"{report_s * 1e3:.2f} ms; ratio step / estimate {step_s / report_s:.2f}")  # fmt: skip
    ours, theirs = tables(max(3, args.repeat // 4))
    print(f"schedule table (interleaved 1F1B, 8 ranks x 2 stages, 32 micro-batches): ours {ours * 1e3:.2f} ms, "
          f"torch's get_schedule_ops {theirs * 1e3:.2f} ms; ratio torch / ours {theirs / ours:.0f}x")  # fmt: skip


if __name__ == "__main__":
    main()
