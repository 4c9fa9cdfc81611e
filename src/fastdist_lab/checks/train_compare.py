"""Every rank's shards after a training step against the one-process reference: one row per (rank, parameter
tensor) and one per parameter, with the tolerance, and what does not add up named in words.

Errors are measured on the shard a rank holds (its tensor-parallel slice of the parameter; with ZeRO-1 its slice
of the reduced gradient), against the same elements of the reference. A relative error is the largest absolute
error divided by the tensor's scale: the largest ``|value|`` of the reference tensor, but at least ``FLOOR`` times
the largest of all tensors of its kind (gradients, weights), so that a tensor whose reference is about zero (a key
bias, whose gradient softmax cancels) is not judged on rounding noise. Fast-LLM's distributed tests do the same
with an absolute tolerance beside the relative one (``tests/utils/compare_tensor_logs.py``, commit 91b28fab).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch

from ..layout import Layout
from .tiny_gpt import shard_of

RELATIVE_TOLERANCE = 1e-5
"""The default tolerance: fp32 on CPU agrees within 1e-5 relative for every layout of up to 16 ranks."""
FLOOR = 1e-3
"""A tensor's scale is at least this fraction of the largest scale of its kind."""
RANK_COLUMNS = (
    "rank", "name", "split", "tensor_shard", "grad_abs", "grad_rel", "weight_abs", "weight_rel", "initial_abs",
    "zero_grad",
)  # fmt: skip
"""Columns of ``TrainingCheck.tensors``: one row per (rank, parameter tensor)."""


def _scales(tensors: dict[str, torch.Tensor]) -> dict[str, float]:
    peaks = {name: float(value.abs().max()) if value.numel() else 0.0 for name, value in tensors.items()}
    floor = FLOOR * max(peaks.values(), default=0.0)
    return {name: max(peak, floor, 1e-30) for name, peak in peaks.items()}


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max()) if a.numel() else 0.0


