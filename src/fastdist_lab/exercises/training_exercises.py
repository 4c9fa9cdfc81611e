"""Exercises of ``notebooks/08_training_step.ipynb``: a column-parallel and a row-parallel linear written on a
real tensor group, and fault puzzles (a ``TrainingFault`` drawn at random that the student diagnoses)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from ..errors import ClusterError
from .grading import answered, correct, wrong

IN_FEATURES, OUT_FEATURES, TOKENS = 8, 12, 5
"""Sizes of the linear layers of the exercises (divisible by every tensor group of up to 4 ranks)."""


def _linear_trial(ctx: Any, column: Any, row: Any, which: str) -> dict[str, Any]:
    """On one rank: the student's ``column`` / ``row`` linear on this rank's shards, against one process."""
    import torch

    group = ctx.distributed.tensor_group
    t, r = group.size(), group.rank()
    generator = torch.Generator().manual_seed(7)  # every rank draws the same full tensors
    x = torch.randn(TOKENS, IN_FEATURES, generator=generator)
    w1 = torch.randn(OUT_FEATURES, IN_FEATURES, generator=generator)  # torch.nn.Linear's (out, in)
    w2 = torch.randn(IN_FEATURES, OUT_FEATURES, generator=generator)
    full_hidden = x @ w1.T
    w1_shard = w1.chunk(t, dim=0)[r]  # column parallel: this rank's output features
    w2_shard = w2.chunk(t, dim=1)[r]  # row parallel: this rank's input features
    out: dict[str, Any] = {"tensor_parallel": t}
    if which in ("column", "mlp"):
        hidden = column(x, w1_shard, group)
        expected = full_hidden.chunk(t, dim=1)[r]
        out["column"] = _compare(hidden, expected)
    if which in ("row", "mlp"):
        source = column(x, w1_shard, group) if which == "mlp" else full_hidden.chunk(t, dim=1)[r]
        y = row(source, w2_shard, group)
        out["row"] = _compare(y, full_hidden @ w2.T)
    return out


def _compare(got: Any, expected: Any) -> str:
    """``"ok"``, or what is wrong with ``got`` against ``expected`` in words."""
    import torch

    if not isinstance(got, torch.Tensor):
        return f"returned {type(got).__name__}, not a tensor"
    if tuple(got.shape) != tuple(expected.shape):
        return f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    if torch.allclose(got, expected, rtol=1e-5, atol=1e-5):
        return "ok"
    return "values differ from the one-process result"


def _run_linear(cluster: Any, column: Any, row: Any, which: str, hint: str) -> list[dict[str, Any]]:
    """Run ``_linear_trial`` on every rank; ``WrongAnswer`` naming the first rank whose result is wrong (``hint``)."""
    if getattr(cluster, "layout", None) is None or cluster.layout.tensor_parallel < 2:
        wrong("apply a layout with tensor_parallel >= 2 to the cluster first")
    try:
        results = cluster.run(_linear_trial, column, row, which, timeout=60)
    except ClusterError as error:
        wrong(f"the ranks did not finish ({str(error).splitlines()[0]}); does every rank call the same collectives?")
    if not results.ok:
        rank = results.failed_ranks[0]
        wrong(f"rank {rank} raised: {str(results.errors[rank]).strip().splitlines()[-1]}")
    key = "column" if which == "column" else "row"
    for rank, value in enumerate(results.values):
        if value[key] != "ok":
            wrong(f"rank {rank}: {value[key]}; {hint}")
    return list(results.values)


def check_column_parallel(cluster: Any, column: Any) -> None:
    """Exercise: ``column(x, weight_shard, group)`` is a column-parallel linear: ``weight_shard`` holds this tensor
    rank's output features (rows of torch's ``(out, in)`` weight); it returns this rank's slice of ``x @ W.T``."""
    answered("column", column)
    values = _run_linear(cluster, column, None, "column", "each rank multiplies the whole input by its own rows of W")
    correct(f"every rank holds its {OUT_FEATURES // values[0]['tensor_parallel']} output features: the forward needs "
            "no communication (operator f is the identity forward, an all-reduce backward)")  # fmt: skip


def check_row_parallel(cluster: Any, row: Any) -> None:
    """Exercise: ``row(x_shard, weight_shard, group)`` is a row-parallel linear: ``x_shard`` holds this rank's input
    features, ``weight_shard`` the matching columns of W; it returns the whole ``x @ W.T`` on every rank."""
    answered("row", row)
    _run_linear(cluster, None, row, "row", "each rank has a partial sum: add them over the tensor group (operator g)")
    correct("each rank's partial product summed over the tensor group: one all-reduce forward (operator g)")


def check_parallel_mlp(cluster: Any, column: Any, row: Any) -> None:
    """Exercise: ``row(column(x, ...), ...)`` on every rank gives the one-process MLP's output (without its
    activation): Megatron's pairing, one all-reduce per block forward."""
    answered("column", column)
    answered("row", row)
    _run_linear(cluster, column, row, "mlp", "check column and row alone first")
    correct("column then row parallel: the hidden activations stay split, one all-reduce at the end of the block")


FAULT_KINDS: tuple[str, ...] = ("wrong_shard", "unreduced", "skip_layer")
"""The faults a puzzle draws (``TrainingFault`` fields that break a step without dropout)."""


@dataclass(frozen=True)
class FaultPuzzle:
    """A fault drawn at random: pass ``puzzle.fault`` to ``check_training(..., fault=puzzle.fault)`` and diagnose
    it from the report alone (``kind`` and ``where`` are the answer: do not print them)."""

    kind: str
    where: int

    @property
    def fault(self) -> Any:
        """The ``TrainingFault`` to inject."""
        from ..checks import TrainingFault

        return TrainingFault(**{self.kind: self.where})

    def __repr__(self) -> str:
        return "FaultPuzzle(hidden: diagnose it from the check's report)"


def fault_puzzle(layout: Any, seed: int | None = None, layers: int = 4) -> FaultPuzzle:
    """A random ``FaultPuzzle`` for ``layout`` (``seed`` makes it repeatable; ``layers``: the model's layers)."""
    chooser = random.Random(seed)
    kind = chooser.choice(FAULT_KINDS)
    if kind == "skip_layer":
        return FaultPuzzle(kind, chooser.randrange(layers))
    return FaultPuzzle(kind, chooser.randrange(layout.world_size))  # any rank: wrong_shard needs tensor >= 2


def check_diagnosis(puzzle: FaultPuzzle, kind: Any, where: Any) -> None:
    """Exercise: the ``kind`` (``FAULT_KINDS``) and the rank (for ``skip_layer``, the layer) of ``puzzle``."""
    answered("kind", kind)
    answered("where", where)
    if kind not in FAULT_KINDS:
        wrong(f"kind={kind!r} should be one of {', '.join(map(repr, FAULT_KINDS))}")
    if kind != puzzle.kind:
        hints = {
            "wrong_shard": "a wrong shard makes every split tensor of one rank differ, already before the update",
            "unreduced": "unreduced gradients leave one rank's replica off by its own gradient: look at which ranks "
                         "of a data group disagree",
            "skip_layer": "a skipped layer changes the loss itself, on every rank",
        }  # fmt: skip
        wrong(f"not {kind!r}: {hints[kind]}")
    if int(where) != puzzle.where:
        unit = "layer" if kind == "skip_layer" else "rank"
        wrong(f"right kind, wrong {unit}: which {unit} does the report single out?")
    correct(f"{kind} at {'layer' if kind == 'skip_layer' else 'rank'} {where}")
