"""The step-time model against more of llm-foundry's H100 BF16 and A100 80GB benchmark tables than the validation holds
(issue 27).

``cost.HELD_OUT_RUNS`` holds five H100 rows and one A100 row of llm-foundry's benchmarking README
(mosaicml/llm-foundry 061f2c7ce6, ``scripts/train/benchmarking/README.md``, "H100 80GB BF16" and "A100 80GB with
1600 Gbps node-node interconnect (RoCE)"). This script prices 37 rows of the H100 table (MPT 760M to 70B, sequences
512 to 65,536, 8 to 64 GPUs, with and without activation checkpointing) or, with ``--a100``, all 61 rows of the A100
80GB table (MPT 125M to 70B, sequences 512 to 65,536, 8 to 64 GPUs) as those rows are priced: engine
``composer-fsdp``, ZeRO 3 (``FULL_SHARD``), fp32 gradient reduction (``DEFAULT`` mixed precision; the A100 70B rows
ran ``PURE`` bf16, 2 bytes), the table's micro-batch size and gradient accumulation, on the ``h100-sxm-80gb`` or
``a100-sxm-80gb`` preset. It is an exploration, not a validation set: nothing is fitted to it, and docs/validation.md
("What the model does not capture") says what it shows. Seconds per step: GPUs x micro-batch x accumulation x
sequence over the table's tokens per second. Every run used MPT's ``attn_impl: triton`` (the benchmark script's
default, ``submit_benchmarks.py``).

``--split`` separates, for each model and sequence length the table ran at two or more micro-batch sizes (with the
same recompute), what a micro-batch costs into a part that grows with its tokens and a part that does not
(``split_by_micro_batch``): a least-squares line through each row's seconds per micro-batch on one GPU, measured
and predicted. The slopes' ratio says whether the model prices a token's compute right; the intercepts, per layer,
what a micro-batch costs whatever its size.

Run from the repository root: ``python scripts/llm_foundry_h100.py [--a100] [--split]`` (a few seconds).
"""

from __future__ import annotations

import argparse

import numpy as np

from fastdist_lab import Layout
from fastdist_lab.cost import estimate, validate
from fastdist_lab.cost.evidence.accuracy import training_of
from fastdist_lab.cost.evidence.published import llm_foundry_run

SIZES = {"70b": (8192, 64, 80), "30b": (7168, 56, 48), "13b": (5120, 40, 40), "7b": (4096, 32, 32),
         "3b": (2560, 20, 32), "1b": (2048, 16, 24), "760m": (1536, 12, 24), "350m": (1024, 16, 24),
         "125m": (768, 12, 12)}  # fmt: skip
"""MPT sizes of llm-foundry's ``scripts/train/yamls/pretrain``: d_model, heads, layers (expansion 4, vocab 50,368)."""

