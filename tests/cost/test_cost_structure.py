"""cost/ by concept (issue 44): the vocabulary below it (``fastdist_lab.setup``), the formulas apart from the evidence,
the published runs as package data, the trust table written by a command and held fresh, and every old module path
still importable for a release, with its warning."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import fastdist_lab
from fastdist_lab.cost import PUBLISHED_MOE_RUNS, PUBLISHED_RUNS, PublishedRun
from fastdist_lab.cost.evidence import published_run, trust_table
from fastdist_lab.cost.evidence.published import FIRST_SOURCES, HELD_OUT_SOURCES, MOE_SOURCES, load_runs

PACKAGE = Path(fastdist_lab.__file__).parent


def _loaded(code: str, cwd: Path, pythonpath: Path | None = None) -> list[str]:
    """The fastdist_lab modules a fresh interpreter has loaded after ``code``."""
    env = None if pythonpath is None else {"PYTHONPATH": str(pythonpath), "PATH": ""}
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('fastdist_'))))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=cwd, env=env)
    return json.loads(out.stdout.splitlines()[-1])


def test_importing_cost_reads_no_published_run(tmp_path):
    loaded = _loaded("import fastdist_lab.cost", tmp_path)
    assert "fastdist_lab.cost.formulas.step" in loaded
    assert [m for m in loaded if m.startswith("fastdist_lab.cost.evidence.") and m != "fastdist_lab.cost.evidence.trust"
            and m != "fastdist_lab.cost.evidence.trust_table"] == []  # fmt: skip


def test_the_training_step_and_the_runtime_take_the_vocabulary_not_the_evidence(tmp_path):
    for code in ("from fastdist_lab.checks import train_step", "import fastdist_lab.runtime",
                 "from fastdist_lab.checks import check_training"):  # fmt: skip
        loaded = _loaded(code, tmp_path)
        assert "fastdist_lab.setup.training" in loaded or code == "import fastdist_lab.runtime", code
        assert [m for m in loaded if m.startswith("fastdist_lab.cost")] == [], code


def test_every_published_run_is_data_of_a_source_file_with_its_citation():
    files = sorted(path.stem for path in published_run.RUNS.glob("*.toml"))
    assert set(FIRST_SOURCES + HELD_OUT_SOURCES + MOE_SOURCES) < set(files)
    for name in files:
        document = published_run.read_source(name)
        assert document["source"]["citation"], name
        if name != "nccl-tests-threads":
            assert load_runs(name) and all(isinstance(run, PublishedRun) for run in load_runs(name)), name
    runs = PUBLISHED_RUNS + PUBLISHED_MOE_RUNS
    assert len(runs) == 83 and len({run.name for run in runs}) == 83
    assert sum(run.calibration for run in runs) == 10


def test_a_run_measured_in_tflops_turns_into_seconds_with_its_sources_flop_count():
    entry = {"name": "x", "measured": 137, "measured_as": "tflops_per_gpu", "flops": "narayanan", "gpus": 32,
             "global_batch_size": 512, "tensor_parallel": 1,
             "model": {"hidden_size": 2304, "num_layers": 24, "num_attention_heads": 24, "vocab_size": 51200,
                       "seq_length": 2048}}  # fmt: skip
    assert published_run.measured_seconds(entry) == published_run.narayanan_flops(512, 2048, 24, 2304) / (137e12 * 32)
    with pytest.raises(ValueError, match="measured_as='tflops' / flops='narayanan' is not a known unit"):
        published_run.measured_seconds({**entry, "measured_as": "tflops"})


def test_the_trust_table_is_not_stale():
    assert trust_table.stale() == ""
    assert len(trust_table.table_rows()) == 83


def test_a_changed_published_run_makes_the_trust_table_stale(tmp_path):
    copy = tmp_path / "src" / "fastdist_lab"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    runs = copy / "cost" / "evidence" / "runs" / "torchtitan.toml"
    runs.write_text(runs.read_text().replace("measured = 5762", "measured = 5800"))
    code = "from fastdist_lab.cost.evidence.trust_table import stale; print(stale())"
    env = {"PYTHONPATH": str(copy.parent), "PATH": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path,
                         env=env)  # fmt: skip
    assert "write_trust" in out.stdout and "trust_table.json was computed from other inputs" in out.stdout


MOVED = [
    ("training", "Training", "fastdist_lab.setup.training"),
    ("model", "Transformer", "fastdist_lab.setup.transformer"),
    ("model", "PRESETS", "fastdist_lab.setup.transformer"),
    ("hardware", "DEFAULT_HARDWARE", "fastdist_lab.setup.hardware"),
    ("efficiency", "DEFAULT_EFFICIENCY", "fastdist_lab.setup.efficiency"),
    ("engines", "ENGINE_TRAITS", "fastdist_lab.setup.engines"),
    ("schedule_kinds", "SCHEDULE_KINDS", "fastdist_lab.setup.schedule_kinds"),
    ("setups", "Setups", "fastdist_lab.cost.formulas.setup_columns"),
    ("memory", "stage_memory", "fastdist_lab.cost.formulas.memory"),
    ("step", "step_columns", "fastdist_lab.cost.formulas.step"),
    ("search_bounds", "TableFloors", "fastdist_lab.cost.search.bounds"),
    ("ranking", "ranked_lines", "fastdist_lab.cost.search.ranking"),
    ("accuracy", "validate", "fastdist_lab.cost.evidence.accuracy"),
    ("trust", "band_for", "fastdist_lab.cost.evidence.trust"),
    ("published", "PUBLISHED_RUNS", "fastdist_lab.cost.evidence.published"),
    ("published_held_out", "bloom_run", "fastdist_lab.cost.evidence.published"),
    ("published_moe", "PUBLISHED_MOE_RUNS", "fastdist_lab.cost.evidence.published"),
]


@pytest.mark.parametrize(("old", "name", "new"), MOVED)
def test_an_old_module_path_still_imports_with_a_warning_naming_the_new_one(old, name, new):
    import importlib

    with pytest.warns(DeprecationWarning, match=rf"fastdist_lab\.cost\.{old}\.{name} is deprecated: use {new}\.{name}"):
        value = getattr(importlib.import_module(f"fastdist_lab.cost.{old}"), name)
    assert value is getattr(importlib.import_module(new), name)


def test_the_old_classifier_of_a_kind_of_parallelism_is_a_deprecated_alias_of_setup_kind():
    from fastdist_lab.cost import parallelism_kind
    from fastdist_lab.cost.evidence.accuracy import run_kind

    run = next(run for run in PUBLISHED_RUNS if run.name == "GPT 145.6B")
    with pytest.warns(DeprecationWarning, match="fastdist_lab.cost.parallelism_kind is deprecated"):
        assert parallelism_kind(run) == run_kind(run) == "tp+pp+dp"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "parallelism_kind" not in dir(fastdist_lab.cost)
