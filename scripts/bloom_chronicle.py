"""The step-time model against more of BLOOM's layout search than the validation holds (issue 27).

``cost.HELD_OUT_RUNS`` holds 25 rows of BigScience's tr11 chronicles-prequel (bigscience-workshop/bigscience
053adafee8, ``train/tr11-176B-ml/chronicles-prequel.md``, 02-25 to 02-28). This script prices 29 earlier rows of the
same page (02-17 to 02-25) as those rows are priced (``published_held_out.bloom_run``: Megatron-DeepSpeed's engine of
the time, ZeRO 1, full recompute, Jean Zay's measured network), to locate what the DeepSpeed rows miss
(docs/validation.md, "What the model does not capture"). It is an exploration, not a validation set: nothing is
fitted to it. The groups:

- *one node*: tensor 8 on a single node of 8 A100 ("Max possible TFLOPs check", 02-21): no network, no pipeline,
  no data-parallel reduction, so what is missed there is inside the layer. Their batch is 512, as their heading says
  and their TFLOP/s give (the table's column says 2048);
- *micro-batch sweeps*: one layout at micro-batches 1 to 8 ("tile and wave quantization", "48 node contenders",
  "Final round comparison", 02-20 to 02-23). Left out: "48 node contenders"' 13,824 x 80 row of DP 8, TP 8, PP 10
  on 40 nodes (640 GPUs where 40 nodes have 320);
- *tile*: hidden 14,400, whose 14,400 / 8 = 1,800 columns a GPU are not a multiple of the GEMM tiles: on one node
  ("Best TFLOPs", 02-17, its own 32 heads) and against 13,824 on one layout ("tile and wave quantization", where
  the page measures 221.21 s against 160.29 s);
- *tensor 1*: 12,288 x 96 on tensor 1 x pipeline 48 ("GBS Variations", 02-25).

Every row is fp16 with 64 heads ("all NHEADS=64 (above too)", says the page) but the 02-17 ones, which give theirs.
Sizes a row gives as "200B" are 80 layers (12 x 14,400^2 x 80 is 199B; 12 x 13,824^2 x 80 plus the embeddings,
187B).

``--split`` fits each sweep's rows (one model and layout at two or more micro-batch sizes) as a pipeline runs them:
seconds = (micro-batches + stages - 1) x layers a stage x (a x tokens of a micro-batch + b), by least squares,
measured and predicted apart (``split_by_micro_batch``): ``a`` the cost of a token a layer, ``b`` what a layer costs
each pipeline slot whatever the micro-batch's size, as ``scripts/llm_foundry_h100.py --split`` does for FSDP rows.

Run from the repository root: ``python scripts/bloom_chronicle.py [--split]`` (a few seconds).
"""

from __future__ import annotations

import argparse

import numpy as np

from fastdist_lab.cost import validate
from fastdist_lab.cost.evidence.published import bloom_run

SEQUENCE = 2048
"""Every row's sequence length in tokens (``bloom_run`` builds its model with ``gpt_model``'s default)."""