# (size, sequence, GPUs, micro-batch, gradient accumulation, tokens/s, activation checkpointing), as the table has them.
ROWS = (
    ("70b", 2048, 64, 8, 4, 66523, True), ("70b", 2048, 32, 2, 16, 28242, True),
    ("30b", 8192, 8, 1, 21, 11072, True), ("30b", 4096, 8, 1, 21, 14419, True),
    ("30b", 2048, 32, 14, 3, 73860, True), ("30b", 2048, 16, 10, 3, 36209, True),
    ("30b", 2048, 8, 3, 21, 16022, True), ("30b", 1024, 8, 6, 21, 16672, True),
    ("13b", 32768, 8, 1, 3, 15812, True), ("13b", 16384, 8, 3, 3, 23881, True),
    ("13b", 4096, 8, 10, 3, 37740, True), ("13b", 2048, 64, 2, 1, 307209, False),
    ("13b", 2048, 32, 2, 1, 153960, False), ("13b", 2048, 16, 2, 1, 76280, False),
    ("13b", 2048, 8, 2, 1, 38336, False), ("13b", 1024, 8, 40, 3, 44019, True),
    ("7b", 65536, 8, 1, 2, 15654, True), ("7b", 32768, 8, 2, 2, 26550, True),
    ("7b", 8192, 8, 8, 2, 55481, True), ("7b", 4096, 8, 16, 2, 68893, True),
    ("7b", 2048, 8, 6, 1, 85144, False), ("7b", 1024, 8, 64, 2, 81628, True),
    ("3b", 65536, 8, 1, 2, 26099, True), ("3b", 32768, 8, 3, 6, 46984, True),
    ("3b", 16384, 8, 1, 6, 89223, False), ("3b", 8192, 8, 3, 6, 132626, False),
    ("3b", 4096, 8, 5, 6, 167712, False), ("3b", 2048, 64, 6, 3, 1441663, False),
    ("3b", 2048, 32, 6, 3, 736701, False), ("3b", 2048, 16, 10, 3, 386285, False),
    ("3b", 1024, 8, 20, 6, 216369, False), ("3b", 512, 8, 40, 6, 223721, False),
    ("1b", 2048, 64, 20, 1, 2841754, False), ("1b", 2048, 8, 14, 1, 363645, False),
    ("1b", 8192, 8, 3, 4, 233256, False), ("760m", 2048, 32, 24, 1, 2175091, False),
    ("760m", 4096, 8, 12, 2, 443674, False),
)  # fmt: skip


# The A100 80GB table, all its rows: as ``ROWS``, then the bytes per reduced gradient (``DEFAULT``: 4, ``PURE``: 2).
A100_ROWS = (
    ("70b", 2048, 64, 8, 4, 26274, True, 2), ("70b", 2048, 32, 2, 16, 11962, True, 2),
    ("30b", 8192, 8, 1, 21, 4594, True, 4), ("30b", 4096, 8, 1, 21, 6513, True, 4),
    ("30b", 2048, 8, 3, 21, 7330, True, 4), ("30b", 1024, 8, 6, 21, 7571, True, 4),
    ("30b", 512, 8, 12, 21, 7739, True, 4), ("13b", 32768, 8, 1, 3, 8134, True, 4),
    ("13b", 16384, 8, 3, 3, 11454, True, 4), ("13b", 8192, 8, 5, 3, 14362, True, 4),
    ("13b", 4096, 8, 10, 3, 16482, True, 4), ("13b", 2048, 8, 2, 3, 18097, False, 4),
    ("13b", 1024, 8, 40, 3, 18647, True, 4), ("7b", 65536, 8, 1, 2, 8108, True, 4),
    ("7b", 32768, 8, 2, 2, 13382, True, 4), ("7b", 16384, 8, 4, 2, 19629, True, 4),
    ("7b", 8192, 8, 8, 2, 25655, True, 4), ("7b", 4096, 8, 16, 2, 29472, True, 4),
    ("7b", 2048, 8, 6, 2, 37130, False, 4), ("7b", 1024, 8, 64, 2, 34857, True, 4),
    ("3b", 65536, 8, 1, 2, 14137, True, 4), ("3b", 32768, 8, 3, 6, 24235, True, 4),
    ("3b", 16384, 8, 1, 6, 44233, False, 4), ("3b", 8192, 8, 3, 6, 61567, False, 4),
    ("3b", 4096, 8, 5, 6, 75658, False, 4), ("3b", 2048, 8, 10, 2, 86491, False, 4),
    ("3b", 1024, 8, 20, 6, 92643, False, 4), ("3b", 512, 8, 40, 6, 97019, False, 4),
    ("1b", 65536, 8, 1, 2, 24353, True, 4), ("1b", 32768, 8, 1, 4, 50207, False, 4),
    ("1b", 16384, 8, 2, 4, 79650, False, 4), ("1b", 8192, 8, 3, 4, 110516, False, 4),
    ("1b", 4096, 8, 7, 4, 142457, False, 4), ("1b", 2048, 8, 14, 4, 164109, False, 4),
    ("1b", 1024, 8, 18, 4, 176898, False, 4), ("1b", 512, 8, 56, 4, 185186, False, 4),
    ("760m", 65536, 8, 1, 2, 33150, True, 4), ("760m", 32768, 8, 1, 2, 70417, False, 4),
    ("760m", 16384, 8, 3, 2, 114198, False, 4), ("760m", 8192, 8, 6, 2, 167471, False, 4),
    ("760m", 4096, 8, 12, 2, 218808, False, 4), ("760m", 2048, 8, 24, 2, 259472, False, 4),
    ("760m", 1024, 8, 48, 2, 238122, False, 4), ("760m", 512, 8, 96, 2, 235571, False, 4),
    ("350m", 65536, 8, 1, 2, 60195, False, 4), ("350m", 32768, 8, 2, 2, 109222, False, 4),
    ("350m", 16384, 8, 4, 2, 188478, False, 4), ("350m", 8192, 8, 8, 2, 292559, False, 4),
    ("350m", 4096, 8, 16, 2, 396442, False, 4), ("350m", 2048, 8, 32, 2, 470263, False, 4),
    ("350m", 1024, 8, 64, 2, 518504, False, 4), ("350m", 512, 8, 128, 2, 554643, False, 4),
    ("125m", 65536, 8, 1, 2, 162946, False, 4), ("125m", 32768, 8, 2, 2, 291256, False, 4),
    ("125m", 16384, 8, 4, 2, 480322, False, 4), ("125m", 8192, 8, 8, 2, 723142, False, 4),
    ("125m", 4096, 8, 16, 2, 947172, False, 4), ("125m", 2048, 8, 40, 2, 1142641, False, 4),
    ("125m", 2048, 8, 32, 2, 1133901, False, 4), ("125m", 1024, 8, 64, 2, 1251751, False, 4),
    ("125m", 512, 8, 128, 2, 1325455, False, 4),
)  # fmt: skip

