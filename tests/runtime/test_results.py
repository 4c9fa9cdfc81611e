"""RankResults and Verification as data: aggregation of per-rank rows, failure reporting, report files."""

from __future__ import annotations

import json

import pytest

from fastdist_lab import Layout
from fastdist_lab.checks.group_check import group_problems
from fastdist_lab.runtime import RankError, RankResult, RankResults, Verification, load_report
from fastdist_lab.runtime.verification import expected_groups


def _rows_of(layout: Layout, rank: int, wrong_gather: bool = False) -> dict:
    config = layout.config(rank)
    dims = []
    for name, dim in config.distributed_dims.items():
        members = list(dim.global_ranks)
        gathered = list(reversed(members)) if wrong_gather and len(members) > 1 and name == "tensor" else members
        dims.append({"dim": name, "members": members, "gathered": gathered, "sum": sum(members), "seconds": 0.01})
    return {"rank": rank, "dims": dims, "seeds_ok": True}


def _layout() -> Layout:
    return Layout(world_size=4, local_world_size=4, tensor_parallel=2, pipeline_parallel=2)


def test_all_good_rows_make_an_ok_verification():
    layout = _layout()
    results = RankResults([RankResult(r, "ok", _rows_of(layout, r)) for r in range(4)])
    verification = Verification.from_rank_rows(
        expected_groups(layout), results, layout.fields(), "gloo", judge=group_problems
    )
    assert verification.ok
    assert len(verification.rows) == sum(layout.groups(d).shape[0] for d in layout.dim_names)


def test_a_wrong_all_gather_fails_that_group_only_and_says_why():
    layout = _layout()
    records = [RankResult(r, "ok", _rows_of(layout, r, wrong_gather=(r == 3))) for r in range(4)]
    verification = Verification.from_rank_rows(
        expected_groups(layout), RankResults(records), {}, "gloo", judge=group_problems
    )
    assert not verification.ok
    failures = verification.failures()
    assert [(row["dim"], row["members"]) for row in failures] == [("tensor", [2, 3])]
    assert "rank 3: all-gather gave [3, 2]" in failures[0]["detail"]
    assert "FAILED" in verification.to_text() and "all-gather gave" in verification.to_text()


def test_a_rank_that_failed_fails_every_group_it_is_in():
    layout = _layout()
    records = [RankResult(r, "ok", _rows_of(layout, r)) for r in range(3)]
    records.append(RankResult(3, "error", error=RankError("RuntimeError", "gloo connect failed", "Traceback ...")))
    verification = Verification.from_rank_rows(
        expected_groups(layout), RankResults(records), {}, "gloo", judge=group_problems
    )
    assert not verification.ok
    assert all(3 in row["members"] for row in verification.failures())
    assert "rank 3 did not complete" in verification.summary()


def test_identical_errors_are_grouped_and_raise_first_falls_back_to_cluster_error():
    from fastdist_lab import ClusterError

    error = RankError("ValueError", "bad", "Traceback (most recent call last):\nValueError: bad\n")
    records = [RankResult(0, "ok", 1), RankResult(1, "error", error=error), RankResult(2, "error", error=error)]
    results = RankResults(records)
    assert results.values == [1, None, None]
    assert [ranks for ranks, _ in results.error_groups()] == [[1, 2]]
    assert "ranks 1, 2: ValueError: bad" in repr(results)
    with pytest.raises(ClusterError, match="rank 1: ValueError: bad"):
        results.raise_first()


def test_report_round_trip_and_foreign_files(tmp_path):
    layout = _layout()
    results = RankResults([RankResult(r, "ok", _rows_of(layout, r), stdout=f"out {r}") for r in range(4)])
    fields = {k: getattr(v, "value", v) for k, v in layout.fields().items()}
    verification = Verification.from_rank_rows(
        expected_groups(layout), results, fields, "gloo", 1.5, judge=group_problems
    )
    path = tmp_path / "r.json"
    verification.save(path)
    loaded = load_report(path)
    assert loaded.rows == verification.rows and loaded.ok and loaded.seconds == 1.5
    assert [r.stdout for r in loaded.results] == [f"out {r}" for r in range(4)]
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"kind": "something else"}))
    with pytest.raises(ValueError, match="not a fastdist-lab verification report"):
        load_report(other)


def test_rank_failures_name_what_failed_on_each_rank():
    layout = _layout()
    records = [RankResult(r, "ok", _rows_of(layout, r, wrong_gather=(r == 3))) for r in range(3)]
    records.append(RankResult(3, "ok", {**_rows_of(layout, 3, wrong_gather=True), "seeds_ok": False}))
    verification = Verification.from_rank_rows(
        expected_groups(layout), RankResults(records), {}, "gloo", judge=group_problems
    )
    assert verification.rank_failures() == [[], [], ["tensor"], ["tensor", "seeds"]]
    good = [RankResult(r, "ok", _rows_of(layout, r)) for r in range(4)]
    assert (
        Verification.from_rank_rows(expected_groups(layout), RankResults(good), judge=group_problems).rank_failures()
        == [[]] * 4
    )
