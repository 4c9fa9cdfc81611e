"""Exercises of ``notebooks/09_collectives_by_hand.ipynb``: what each collective leaves on every rank, a ring
all-reduce written with send and receive, the alpha-beta model of a link, and tensor parallelism's collectives.

Every rank ``r`` of a world of ``p`` starts from ``collective_inputs(p)[r]``: ``[10 r, 10 r + 1, ..., 10 r + p - 1]``
(rank 1 of 4 holds ``[10, 11, 12, 13]``), a sum of ``p`` floats per collective."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ClusterError
from .grading import answered, close, correct, number, numbers, wrong

WORLD = 4
"""Ranks of the collective exercises."""


def collective_inputs(world_size: int = WORLD) -> np.ndarray:
    """What every rank holds before a collective: row ``r`` is ``[10 r, 10 r + 1, ..., 10 r + world_size - 1]``."""
    return 10.0 * np.arange(world_size)[:, None] + np.arange(world_size)[None, :]


def collective_results(collective: str, world_size: int = WORLD) -> np.ndarray:
    """What every rank holds after ``collective`` on ``collective_inputs`` (sums), one row (or block) per rank."""
    x = collective_inputs(world_size)
    total = x.sum(axis=0)
    if collective == "all_reduce":
        return np.tile(total, (world_size, 1))
    if collective == "all_gather":
        return np.tile(x, (world_size, 1, 1))
    if collective == "reduce_scatter":
        return total.reshape(world_size, 1)
    if collective == "all_to_all":
        return x.T.copy()
    raise ValueError(f"collective={collective!r} must be all_reduce, all_gather, reduce_scatter or all_to_all")


def _per_rank(name: str, answer: Any, truth: np.ndarray) -> np.ndarray:
    """The answer as one block per rank: a single block shared by every rank is spread to all of them."""
    got = numbers(name, answer)
    if got.size == truth[0].size and bool((truth == truth[0]).all()):
        got = np.tile(got.reshape(truth[0].shape), (truth.shape[0],) + (1,) * (truth.ndim - 1))
    if got.size != truth.size:
        wrong(
            f"{name} has {got.size} numbers; after this collective the {truth.shape[0]} ranks hold "
            f"{truth.size // truth.shape[0]} each ({truth.size} in all; one list per rank)"
        )
    return got.reshape(truth.shape)


def _check_collective(collective: str, answer: Any, hints: dict[str, tuple[np.ndarray, str]], meaning: str) -> None:
    truth = collective_results(collective)
    raw = numbers(collective, answer).reshape(-1)
    if raw.size == truth.size and np.array_equal(raw, truth.reshape(-1)):
        correct(meaning)
        return
    for mistake, hint in hints.values():  # a typical mistake, as every rank's blocks or as the one they share
        shared = mistake.reshape(mistake.shape[0], -1)
        forms = [shared.reshape(-1)] + ([shared[0]] if bool((shared == shared[0]).all()) else [])
        if any(raw.size == form.size and np.array_equal(raw, form) for form in forms):
            wrong(hint)
    got = _per_rank(collective, answer, truth)
    if np.array_equal(got, truth):
        correct(meaning)
        return
    first = int(np.argwhere((got != truth).reshape(truth.shape[0], -1).any(axis=1))[0][0])
    wrong(f"rank {first} would not hold {got[first].tolist()}; {meaning}")


def check_all_reduce(prediction: Any) -> None:
    """Exercise: what every rank holds after ``all_reduce`` (sum) of ``collective_inputs()``."""
    x = collective_inputs()
    _check_collective(
        "all_reduce",
        prediction,
        {
            "nothing": (x, "that is what the ranks hold before; all-reduce adds the lists of every rank"),
            "mean": (np.tile(x.mean(axis=0), (WORLD, 1)), "the default op is a sum, not a mean"),
            "row sums": (np.tile(x.sum(axis=1), (WORLD, 1)), "it adds element by element across ranks, "
                         "not the numbers of one rank"),
        },  # fmt: skip
        "every rank ends with the element-wise sum of all ranks' lists",
    )


def check_all_gather(prediction: Any) -> None:
    """Exercise: what every rank holds after ``all_gather`` of ``collective_inputs()`` (one list per source rank)."""
    x = collective_inputs()
    _check_collective(
        "all_gather",
        prediction,
        {"sum": (np.tile(x.sum(axis=0), (WORLD, WORLD, 1)), "all-gather adds nothing: it copies every rank's list")},
        "every rank ends with every rank's list, in rank order: nothing is added",
    )


def check_reduce_scatter(prediction: Any) -> None:
    """Exercise: what each rank holds after ``reduce_scatter`` (sum) of ``collective_inputs()``: one number."""
    x = collective_inputs()
    _check_collective(
        "reduce_scatter",
        prediction,
        {
            "full sum": (np.tile(x.sum(axis=0), (WORLD, 1)), "that is all-reduce; reduce-scatter leaves rank r only "
                         "chunk r of the sum"),
            "own chunk": (np.diag(x).reshape(WORLD, 1), "chunk r is summed over every rank, not taken from rank r"),
        },  # fmt: skip
        "rank r ends with chunk r of the sum (reduce-scatter + all-gather = all-reduce)",
    )


def check_all_to_all(prediction: Any) -> None:
    """Exercise: what each rank holds after ``all_to_all`` of ``collective_inputs()`` split in one-number chunks."""
    x = collective_inputs()
    _check_collective(
        "all_to_all",
        prediction,
        {
            "nothing": (x, "that is what the ranks hold before; rank j sends its chunk r to rank r"),
            "sum": (np.tile(x.sum(axis=0), (WORLD, 1)), "all-to-all adds nothing, it only moves chunks"),
        },
        "rank r ends with chunk r of every rank, in rank order: the matrix transposed",
    )


def check_ring_cost(steps: Any, bytes_sent: Any, world_size: int = WORLD, size: int = 1 << 20) -> None:
    """Exercise: send/receive steps of a ring all-reduce of ``size`` bytes on ``world_size`` ranks, and the bytes
    each rank sends in all (reduce-scatter then all-gather, ``p - 1`` steps each of ``size / p`` bytes)."""
    p = world_size
    got_steps, got_bytes = number("steps", steps), number("bytes_sent", bytes_sent)
    if got_steps != 2 * (p - 1):
        if got_steps == p - 1:
            wrong("that is one phase; a ring all-reduce is a reduce-scatter then an all-gather")
        wrong(f"count the steps of each phase: after how many steps has each of the {p} chunks visited every rank?")
    truth = 2 * (p - 1) / p * size
    if not close(got_bytes, truth):
        if close(got_bytes, 2 * (p - 1) * size):
            wrong("each step sends one chunk, 1/p of the tensor, not the whole tensor")
        wrong(f"{got_bytes:.0f} bytes: each of the {2 * (p - 1)} steps sends one chunk of size/{p} bytes")
    correct(f"{2 * (p - 1)} steps and 2 (p - 1) / p = {2 * (p - 1) / p:g} times the tensor per rank: "
            f"nccl-tests' bus factor, nearly independent of p")  # fmt: skip


def _ring_trial(ctx: Any, ring: Any, length: int) -> dict[str, Any]:
    """On one rank: the student's ``ring(tensor, group)`` and torch's all-reduce on the same random tensor."""
    import torch
    import torch.distributed as dist

    group = ctx.distributed.tensor_group
    generator = torch.Generator().manual_seed(1000 + ctx.rank)
    tensor = torch.randn(length, generator=generator)
    expected = tensor.clone()
    dist.all_reduce(expected, group=group)
    mine = tensor.clone()
    returned = ring(mine, group)
    mine = returned if isinstance(returned, torch.Tensor) else mine
    return {"ok": bool(torch.allclose(mine, expected, rtol=1e-5, atol=1e-5)), "got": mine.tolist(),
            "expected": expected.tolist(), "unchanged": bool(torch.equal(mine, tensor))}  # fmt: skip


def check_ring_all_reduce(cluster: Any, ring: Any, length: int = 10, timeout: float = 30.0) -> None:
    """Exercise: ``ring(tensor, group)`` all-reduces ``tensor`` in place (sum) over ``group`` with ``group.send`` and
    ``group.recv`` only. Run on every rank of ``cluster`` (a ``LocalCluster`` whose applied layout has one tensor
    group of every rank) on a random tensor of ``length`` floats (not a multiple of the ranks: chunks differ) and
    compared with torch's ``all_reduce``."""
    answered("ring", ring)
    if not callable(ring):
        wrong(f"ring={ring!r} should be a function ring(tensor, group)")
    layout = getattr(cluster, "layout", None)
    if layout is None or layout.tensor_parallel != cluster.world_size:
        wrong("apply a layout whose tensor group holds every rank first: "
              "cluster.apply(Layout(world_size=4, tensor_parallel=4))")  # fmt: skip
    try:
        results = cluster.run(_ring_trial, ring, length, timeout=timeout)
    except ClusterError as error:
        first = str(error).splitlines()[0]
        wrong(f"the ranks did not finish ({first}); does every send have a matching receive on the next rank?")
    if not results.ok:
        rank = results.failed_ranks[0]
        message = str(results.errors[rank]).strip().splitlines()[-1]
        wrong(f"rank {rank} raised: {message}")
    values = results.values
    for rank, value in enumerate(values):
        if not value["ok"]:
            if value["unchanged"]:
                wrong(f"rank {rank}'s tensor is unchanged: write the sum into `tensor` (tensor[:] = ...) or return it")
            wrong(f"rank {rank} ends with {np.round(value['got'][:4], 3).tolist()}..., torch's all-reduce gives "
                  f"{np.round(value['expected'][:4], 3).tolist()}...; check which chunk each step sends and adds")
    correct(f"your ring gives torch's all-reduce on all {len(values)} ranks ({length} floats, uneven chunks)")