TABLES = {"h100": (ROWS, "h100-sxm-80gb", "H100 80GB BF16"),
          "a100": (A100_ROWS, "a100-sxm-80gb", "A100 80GB with 1600 Gbps node-node interconnect (RoCE)")}  # fmt: skip
"""Each table: its rows, the hardware preset it is priced on and the table's name in the README."""


def errors(table: str = "h100", attention_slowdown: float = 1.0) -> list[tuple[tuple, float, float]]:
    """(row, measured seconds, predicted seconds) for every row of ``TABLES[table]``, each made a run as the
    held-out rows are (``published_held_out.llm_foundry_run``) and priced by ``validate``; with an
    ``attention_slowdown`` other than 1, priced on the preset with its fused attention that many times slower (a
    what-if for MPT's Triton kernel, docs/validation.md)."""
    rows, hardware, name = TABLES[table]
    runs = []
    for size, seq, gpus, mbs, accumulation, tokens_per_second, checkpointing, *grad in rows:
        row = (*SIZES[size], hardware, gpus, mbs, accumulation, checkpointing, *(grad or [4]), tokens_per_second)
        runs.append(llm_foundry_run(size, *row, name, seq))
    if attention_slowdown == 1.0:
        found = validate(runs)
        return list(zip(rows, found["measured_seconds"], found["predicted_seconds"]))
    priced = []
    for run in runs:
        machine = run.machine()
        forward, backward = machine.attention_efficiency
        machine = machine.replace(attention_efficiency=(forward / attention_slowdown, backward / attention_slowdown))
        layout = Layout(world_size=run.gpus, local_world_size=8)
        priced.append(estimate(layout, run.transformer(), training_of(run, {})).step(machine).seconds)
    return [(row, run.seconds, seconds) for row, run, seconds in zip(rows, runs, priced)]