# (group, section, hidden, layers, heads, global batch, DP, TP, PP, MBS, seconds), as the page has them.
ROWS = (
    ("tile", "Best TFLOPs, fp16 (02-17)", 14400, 8, 32, 2048, 1, 8, 1, 1, 769.99),
    ("one node", "Max possible TFLOPs check (02-21)", 14336, 6, 64, 512, 1, 8, 1, 2, 130.43),
    ("one node", "Max possible TFLOPs check (02-21)", 14336, 6, 64, 512, 1, 8, 1, 2, 119.19),
    ("one node", "Max possible TFLOPs check (02-21)", 14336, 10, 64, 512, 1, 8, 1, 1, 205.52),
    ("tile", "tile and wave quantization (02-20)", 14400, 80, 64, 2048, 4, 8, 10, 1, 221.21),
    ("micro-batch sweep", "tile and wave quantization (02-20)", 13824, 80, 64, 2048, 4, 8, 10, 1, 160.29),
    ("micro-batch sweep", "tile and wave quantization (02-20)", 13824, 80, 64, 2048, 4, 8, 10, 2, 151.07),
    ("micro-batch sweep", "tile and wave quantization (02-20)", 13824, 80, 64, 2048, 4, 8, 10, 4, 147.43),
    ("micro-batch sweep", "tile and wave quantization (02-20)", 13824, 80, 64, 2048, 4, 8, 10, 8, 152.51),
    ("micro-batch sweep", "48 node contenders (02-21)", 14336, 72, 64, 2048, 4, 8, 12, 1, 143.31),
    ("micro-batch sweep", "48 node contenders (02-21)", 14336, 72, 64, 2048, 4, 8, 12, 2, 134.02),
    ("micro-batch sweep", "48 node contenders (02-21)", 14336, 72, 64, 2048, 4, 8, 12, 4, 123.69),
    ("micro-batch sweep", "48 node contenders (02-21)", 14336, 72, 64, 2048, 4, 8, 12, 8, 129.26),
    ("micro-batch sweep", "48 node contenders (02-21)", 14336, 72, 64, 2048, 8, 8, 6, 1, 139.82),
    ("micro-batch sweep", "48 node contenders (02-21)", 14336, 72, 64, 2048, 8, 8, 6, 2, 131.02),
    ("micro-batch sweep", "48 node contenders (02-21)", 14336, 72, 64, 2048, 8, 8, 6, 4, 121.48),
    ("micro-batch sweep", "48 node contenders (02-21)", 13824, 84, 64, 2048, 4, 8, 12, 2, 143.89),
    ("micro-batch sweep", "48 node contenders (02-21)", 13824, 84, 64, 2048, 4, 8, 12, 4, 133.12),
    ("micro-batch sweep", "48 node contenders (02-21)", 13824, 84, 64, 2048, 8, 8, 6, 2, 141.41),
    ("micro-batch sweep", "48 node contenders (02-21)", 13824, 84, 64, 2048, 8, 8, 6, 4, 130.31),
    ("micro-batch sweep", "Final round comparison (02-23)", 12288, 96, 64, 2048, 8, 8, 6, 2, 136.73),
    ("micro-batch sweep", "Final round comparison (02-23)", 12288, 96, 64, 2048, 8, 8, 6, 4, 122.96),
    ("micro-batch sweep", "Final round comparison (02-23)", 13312, 84, 64, 2048, 4, 8, 12, 4, 125.52),
    ("micro-batch sweep", "Final round comparison (02-23)", 13312, 84, 64, 2048, 8, 8, 6, 2, 135.55),
    ("micro-batch sweep", "Final round comparison (02-23)", 13312, 84, 64, 2048, 8, 8, 6, 4, 122.93),
    ("micro-batch sweep", "Final round comparison (02-23)", 13824, 78, 64, 2048, 8, 8, 6, 4, 121.28),
    ("micro-batch sweep", "Final round comparison (02-23)", 14336, 72, 64, 2048, 4, 8, 12, 4, 123.79),
    ("micro-batch sweep", "Final round comparison (02-23)", 14336, 72, 64, 2048, 8, 8, 6, 4, 120.85),
    ("tensor 1", "GBS Variations (02-25)", 12288, 96, 64, 2048, 8, 1, 48, 1, 142.17),
)  # fmt: skip


def errors() -> list[tuple[tuple, float, float]]:
    """(row, measured seconds, predicted seconds) for every row of ``ROWS``, each made a run as the held-out BLOOM
    rows are (``published_held_out.bloom_run``, fp16) and priced by ``validate``."""
    runs = [bloom_run(section, hidden, layers, True, batch, dp, tp, pp, mbs, seconds, heads=heads)
            for _, section, hidden, layers, heads, batch, dp, tp, pp, mbs, seconds in ROWS]  # fmt: skip
    table = validate(runs)
    return list(zip(ROWS, table["measured_seconds"], table["predicted_seconds"]))