def rank_rows(reference: dict[str, Any], values: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per (rank, parameter tensor): the errors of its gradient piece, updated and initial shard."""
    grad_scale, weight_scale = _scales(reference["grads"]), _scales(reference["updated"])
    rows = []
    for value in values:
        for shard in value["shards"]:
            name, split = shard["name"], shard["split"]
            index, parts = shard["tensor_index"], shard["tensor_parts"]
            updated = shard_of(reference["updated"][name], split, index, parts)
            initial = shard_of(reference["initial"][name], split, index, parts)
            row = {
                "rank": value["rank"],
                "name": name,
                "split": "replicated" if split is None else f"dim {split}",
                "tensor_shard": f"{index}/{parts}",
                "grad_abs": np.nan,
                "grad_rel": np.nan,
                "weight_abs": _max_abs(shard["updated"], updated),
                "initial_abs": _max_abs(shard["initial"], initial)
                if shard["initial"].shape == initial.shape
                else np.inf,
                "zero_grad": False,
            }
            row["weight_rel"] = row["weight_abs"] / weight_scale[name]
            if shard["grad"] is not None:
                first, last, piece = shard["grad"]
                expected = shard_of(reference["grads"][name], split, index, parts).reshape(-1)[first:last]
                row["grad_abs"] = _max_abs(piece, expected)
                row["grad_rel"] = row["grad_abs"] / grad_scale[name]
                row["zero_grad"] = bool(piece.numel()) and not bool(piece.any()) and bool(expected.any())
            rows.append(row)
    return pd.DataFrame(rows, columns=list(RANK_COLUMNS))


def _covered(values: list[dict[str, Any]], reference: dict[str, Any]) -> dict[str, str]:
    """Per parameter, what of it no rank holds ('' when every element of every shard is there)."""
    pieces: dict[str, dict[int, list[tuple[int, int]]]] = {name: {} for name in reference["grads"]}
    parts: dict[str, int] = {}
    for value in values:
        for shard in value["shards"]:
            name, index = shard["name"], shard["tensor_index"]
            parts[name] = shard["tensor_parts"]
            ranges = pieces.setdefault(name, {}).setdefault(index, [])
            if shard["grad"] is not None:
                ranges.append(shard["grad"][:2])
    gaps = {}
    for name, by_index in pieces.items():
        if not by_index:
            gaps[name] = "held by no rank"
            continue
        total = reference["grads"][name].numel() // parts.get(name, 1)
        missing = sorted(set(range(parts.get(name, 1))) - set(by_index))
        if missing:
            gaps[name] = f"tensor shard(s) {missing} held by no rank"
            continue
        for index, ranges in by_index.items():
            reach = 0
            for first, last in sorted(ranges):
                if first > reach:
                    break
                reach = max(reach, last)
            if reach < total:
                gaps[name] = f"gradient of tensor shard {index} held only up to element {reach} of {total}"
                break
        else:
            gaps[name] = ""
    return gaps


def parameter_table(
    frame: pd.DataFrame, reference: dict[str, Any], values: list[dict[str, Any]], tolerance: float
) -> pd.DataFrame:
    """One row per parameter tensor: its shape and split, how many ranks hold it, the largest gradient and weight
    errors over every rank's shard, the rank with the worst, the tolerance and the verdict."""
    gaps = _covered(values, reference)
    rows = []
    for name, full in reference["grads"].items():
        mine = frame[frame["name"] == name]
        worst = mine[["grad_rel", "weight_rel"]].max(axis=1) if len(mine) else pd.Series(dtype=float)
        gap = gaps.get(name, "held by no rank")
        row = {
            "name": name,
            "shape": "x".join(map(str, full.shape)),
            "split": mine["split"].iloc[0] if len(mine) else "",
            "ranks": int(mine["rank"].nunique()),
            "grad_abs": float(mine["grad_abs"].max()) if len(mine) else np.nan,
            "grad_rel": float(mine["grad_rel"].max()) if len(mine) else np.nan,
            "weight_abs": float(mine["weight_abs"].max()) if len(mine) else np.nan,
            "weight_rel": float(mine["weight_rel"].max()) if len(mine) else np.nan,
            "worst_rank": int(mine["rank"].loc[worst.idxmax()]) if len(mine) and worst.notna().any() else -1,
            "tolerance": tolerance,
            "note": gap or ("gradient zero on some rank" if bool(mine["zero_grad"].any()) else ""),
        }
        within = [row[key] <= tolerance for key in ("grad_rel", "weight_rel") if not np.isnan(row[key])]
        row["ok"] = bool(len(mine)) and all(within) and not gap and bool((mine["initial_abs"] == 0).all())
        rows.append(row)
    return pd.DataFrame(rows)


def rank_worst(frame: pd.DataFrame, world_size: int) -> pd.Series:
    """Each rank's worst relative error (gradient or weight; ``inf`` where it started from a wrong shard)."""
    worst = frame[["grad_rel", "weight_rel"]].max(axis=1)
    worst = worst.where(frame["initial_abs"] == 0, np.inf)
    series = worst.groupby(frame["rank"]).max().reindex(range(world_size))
    series.index.name = "rank"
    return series.rename("worst_rel")


def group_problems(layout: Layout, values: list[dict[str, Any]]) -> list[str]:
    """Each rank whose group of a dim was not the layout's (members or their order), in words."""
    problems = []
    for value in values:
        for dim, members in value["groups"].items():
            expected = tuple(int(r) for r in layout.group_of(dim, value["rank"]))
            if tuple(members) != expected:
                problems.append(
                    f"rank {value['rank']} used the {dim} group {list(members)}; the layout's is {list(expected)}"
                )
    return problems


def shard_problems(frame: pd.DataFrame) -> list[str]:
    """Each rank that started from another shard than the model's, in words."""
    bad = frame[frame["initial_abs"] != 0]
    out = []
    for rank, rows in bad.groupby("rank"):
        names = rows["name"].tolist()
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        out.append(
            f"rank {rank} started from another shard of {names[0]}{more} than the model's "
            f"(tensor shard {rows['tensor_shard'].iloc[0]})"
        )
    return out


def zero_problems(frame: pd.DataFrame) -> list[str]:
    """Tensors whose gradient is zero on some rank where the reference's is not (a layer left out), in words."""
    zero = frame[frame["zero_grad"].astype(bool)]
    if zero.empty:
        return []
    names = list(dict.fromkeys(zero["name"]))
    layers = sorted({name.split(".")[1] for name in names if name.startswith("layers.")}, key=int)
    what = f"of layer(s) {', '.join(layers)} " if layers else ""
    holders = sorted(int(rank) for rank in frame.loc[frame["name"].isin(names), "rank"].unique())
    return [
        f"{len(names)} tensors {what}have a zero gradient where one process has none (held by ranks {holders}): "
        f"their pipeline stage left them out of the step; first {names[0]}"
    ]


def reduction_problems(frame: pd.DataFrame, tolerance: float) -> list[str]:
    """When the forward pass was right (the loss matches) and every rank started from its shard, gradients outside
    the tolerance point at their reduction: the rank whose gradients differ most, in words."""
    worst = frame.dropna(subset=["grad_rel"]).groupby("rank")["grad_rel"].max()
    worst = worst[worst > tolerance]
    if worst.empty:
        return []
    rank = int(worst.idxmax())
    return [
        f"the loss matches one process but rank {rank}'s gradients do not (relative error {worst.max():.1e}): the "
        f"forward pass was right and the gradient reduction was not; rank {rank}'s gradients are not the sum over "
        "its data group"
    ]
