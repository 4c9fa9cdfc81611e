"""The search's branch and bound over schedule tables (``cost.search_bounds``): every table's floor is below every
step simulated in it, and the pruned search returns exactly the rows of the search that simulates everything; a
floor set too high is caught by the same comparison."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fastdist_lab.cost import DEFAULT_EFFICIENCY, RECOMPUTE, SCHEDULES, Hardware, Transformer, search
from fastdist_lab.cost.search.bounds import TableFloors, packed_keys

H100 = Hardware.preset("h100-sxm-80gb")
CASES = {
    "dense": (Transformer.preset("llama2-7b", num_layers=8), 32, 64, {"micro_batch_size": (1, 2)}),
    "experts": (Transformer.preset("qwen3-30b-a3b", num_layers=8), 16, 64, {"micro_batch_size": (1, 2)}),
    "coarse experts": (
        Transformer.preset("mixtral-8x7b", num_layers=8), 32, 64,
        {"micro_batch_size": 1, "sequence_data_parallel": (1, 2), "virtual_pipeline_stages": (1, 2)},
    ),
    # fewer micro-batches than stages: the bubble dominates, the floors that follow one micro-batch's way matter
    "few micro-batches": (
        Transformer.preset("llama3-8b", num_layers=16), 32, 8,
        {"micro_batch_size": 1, "pipeline_parallel": (2, 4, 8), "virtual_pipeline_stages": (1, 2), "recompute": "full"},
    ),
}  # fmt: skip


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    """A case and its search that simulates every set-up (``top=None``)."""
    model, gpus, batch, limits = CASES[request.param]
    return request.param, search(model, gpus, hardware=H100, global_batch_size=batch, top=None, **limits)


def _floors(result) -> np.ndarray:
    """The floor of every row of ``result.frame`` (seconds per sequence), table by table."""
    frame = result.frame
    rows = {name: frame[name].to_numpy() for name in frame.columns}
    rows["recompute"] = np.array([RECOMPUTE.index(r) for r in frame["recompute"]])
    rows["schedule_index"] = np.array([SCHEDULES.index(s) for s in frame["schedule"]])
    floors = TableFloors(result.model, rows, result.gpus_per_node, result.shared, H100, DEFAULT_EFFICIENCY)
    out = np.zeros(len(frame))
    keys = ("schedule", "pipeline_parallel", "virtual_pipeline_stages", "num_microbatches")
    for key, index in frame.groupby(list(keys)).indices.items():
        out[index] = floors.floor((str(key[0]), *(int(k) for k in key[1:])), index)
    return out


def test_every_floor_is_below_every_step_simulated_in_its_table(case):
    name, full = case
    seconds = full.frame["seconds"].to_numpy() / full.frame["global_batch_size"].to_numpy()
    floors = _floors(full)
    assert len(full) > 50, name
    assert (floors <= seconds * (1 + 1e-12)).all(), (name, full.frame[floors > seconds].head())
    best = np.argsort(seconds)[:20]  # and not trivially low where it matters, the best rows: it lets tables go
    assert (floors[best] > 0.5 * seconds[best]).all(), (name, floors[best] / seconds[best])
    one = np.flatnonzero((full.frame["schedule"] == "1f1b").to_numpy())  # its bubble the per-rank floors see whole
    one = one[np.argsort(seconds[one])[:20]]
    assert (floors[one] > 0.7 * seconds[one]).all(), (name, (floors[one] / seconds[one]).min())


@pytest.mark.parametrize("top", [1, 7, 40])
def test_the_pruned_search_returns_the_rows_of_the_full_one(case, top):
    name, full = case
    model, gpus, batch, limits = CASES[name]
    pruned = search(model, gpus, hardware=H100, global_batch_size=batch, top=top, **limits)
    pd.testing.assert_frame_equal(pruned.frame, full.frame.head(top).reset_index(drop=True))
    assert pruned.searched == full.searched
    assert pruned.dropped + pruned.pruned <= full.dropped + (full.searched - full.dropped)
    assert pruned.pruned >= 0 and (pruned.dropped <= full.dropped)


def test_the_search_skips_tables_and_says_so():
    model, gpus, batch, limits = CASES["experts"]
    result = search(model, gpus, hardware=H100, global_batch_size=batch, top=5, **limits)
    assert result.pruned > 0
    from fastdist_lab.cost.search.ranking import search_summary

    line = search_summary(result)
    assert f"{result.pruned:,} cannot rank: a floor of their step is above the 5th best" in line, line


def test_a_floor_set_too_high_is_caught(case, monkeypatch):
    # The comparison above can fail: a floor above the best step of its table (here: the best row's table, put
    # out of reach) prunes the table that holds the best row.
    name, full = case
    model, gpus, batch, limits = CASES[name]
    best = full.frame.iloc[0]
    table = (best.schedule, best.pipeline_parallel, best.virtual_pipeline_stages, best.num_microbatches)
    floor = TableFloors.floor

    def too_high(self, key, members):
        found = floor(self, key, members)
        return found + np.inf if key == table else found

    monkeypatch.setattr(TableFloors, "floor", too_high)
    broken = search(model, gpus, hardware=H100, global_batch_size=batch, top=40, **limits)
    assert broken.pruned > 0 and not broken.frame.equals(full.frame.head(40).reset_index(drop=True)), name


def test_packed_keys_are_equal_exactly_where_rows_are():
    rng = np.random.default_rng(0)
    columns = [rng.integers(0, 5, 2000), rng.integers(0, 300, 2000), rng.integers(0, 2, 2000)]
    keys = packed_keys(columns)
    rows = np.stack(columns, axis=1)
    _, by_rows = np.unique(rows, axis=0, return_inverse=True)
    _, by_keys = np.unique(keys, return_inverse=True)
    assert (by_rows.ravel() == by_keys.ravel()).all()
    assert (np.unique(keys, return_index=True)[1] == np.unique(rows, axis=0, return_index=True)[1]).all()
