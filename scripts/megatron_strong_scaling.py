"""The step-time model against Megatron-Core's strong scaling of its 177B GPT on H100 (issue 27: collectives that
grow with the data-parallel group).

The Megatron-LM README (NVIDIA/Megatron-LM f2e5db402c, 2024-07-15, "Training Speed and Scalability") strong-scales
"the standard GPT-3 model (... slightly more than 175 billion parameters due to larger vocabulary size) from 96 H100
GPUs to 4608 GPUs, using the same batch size of 1152 sequences throughout. Communication becomes more exposed at
larger scale, leading to a reduction in MFU from 47% to 42%." ``cost.PUBLISHED_RUNS`` holds the same model at 2,304
GPUs, batch 1,152 (its weak-scaling table's 177B row, 432.8 TFLOP/s, tensor 8 x pipeline 6 x data 48). This script
prices the two ends the text gives as that row is priced (same model, batch and settings the model chooses), with
the row's tensor 8 x pipeline 6, so data parallel 2 and 96 (the README's figure labels every point 177B and gives no
layout). Seconds: the row's FLOPs per step over MFU x 989 TFLOP/s x GPUs, as the README's MFU is its TFLOP/s over
989 (408.8 TFLOP/s is its "41%", 474.4 its 48%); the MFU is rounded to a percent, so each measured step is known to
about 1%. It is an exploration, not a validation set: nothing is fitted to it.

Run from the repository root: ``python scripts/megatron_strong_scaling.py`` (a few seconds).
"""

from __future__ import annotations

import dataclasses

from fastdist_lab.cost import PUBLISHED_RUNS, validate

ROW = "GPT 177B (H100)"
"""The weak-scaling row of ``PUBLISHED_RUNS`` the strong scaling shares its model and batch with."""

ROW_TFLOPS = 432.8
"""TFLOP/s per GPU of that row, the README's table: with its seconds, the FLOPs of one step."""

PEAK_TFLOPS = 989.0
"""The H100's dense bf16 peak the README's MFU divides by."""

MEASURED_MFU = {96: 0.47, 4608: 0.42}
"""MFU at each end of the strong scaling, as the README states them."""


def runs() -> list:
    """The two ends as runs: the weak-scaling row with its GPUs and seconds replaced."""
    base = next(run for run in PUBLISHED_RUNS if run.name == ROW)
    flops = base.seconds * ROW_TFLOPS * 1e12 * base.gpus
    return [
        dataclasses.replace(
            base, name=f"GPT 177B (H100) on {gpus:,}", gpus=gpus, calibration=False,
            seconds=flops / (mfu * PEAK_TFLOPS * 1e12 * gpus),
            source="Megatron-LM README (f2e5db402c), strong scaling, 96 to 4608 H100 at batch 1152",
            measured_from=f"MFU {mfu:.0%} (of {PEAK_TFLOPS:.0f} TFLOP/s), the FLOPs of the 2,304-GPU row's step",
        )
        for gpus, mfu in MEASURED_MFU.items()
    ]  # fmt: skip


def errors() -> list[tuple[int, float, float, float]]:
    """(GPUs, measured MFU, predicted MFU, error of the predicted step) for each end, priced by ``validate``."""
    table = validate(runs())
    return [
        (gpus, mfu, mfu * measured / predicted, predicted / measured - 1)
        for (gpus, mfu), measured, predicted in zip(
            MEASURED_MFU.items(), table["measured_seconds"], table["predicted_seconds"])
    ]  # fmt: skip


def main() -> None:
    """Print each end's measured and predicted MFU and the error, then the drop from one end to the other."""
    found = errors()
    for gpus, measured, predicted, error in found:
        print(f"177B on {gpus:5,} H100 (tp8 pp6 dp{gpus // 48}): measured MFU {measured:.1%}, predicted "
              f"{predicted:.1%}, step {error:+.1%}")  # fmt: skip
    (_, first, first_predicted, _), (_, last, last_predicted, _) = found
    print(f"MFU lost from 96 to 4,608 GPUs: measured {(first - last) * 100:.1f} points, predicted "
          f"{(first_predicted - last_predicted) * 100:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