def check_alpha_beta(sizes: Any, seconds: Any, alpha: Any, beta: Any) -> None:
    """Exercise: ``alpha`` (seconds) and ``beta`` (bytes per second) of ``t = alpha + n / beta`` fitted to the
    measured ``seconds`` at message ``sizes`` (bytes) by least squares. Any fit whose squared error is within 2 % of
    the best one passes (the timings differ on every run; when they are so latency-bound that the best slope is not
    positive, so is the ``beta`` that passes)."""
    n, t = numbers("sizes", sizes).reshape(-1), numbers("seconds", seconds).reshape(-1)
    a, b = number("alpha", alpha), number("beta", beta)
    if n.shape != t.shape or len(n) < 2:
        wrong("sizes and seconds must be two lists of the same length, at least two measurements")
    slope, intercept = np.polyfit(n, t, 1)
    if b <= 0 and slope > 0:  # noisy latency-bound timings may fit a slope <= 0: then any beta the fit gives passes
        wrong(f"beta={b:g} must be a positive bandwidth in bytes per second")
    best = float(np.sum((intercept + slope * n - t) ** 2))
    mine = float(np.sum((a + n / b - t) ** 2))
    if mine > 1.02 * best + 1e-18:
        if b < 1e3 < 1 / max(slope, 1e-30):
            wrong("beta is a bandwidth, bytes per second: the slope of seconds over bytes is 1 / beta")
        wrong("that line is far from the points: fit t = alpha + n / beta (np.polyfit(sizes, seconds, 1) gives "
              "the slope 1 / beta and the intercept alpha)")  # fmt: skip
    correct("alpha is what a message costs before its first byte, 1 / beta what each byte adds; the size where both "
            "are equal, alpha * beta, is where bandwidth starts to matter")  # fmt: skip


