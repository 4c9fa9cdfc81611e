"""The step-time model against more of llm-foundry's H100 BF16 benchmark table than the validation holds (issue 27).

``cost.HELD_OUT_RUNS`` holds five H100 rows of llm-foundry's benchmarking README (mosaicml/llm-foundry 061f2c7ce6,
``scripts/train/benchmarking/README.md``, "H100 80GB BF16"). This script prices 37 rows of the same table (MPT
760M to 70B, sequences 512 to 65,536, 8 to 64 GPUs, with and without activation checkpointing) as those rows are
priced: engine ``composer-fsdp``, ZeRO 3 (``FULL_SHARD``), fp32 gradient reduction (``DEFAULT`` mixed precision),
the table's micro-batch size and gradient accumulation, on the ``h100-sxm-80gb`` preset. It is an exploration, not
a validation set: nothing is fitted to it, and docs/validation.md ("What the model does not capture") says what it
shows. Seconds per step: GPUs x micro-batch x accumulation x sequence over the table's tokens per second.

Run from the repository root: ``python scripts/llm_foundry_h100.py`` (a few seconds).
"""

from __future__ import annotations

import numpy as np

from fastdist_lab.cost import validate
from fastdist_lab.cost.published_held_out import llm_foundry_run

SIZES = {"70b": (8192, 64, 80), "30b": (7168, 56, 48), "13b": (5120, 40, 40), "7b": (4096, 32, 32),
         "3b": (2560, 20, 32), "1b": (2048, 16, 24), "760m": (1536, 12, 24)}  # fmt: skip
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


def errors() -> list[tuple[tuple, float, float]]:
    """(row, measured seconds, predicted seconds) for every row of ``ROWS``, each made a run as the held-out rows are
    (``published_held_out.llm_foundry_run``) and priced by ``validate``."""
    runs = []
    for size, seq, gpus, mbs, accumulation, tokens_per_second, checkpointing in ROWS:
        row = (*SIZES[size], "h100-sxm-80gb", gpus, mbs, accumulation, checkpointing, 4, tokens_per_second)
        runs.append(llm_foundry_run(size, *row, "H100 80GB BF16", seq))
    table = validate(runs)
    return list(zip(ROWS, table["measured_seconds"], table["predicted_seconds"]))


def main() -> None:
    """Print each row's error, then the mean and worst, and both for long sequences and for the others."""
    found = errors()
    for (size, seq, gpus, mbs, accumulation, _, checkpointing), measured, predicted in found:
        recompute = "full" if checkpointing else "none"
        error = predicted / measured - 1
        print(
            f"MPT-{size:4s} seq {seq:6,} on {gpus:2} H100, micro-batch {mbs:2} x {accumulation:2}, recompute "
            f"{recompute:4s}: measured {measured:8.3f} s, predicted {predicted:8.3f} s, {error:+.1%}"
        )
    error = np.array([predicted / measured - 1 for _, measured, predicted in found])
    long = np.array([row[1] >= 8192 for row, _, _ in found])
    for name, mask in (("all", np.ones_like(long)), ("sequences >= 8,192", long), ("sequences < 8,192", ~long)):
        part = error[mask]
        print(
            f"{name}: {mask.sum()} rows, mean |error| {np.abs(part).mean():.1%}, mean {part.mean():+.1%}, "
            f"worst {np.abs(part).max():.1%}"
        )


if __name__ == "__main__":
    main()