def split_by_micro_batch(
    found: list[tuple[tuple, float, float]],
) -> list[tuple[str, int, int, tuple[int, int, int], tuple[int, ...], float, float, float]]:  # fmt: skip
    """For each micro-batch sweep of ``found`` (``errors()``' rows; one section, model and layout at two or more
    micro-batch sizes): (section, hidden, layers, (DP, TP, PP), the micro-batch sizes, measured ``a`` over
    predicted ``a``, measured and predicted ``b`` in seconds), fitting each row's seconds as
    ``slots x layers a stage x (a x tokens + b)`` (slots: micro-batches + stages - 1; tokens: the micro-batch's) by
    least squares without a constant. A ratio near 1: a token's work priced right; ``b``: seconds a layer costs each
    pipeline slot whatever the micro-batch's size. A step's own costs (the data-parallel reduction, the optimizer)
    fall into both fits alike, so measured ``b`` less predicted ``b`` is what a slot misses where those are priced
    right."""
    sweeps: dict[tuple, list[tuple[int, float, float, float, float]]] = {}
    for (group, section, hidden, layers, _, batch, dp, tp, pp, mbs, _), measured, predicted in found:
        if group != "micro-batch sweep":
            continue
        slots = batch // (dp * mbs) + pp - 1
        work = slots * layers / pp
        sweeps.setdefault((section, hidden, layers, (dp, tp, pp)), []).append(
            (mbs, work * mbs * SEQUENCE, work, measured, predicted))
    split = []
    for (section, hidden, layers, layout), points in sweeps.items():
        sizes = tuple(sorted({mbs for mbs, *_ in points}))
        if len(sizes) < 2:
            continue
        x = np.array([(tokens, work) for _, tokens, work, _, _ in points])
        measured = np.linalg.lstsq(x, np.array([p[3] for p in points]), rcond=None)[0]
        predicted = np.linalg.lstsq(x, np.array([p[4] for p in points]), rcond=None)[0]
        split.append((section, hidden, layers, layout, sizes, float(measured[0] / predicted[0]), float(measured[1]),
                      float(predicted[1])))  # fmt: skip
    return split


def main() -> None:
    """Print each row's error, then the mean per group and, over the one-node and sweep rows (all tensor 8, hidden a
    multiple of 64 a GPU), per micro-batch; with ``--split``, each sweep's cost per token and per slot instead."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", action="store_true",
                        help="per micro-batch sweep: cost per token and per layer and pipeline slot")
    args = parser.parse_args()
    found = errors()
    if args.split:
        for section, hidden, layers, (dp, tp, pp), sizes, ratio, measured, predicted in split_by_micro_batch(found):
            print(
                f"{hidden}x{layers:<2} dp{dp} tp{tp} pp{pp:<2} micro-batches {sizes}: measured / predicted cost of a "
                f"token {ratio:.3f}; per layer and slot, whatever the micro-batch: measured {measured * 1e3:5.1f} ms, "
                f"predicted {predicted * 1e3:4.1f} ms  ({section})"
            )
        return
    for (group, section, hidden, layers, _, batch, dp, tp, pp, mbs, _), measured, predicted in found:
        print(
            f"{group:17s} {hidden}x{layers:<2} batch {batch:4} dp{dp:<2} tp{tp} pp{pp:<2} mbs{mbs}: measured "
            f"{measured:7.2f} s, predicted {predicted:7.2f} s, {predicted / measured - 1:+.1%}  ({section})"
        )
    error = np.array([predicted / measured - 1 for _, measured, predicted in found])
    groups = np.array([row[0] for row, _, _ in found])
    micro = np.array([row[9] for row, _, _ in found])
    for name in dict.fromkeys(groups):
        part = error[groups == name]
        print(f"{name}: {part.size} rows, mean {part.mean():+.1%}, worst {np.abs(part).max():.1%}")
    tensor8 = np.isin(groups, ("one node", "micro-batch sweep"))
    for value in sorted(set(micro[tensor8])):
        part = error[tensor8 & (micro == value)]
        print(f"tensor 8, micro-batch {value}: {part.size} rows, mean {part.mean():+.1%}")


if __name__ == "__main__":
    main()
