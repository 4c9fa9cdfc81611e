"""Exercises of ``notebooks/10_memory_zero_schedules.ipynb`` on memory: bytes per parameter under ZeRO 0-3, what
recompute and a fused attention kernel keep, the global batch, and a 70B model on 64 GPUs of 80 GB."""

from __future__ import annotations

from typing import Any

from ..formatting import format_bytes
from .grading import answered, close, correct, number, wrong

ZERO_DATA_PARALLEL = 8
"""Data-parallel ranks of the ZeRO exercise."""


def _state_bytes_per_parameter(stage: int, data_parallel: int) -> float:
    """(weights + gradients + optimizer) bytes over parameters of one rank, from the cost report."""
    from ..cost import estimate
    from ..layout import Layout
    from ..setup import Training

    report = estimate(Layout(world_size=data_parallel), "llama2-7b", Training(zero_stage=stage))
    row = report.memory.iloc[0]
    return float((row["weights_bytes"] + row["gradients_bytes"] + row["optimizer_bytes"]) / row["parameters"])


def check_zero_bytes_per_parameter(answers: Any, data_parallel: int = ZERO_DATA_PARALLEL) -> None:
    """Exercise: ``answers`` maps each ZeRO stage 0-3 to the bytes per parameter one of ``data_parallel`` ranks
    holds for weights (bf16, 2), gradients (fp32, 4) and optimizer states (fp32 master + Adam's two moments, 12),
    checked against ``estimate(...).memory``."""
    answered("answers", answers)
    if not isinstance(answers, dict) or sorted(answers) != [0, 1, 2, 3]:
        wrong("answers should be a dict {0: ..., 1: ..., 2: ..., 3: ...}, one entry per ZeRO stage")
    d = data_parallel
    shares = {0: "nothing", 1: "the optimizer states (12)", 2: "the optimizer states and the gradients (4 + 12)",
              3: "the optimizer states, the gradients and the weights (all 18)"}  # fmt: skip
    for stage in range(4):
        got = number(f"answers[{stage}]", answers[stage])
        truth = _state_bytes_per_parameter(stage, d)
        if not close(got, truth):
            wrong(f"ZeRO {stage}: {got:g} bytes per parameter; stage {stage} shards {shares[stage]} over the "
                  f"{d} data-parallel ranks, the rest is whole on every rank")  # fmt: skip
    correct(f"18, {2 + 4 + 12 / d:g}, {2 + 16 / d:g} and {18 / d:g} bytes per parameter on {d} data-parallel ranks, "
            "as the cost report holds them")  # fmt: skip


def check_fewest_activations(name: Any, reports: dict[str, Any]) -> None:
    """Exercise: which of ``reports`` (name -> ``CostReport``) keeps the fewest activation bytes on its most
    loaded stage."""
    answered("name", name)
    activations = {key: int(report.most_loaded["activations_bytes"]) for key, report in reports.items()}
    if name not in activations:
        wrong(f"{name!r} is not one of {', '.join(map(repr, activations))}")
    truth = min(activations, key=activations.get)
    if activations[name] != activations[truth]:
        wrong(f"{name!r} keeps {format_bytes(activations[name])}; which set-up keeps only each layer's input?")
    correct(f"{truth!r} keeps {format_bytes(activations[truth])}: only each layer's input, the rest is recomputed")


def check_same_activations(pair: Any, reports: dict[str, Any]) -> None:
    """Exercise: the two set-ups of ``reports`` that keep exactly the same activation bytes."""
    answered("pair", pair)
    activations = {key: int(report.most_loaded["activations_bytes"]) for key, report in reports.items()}
    names = list(pair) if isinstance(pair, (list, tuple, set)) else []
    if len(names) != 2 or any(n not in activations for n in names):
        wrong(f"pair should be two of {', '.join(map(repr, activations))}")
    a, b = names
    if activations[a] != activations[b]:
        wrong(f"{a!r} keeps {format_bytes(activations[a])}, {b!r} {format_bytes(activations[b])}; what does selective "
              "recompute drop, and what does a fused attention kernel never store?")  # fmt: skip
    correct(f"{a!r} and {b!r} keep {format_bytes(activations[a])} each: selective recompute drops the s x s attention "
            "scores, which a fused (flash) attention kernel never stores anyway")  # fmt: skip


def check_recompute_seconds(seconds: Any, step: Any) -> None:
    """Exercise: the recompute seconds of ``step`` (a ``StepTime`` with selective recompute and fused attention)."""
    got = number("seconds", seconds)
    truth = float(step.breakdown.loc["recompute", "seconds"])
    if not close(got, truth, 0.05):
        wrong("with a fused attention kernel, which tensors does selective recompute still have to recompute?")
    correct(f"{truth:.3f} s: the fused kernel recomputes the attention scores inside its own backward, so selective "
            "recompute has nothing left to redo (it is counted in the backward's time)")  # fmt: skip


def check_global_batch(sequences: Any, layout: Any, training: Any) -> None:
    """Exercise: sequences in one step of ``training`` on ``layout`` (micro-batch size x micro-batches x the ranks
    that see different sequences)."""
    got = number("sequences", sequences)
    m = training.microbatches(layout.pipeline_parallel)
    truth = training.micro_batch_size * m * layout.batch_data_parallel
    if got != truth:
        if got == training.micro_batch_size * m * layout.data_parallel:
            wrong("the sequence-data ranks of one group hold pieces of the same sequences: only batch-data ranks "
                  "see different ones")  # fmt: skip
        if got == training.micro_batch_size * m:
            wrong("that is one data-parallel replica; every batch-data rank takes its own micro-batches")
        wrong("micro-batch size x micro-batches per step x ranks that see different sequences")
    correct(f"{truth} sequences = {training.micro_batch_size} x {m} micro-batches x "
            f"{layout.batch_data_parallel} batch-data ranks; gradient accumulation over the {m} micro-batches gives "
            "the same gradient as one big batch")  # fmt: skip


CHALLENGE = {"model": "llama2-70b", "gpus": 64, "hardware": "h100-sxm-80gb"}
"""The memory challenge: Llama 2 70B on 64 GPUs of 80 GB."""


def check_challenge(layout: Any, training: Any) -> None:
    """Exercise: a ``layout`` of 64 GPUs and a ``training`` set-up with which Llama 2 70B fits 80 GB per GPU."""
    from ..cost import estimate

    answered("layout", layout)
    answered("training", training)
    if layout.world_size != CHALLENGE["gpus"]:
        wrong(f"the challenge is {CHALLENGE['gpus']} GPUs; this layout has {layout.world_size}")
    report = estimate(layout, CHALLENGE["model"], training)
    fits = report.fits(CHALLENGE["hardware"])
    if not bool(fits["fits"].all()):
        stage = report.most_loaded_stage
        row = report.most_loaded
        kinds = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "temporaries_bytes")
        parts = {k: int(row[k]) for k in kinds}
        biggest = max(parts, key=parts.get)
        wrong(f"stage {stage} needs {format_bytes(int(row['total_bytes']))}, most of it {biggest.split('_')[0]} "
              f"({format_bytes(parts[biggest])}); shard it further (tensor, pipeline, ZeRO) or recompute")
    correct(f"{format_bytes(report.peak_bytes)} on the most loaded GPU: Llama 2 70B fits 80 GB on 64 GPUs")