def _tensor_all_reduces(report: Any) -> int:
    rows = report.communication
    chosen = (rows["dim"] == "tensor") & (rows["collective"] == "all_reduce")
    return int(rows.loc[chosen, "calls_per_step"].sum())


def check_tensor_collectives_per_layer(per_layer: Any) -> None:
    """Exercise: tensor-parallel all-reduces of one transformer layer for one micro-batch (forward and backward,
    no sequence tensor parallel, no recompute), checked against ``estimate(...).communication``."""
    from ..cost import estimate
    from ..layout import Layout
    from ..setup import Training

    model = "llama2-7b"
    report = estimate(Layout(world_size=2, tensor_parallel=2), model, Training(num_microbatches=1))
    layers = report.model.num_layers
    truth = (_tensor_all_reduces(report) - 2) // layers  # less the embedding's and the output layer's
    got = number("per_layer", per_layer)
    if got != truth:
        if got == truth // 2:
            wrong("that is the forward pass alone: the backward pass has its own (operator f's backward is an "
                  "all-reduce of the input gradient)")  # fmt: skip
        if got == 1:
            wrong("attention and the MLP each end with a row-parallel linear: count each block, forward and backward")
        wrong("per block (attention, MLP) and per pass (forward, backward), how many all-reduces?")
    correct(f"{truth} per layer and micro-batch: 2 forward (after attention and after the MLP), 2 backward; "
            f"the report counts {_tensor_all_reduces(report)} = {layers} layers x {truth} + 2 (embedding, output)")


def check_tensor_collectives_per_step(calls: Any, report: Any) -> None:
    """Exercise: tensor all-reduces one rank issues in a step of ``report`` (a ``CostReport`` without sequence tensor
    parallel), from layers, micro-batches and the two ends."""
    truth = _tensor_all_reduces(report)
    got = number("calls", calls)
    if truth == 0:
        wrong("this report has no tensor all-reduce (tensor_parallel=1, or sequence tensor parallel is on)")
    if got != truth:
        wrong("layers of the stage x 4 x micro-batches, plus one per micro-batch for the embedding on the first "
              "stage and one for the output layer on the last")  # fmt: skip
    correct(f"{truth} calls per step, the report's tensor all_reduce row")


def check_slowest_link(component: Any, inside: Any, across: Any) -> None:
    """Exercise: the breakdown component (``StepTime.breakdown`` index) that grows most from step ``inside`` (tensor
    group in one node) to step ``across`` (the same layout with its tensor groups across nodes)."""
    name = answered("component", component)
    grown = across.breakdown["seconds"] - inside.breakdown["seconds"]
    truth = str(grown.idxmax())
    if name not in grown.index:
        wrong(f"{name!r} is not a component; use one of {', '.join(map(repr, grown.index))}")
    if name != truth:
        wrong(f"{name!r} grows by {grown[name]:.3f} s; which collectives run every layer, over the slow link now?")
    correct(f"{truth} grows by {grown[truth]:.3f} s: 4 collectives per layer and micro-batch now cross the network, "
            "which is why tensor groups stay inside a node")  # fmt: skip
