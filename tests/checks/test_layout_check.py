"""The main job's report: the layout echoed, what was checked, one line per dim, failures in full."""

from __future__ import annotations

import copy

import pytest

from fastdist_lab import Layout
from fastdist_lab.checks import LayoutCheck, check_layout
from fastdist_lab.checks.group_check import group_problems
from fastdist_lab.cli import main
from fastdist_lab.config import DIM_NAMES
from fastdist_lab.runtime import Verification

LAYOUT = Layout(world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2, backend="gloo")


@pytest.fixture(scope="module")
def checked(gloo):
    return check_layout(gloo, LAYOUT)  # the session's 8-rank gloo cluster (tests/conftest.py)


def test_the_report_says_what_was_checked_per_dim(checked):
    assert checked.ok
    text = checked.to_text()
    lines = text.splitlines()
    assert max(map(len, lines)) <= 120  # fits a terminal: long lines are wrapped
    start = next(i for i, line in enumerate(lines) if line.startswith("checked: "))
    assert " ".join(line.strip() for line in lines[:start]) == f"layout: {LAYOUT!r}"
    checked_text = " ".join(lines[start : lines.index("")])
    assert checked_text.startswith("checked: each rank's pool must hold, for every dim, the group of the layout's")
    assert "all-reduce" in checked_text and "an all-gather of global ranks the member list" in checked_text
    assert "generator seeds" in checked_text and "real generator streams" in checked_text
    summary = checked.dim_summary()
    assert list(summary.index) == list(DIM_NAMES)
    assert summary.loc["model_and_sequence_data", "group_size"] == 8 and summary["failed"].sum() == 0
    assert "all 40 (rank, generator) streams match exactly" in text
    assert lines[-1] == "result: OK"
    assert "every group:" not in text and "every group:" in checked.to_text(verbose=True)


def test_a_corrupted_group_is_reported_in_full(checked):
    results = copy.deepcopy(checked.verification.results)
    row = next(r for r in results[5].value["dims"] if r["dim"] == "pipeline")
    row["gathered"] = [5, 5]  # rank 5 saw a wrong member in its pipeline group
    expected = {dim: LAYOUT.groups(dim).tolist() for dim in DIM_NAMES}
    broken = Verification.from_rank_rows(expected, results, LAYOUT.fields(), "gloo", judge=group_problems)
    report = LayoutCheck(LAYOUT, broken, None)
    assert not report.ok
    text = report.to_text()
    assert "failed groups (1):" in text
    assert "pipeline group 1 [1, 5]: rank 5: all-gather gave [5, 5]" in text
    assert report.dim_summary().loc["pipeline", "failed"] == 1
    assert text.splitlines()[-1] == "result: FAILED"


def test_the_cli_prints_the_report_within_a_terminal_width(capsys):
    assert main(["check", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("layout: Layout(world_size=8")
    assert max(len(line) for line in out.splitlines()) <= 240  # the member lists are not printed without -v
    assert "result: OK" in out
