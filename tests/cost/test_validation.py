"""The step-time model against measured published runs: the error bounds of docs/validation.md hold, a broken
measurement is caught, and the document shows the table the code computes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fastdist_lab.cost import PUBLISHED_RUNS, error_summary, validate

DOC = Path(__file__).resolve().parents[2] / "docs" / "validation.md"
BOUNDS = {"held out, issue 21 runs": (0.05, 0.12), "calibration": (0.05, 0.12)}
"""(mean, worst) absolute error allowed per set: the calibration runs and the 19 held-out runs of issue 21. The
runs added for issue 27 (``HELD_OUT_RUNS``) have their own, looser, asserted figures
(``tests/cost/test_validation_rankings.py``): the model does not meet the issue's targets on them yet."""


def problems(summary) -> list[str]:
    """The sets whose mean or worst absolute error passes ``BOUNDS``."""
    found = []
    for name, (mean, worst) in BOUNDS.items():
        row = summary.loc[name]
        if row["mean_abs_error"] >= mean or row["worst_abs_error"] >= worst:
            found.append(f"{name}: mean {row['mean_abs_error']:.1%}, worst {row['worst_abs_error']:.1%}")
    return found


@pytest.fixture(scope="module")
def table(validated):
    return validated  # validate(), computed once for the session (conftest)


def test_enough_runs_from_enough_sources(table):
    summary = error_summary(table)
    assert summary.loc["all", "runs"] >= 40 and summary.loc["all", "sources"] >= 6
    assert summary.loc["held out", "runs"] >= 30 and summary.loc["held out", "sources"] >= 6
    assert table["source"].str.len().min() > 20 and table["measured_from"].str.len().min() > 10
    assert table["calibration"].any() and not table["calibration"].all()


def test_errors_within_the_bounds(table):
    assert problems(error_summary(table)) == [], table[["run", "error"]].to_string()


def test_a_wrong_measurement_is_caught(table):
    held_out = next(run for run in PUBLISHED_RUNS if not run.calibration)
    broken = [dataclasses.replace(run, seconds=run.seconds * 1.5) if run is held_out else run for run in PUBLISHED_RUNS]
    assert problems(error_summary(validate(broken))) != []


def test_the_document_shows_this_table(table):
    from importlib import util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_validation.py"
    spec = util.spec_from_file_location("bench_validation", path)
    bench = util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    text = DOC.read_text()
    assert bench.markdown(table) in text, (
        "docs/validation.md is stale: python benchmarks/bench_validation.py --markdown"
    )