def split_by_micro_batch(
    found: list[tuple[tuple, float, float]],
) -> list[tuple[str, int, bool, tuple[int, ...], float, float, float]]:  # fmt: skip
    """For each (size, sequence, recompute) of ``found`` (``errors()``' rows) run at two or more micro-batch sizes:
    (size, sequence, recompute, the micro-batch sizes, measured slope over predicted slope, measured and predicted
    intercept per layer in seconds), fitting seconds per micro-batch on one GPU (step over accumulation steps)
    against the micro-batch's tokens by least squares, measured and predicted apart. A slope ratio under 1: a
    token's work ran faster than priced; an intercept: seconds a micro-batch costs each layer whatever its tokens."""
    groups: dict[tuple[str, int, bool], list[tuple[int, float, float]]] = {}
    for (size, seq, _, mbs, accumulation, _, checkpointing, *_), measured, predicted in found:
        groups.setdefault((size, seq, checkpointing), []).append(
            (mbs, measured / accumulation, predicted / accumulation))
    split = []
    for (size, seq, checkpointing), points in groups.items():
        sizes = tuple(sorted({mbs for mbs, _, _ in points}))
        if len(sizes) < 2:
            continue
        tokens = np.array([mbs * seq for mbs, _, _ in points], dtype=np.float64)
        measured_slope, measured_intercept = np.polyfit(tokens, [m for _, m, _ in points], 1)
        predicted_slope, predicted_intercept = np.polyfit(tokens, [p for _, _, p in points], 1)
        layers = SIZES[size][2]
        split.append((size, seq, checkpointing, sizes, float(measured_slope / predicted_slope),
                      float(measured_intercept / layers), float(predicted_intercept / layers)))  # fmt: skip
    return split


def main() -> None:
    """Print each row's error, then the mean and worst: in all, by sequence length and, at 2,048 tokens, by size."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a100", action="store_true", help="the A100 80GB table instead of the H100 one")
    parser.add_argument("--attention-slowdown", type=float, default=1.0, metavar="X",
                        help="price the fused attention X times slower than the preset's (a what-if; default 1)")
    parser.add_argument("--split", action="store_true",
                        help="per model run at several micro-batch sizes: cost per token and per micro-batch")
    args = parser.parse_args()
    if not args.attention_slowdown > 0:
        parser.error(f"--attention-slowdown must be above 0, not {args.attention_slowdown}")
    table = "a100" if args.a100 else "h100"
    found = errors(table, args.attention_slowdown)
    gpu = table.upper()
    if args.split:
        for size, seq, checkpointing, sizes, ratio, measured, predicted in split_by_micro_batch(found):
            recompute = "full" if checkpointing else "none"
            print(
                f"MPT-{size:4s} seq {seq:6,} on {gpu}, recompute {recompute:4s}, micro-batches {sizes}: measured slope "
                f"/ predicted {ratio:.3f}; per layer and micro-batch, whatever its size: "
                f"measured {measured * 1e3:6.2f} ms, predicted {predicted * 1e3:5.2f} ms"
            )
        return
    for (size, seq, gpus, mbs, accumulation, _, checkpointing, *_), measured, predicted in found:
        recompute = "full" if checkpointing else "none"
        error = predicted / measured - 1
        print(
            f"MPT-{size:4s} seq {seq:6,} on {gpus:2} {gpu}, micro-batch {mbs:3} x {accumulation:2}, recompute "
            f"{recompute:4s}: measured {measured:8.3f} s, predicted {predicted:8.3f} s, {error:+.1%}"
        )
    error = np.array([predicted / measured - 1 for _, measured, predicted in found])
    seq = np.array([row[1] for row, _, _ in found])
    small = np.array([row[0] in ("125m", "350m", "760m") for row, _, _ in found])
    for name, mask in (
        ("all", np.ones_like(seq, dtype=bool)), ("sequences >= 8,192", seq >= 8192), ("sequences < 8,192", seq < 8192),
        ("sequences >= 32,768", seq >= 32768), ("2,048 tokens, MPT-760M and smaller", (seq == 2048) & small),
        ("2,048 tokens, MPT-1B and larger", (seq == 2048) & ~small),
    ):
        if not mask.any():
            continue
        part = error[mask]
        print(
            f"{name}: {mask.sum()} rows, mean |error| {np.abs(part).mean():.1%}, mean {part.mean():+.1%}, "
            f"worst {np.abs(part).max():.1%}"
        )


if __name__ == "__main__":
    main()
