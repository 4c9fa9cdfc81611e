"""``scripts/strip_solutions.py``: the student's copy has no solution cell and no output, keeps every other cell, and
bad input is one line on stderr with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "strip_solutions.py"


def notebook() -> dict:
    def code(source, tags=(), hidden=False):
        metadata = {"tags": list(tags)} | ({"jupyter": {"source_hidden": True}} if hidden else {})
        return {"cell_type": "code", "metadata": metadata, "source": source, "execution_count": 3,
                "outputs": [{"output_type": "stream", "name": "stdout", "text": "correct: 42\n"}]}  # fmt: skip

    return {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "How many?"},
            code("answer = ...  # your answer"),
            code("answer = 42", tags=["solution"], hidden=True),
            code("check(answer)"),
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def run(*args, cwd):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def test_the_copy_keeps_the_stub_and_the_check_without_solution_or_outputs(tmp_path):
    source = tmp_path / "lesson.ipynb"
    source.write_text(json.dumps(notebook()))
    done = run(source, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "student/lesson.ipynb: 1 solution cell(s) removed"
    copy = json.loads((tmp_path / "student" / "lesson.ipynb").read_text())
    assert [c["source"] for c in copy["cells"]] == ["How many?", "answer = ...  # your answer", "check(answer)"]
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in copy["cells"] if c["cell_type"] == "code")
    assert json.loads(source.read_text()) == notebook()  # the source is left as it was


def test_every_course_notebook_keeps_a_stub_for_each_solution(tmp_path):
    notebooks = sorted((REPO / "notebooks").glob("*.ipynb"))
    done = run(*notebooks, "--out-dir", tmp_path, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    solutions = 0
    for path in notebooks:
        cells = json.loads(path.read_text())["cells"]
        for i, cell in enumerate(cells):
            if "solution" in cell["metadata"].get("tags", []):
                solutions += 1
                assert cell["metadata"].get("jupyter", {}).get("source_hidden") is True, (path.name, i)
                assert "..." in "".join(cells[i - 1]["source"]), (path.name, i)  # the stub the student fills in
    assert solutions >= 15


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "broken.ipynb").write_text("{not json")
    for args in (["missing.ipynb"], ["broken.ipynb"]):
        done = run(*args, cwd=tmp_path)
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    (tmp_path / "student").mkdir()
    (tmp_path / "student" / "x.ipynb").write_text(json.dumps(notebook()))
    done = run("student/x.ipynb", cwd=tmp_path)
    assert done.returncode == 2 and "overwrite" in done.stderr
