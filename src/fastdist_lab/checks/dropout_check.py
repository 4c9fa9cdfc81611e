"""What the seed design changes in a training step with dropout, read from the real tensors of every rank.

Each rank records, in the order they happened, a digest of every dropout mask it drew (site, generator, shape) and
of every activation the members of its tensor group must hold identically (the inputs of the column-parallel
linears, after the copy or the sequence gather). Four judgments follow (``DROPOUT_CHECKS``):

1. replicated activations are bit-identical across each tensor group;
2. masks drawn from the ``pp`` generator are identical across each tensor group (the replicated residual stream:
   one mask for one tensor), masks drawn from ``tp`` differ (each tensor rank holds other heads or other tokens);
3. every mask differs across each data group (other samples or other chunks of a sequence);
4. every rank's masks are the draws of its generators as the layout seeds them (``Layout.seed_table`` for step 0
   of training): a rank seeded with another ``tp_seed_shift`` is named here.

An occurrence is matched across ranks by its site and its rank in that site's draws: members of a tensor or data
group hold the same stages and run the same schedule, so the n-th draw at a site is the same micro-batch.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..layout import Layout
from .tiny_gpt import digest

DROPOUT_CHECKS = (
    "replicated activations identical across each tensor group",
    "pp masks identical, tp masks different across each tensor group",
    "masks different across each data group",
    "masks are the draws of each rank's seeded generators",
)
"""The four judgments of a training step with dropout, in order."""


def _keyed(records: list[tuple]) -> dict[tuple[str, int], tuple]:
    """Records keyed by (site, occurrence at that site)."""
    seen: Counter = Counter()
    out = {}
    for record in records:
        out[(record[0], seen[record[0]])] = record
        seen[record[0]] += 1
    return out


def _row(check: str, scope: str, compared: int, failures: list[str]) -> dict[str, Any]:
    return {
        "check": check,
        "scope": scope,
        "compared": compared,
        "failed": len(failures),
        "detail": failures[0] + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else "") if failures else "",
        "ok": not failures,
    }


def _across(layout: Layout, dim: str, by_rank: dict[int, dict], same: Any) -> tuple[int, list[str]]:
    """Compare every key of each group of ``dim`` across its members; ``same(key, record)`` says whether the
    members must agree (True), differ (False) or need not be compared (None)."""
    compared, failures = 0, []
    for members in layout.groups(dim):
        members = [int(r) for r in members]
        if len(members) < 2 or members[0] not in by_rank:
            continue
        for key, record in by_rank[members[0]].items():
            rule = same(key, record)
            if rule is None:
                continue
            digests = [by_rank.get(rank, {}).get(key, (None, None, None, None))[-1] for rank in members]
            compared += 1
            if rule and len(set(digests)) != 1:
                odd = [rank for rank, d in zip(members, digests) if d != digests[0]]
                failures.append(
                    f"{key[0]} #{key[1]}: ranks {odd} differ from rank {members[0]} in {dim} group {members}"
                )
            if rule is False and len(set(digests)) != len(digests):
                twins = [rank for rank, d in zip(members, digests) if digests.count(d) > 1]
                failures.append(f"{key[0]} #{key[1]}: ranks {twins} of {dim} group {members} drew the same mask")
    return compared, failures


def _predicted(layout: Layout, values: list[dict[str, Any]], dropout: float, device: str) -> tuple[int, list[str]]:
    """Replay each rank's draws from the generators the layout seeds and compare digests."""
    if device != "cpu" and not (device == "cuda" and torch.cuda.is_available()):
        return 0, []
    seeds = layout.seed_table(step=0, phase="training")
    compared, failures = 0, []
    for value in values:
        rank = value["rank"]
        generators = {
            name: torch.Generator(device=device).manual_seed(int(seeds.loc[rank, name])) for name in ("pp", "tp")
        }
        wrong: Counter = Counter()
        for _, generator, shape, recorded in value["masks"]:
            keep = torch.rand(shape, generator=generators[generator], device=device) >= dropout
            compared += 1
            if digest(keep) != recorded:
                wrong[generator] += 1
        for generator, count in wrong.items():
            failures.append(
                f"rank {rank}: {count} '{generator}' masks are not the draws of its {generator} generator "
                f"as the layout seeds it (seed {int(seeds.loc[rank, generator])})"
            )
    return compared, failures


def dropout_rows(layout: Layout, values: list[dict[str, Any]], dropout: float, device: str = "cpu") -> pd.DataFrame:
    """One row per judgment of ``DROPOUT_CHECKS``: scope, how many comparisons, how many failed, the first failure
    in words, ``ok``."""
    activations = {v["rank"]: _keyed(v["activations"]) for v in values}
    masks = {v["rank"]: _keyed(v["masks"]) for v in values}
    rows = []
    compared, failures = _across(layout, "tensor", activations, lambda key, record: True)
    rows.append(_row(DROPOUT_CHECKS[0], "tensor groups", compared, failures))
    compared, failures = _across(layout, "tensor", masks, lambda key, record: record[1] == "pp")
    rows.append(_row(DROPOUT_CHECKS[1], "tensor groups", compared, failures))
    compared, failures = _across(layout, "data", masks, lambda key, record: False)
    rows.append(_row(DROPOUT_CHECKS[2], "data groups", compared, failures))
    compared, failures = _predicted(layout, values, dropout, device)
    scope = "every rank" if compared or not values else f"not replayed: no {device} device here"
    rows.append(_row(DROPOUT_CHECKS[3], scope, compared, failures))
    return pd.DataFrame(rows)


def mask_ids(values: list[dict[str, Any]], world_size: int, generator: str = "pp") -> np.ndarray:
    """Per rank, a small id of the first mask it drew from ``generator`` (equal ids: the very same mask; -1: no
    such draw), numbered in rank order. With ``pp`` these are the ranks that share a ``pp`` stream."""
    ids = np.full(world_size, -1, dtype=np.int64)
    numbers: dict[str, int] = {}
    for value in sorted(values, key=lambda v: v["rank"]):
        first = next((record[-1] for record in value["masks"] if record[1] == generator), None)
        if first is not None:
            ids[value["rank"]] = numbers.setdefault(first, len(numbers))
    return ids
