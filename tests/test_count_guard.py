"""The guard of ``.ci/run`` (``scripts/count_guard.py``): a pytest session that stops early is a failure, even when
pytest itself exits 0 or prints a green summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TESTS = {
    "fine": "def test_a():\n    pass\n\ndef test_b():\n    pass\n\ndef test_c():\n    pass\n",
    # the process ends in the middle of the session with exit code 0: no summary at all, and "success"
    "exits": "import os\n\ndef test_a():\n    pass\n\ndef test_b():\n    os._exit(0)\n\ndef test_c():\n    pass\n",
    # what a stray SIGINT does: pytest stops the session and prints a summary of what ran so far
    "interrupted": "def test_a():\n    pass\n\ndef test_b():\n    raise KeyboardInterrupt\n\ndef test_c():\n    pass\n",
}


def _session(
    tmp_path: Path, kind: str, *options: str
) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    folder = tmp_path / kind
    folder.mkdir()
    (folder / "pytest.ini").write_text("[pytest]\n")
    (folder / "test_three.py").write_text(TESTS[kind])
    counts = folder / "counts.json"
    # The guard is the only plugin the inner session needs: the installed ones (nbval's nbformat alone takes 1.5 s
    # to import, hypothesis 1 s) are not loaded, as the session's own pytest.ini keeps the project's options out.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    command = [sys.executable, "-m", "pytest", "-p", "scripts.count_guard", "--count-file", str(counts)]
    session = subprocess.run(
        [*command, "-p", "no:cacheprovider", "-q", *options, "test_three.py"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    guard = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "count_guard.py"), str(counts)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return session, guard


def test_a_whole_session_passes_the_guard(tmp_path):
    session, guard = _session(tmp_path, "fine")
    assert session.returncode == 0, session.stdout
    assert guard.returncode == 0 and "all 3 collected tests ran" in guard.stdout, guard.stderr


def test_a_session_whose_process_ends_early_is_a_failure_although_pytest_exits_0(tmp_path):
    session, guard = _session(tmp_path, "exits")
    assert session.returncode == 0  # what the runner alone would report: green
    assert guard.returncode == 1
    assert guard.stderr.strip() == (
        "count guard: only 1 of 3 collected tests ran to the end: the session stopped early"
    ), guard.stderr


def test_the_guard_counts_a_session_spread_over_workers_once(tmp_path):
    # CI runs the suite on two pytest-xdist workers (.ci/run, -n 2): the controller counts what each worker
    # collected and every test that finished on either; the workers write nothing
    session, guard = _session(tmp_path, "fine", "-p", "xdist.plugin", "-n", "2")
    assert session.returncode == 0, session.stdout
    assert guard.returncode == 0 and "all 3 collected tests ran" in guard.stdout, guard.stderr
    counts = json.loads((tmp_path / "fine" / "counts.json").read_text())
    assert counts == {"collected": 3, "finished": 3, "exitstatus": 0}
    # a worker whose process ends in the middle of a test: xdist reports that test as failed and the session fails
    session, guard = _session(tmp_path, "exits", "-p", "xdist.plugin", "-n", "2")
    assert session.returncode != 0 and "crashed" in session.stdout, session.stdout


def test_an_interrupted_session_is_a_failure(tmp_path):
    session, guard = _session(tmp_path, "interrupted")
    assert session.returncode != 0
    assert "count guard: only 1 of 3 collected tests ran" in session.stdout, session.stdout
    assert guard.returncode == 1 and "only 1 of 3" in guard.stderr


@pytest.mark.parametrize("content", [None, "{", '{"collected": 4, "finished": 4, "exitstatus": null}'])
def test_missing_broken_or_unfinished_counts_are_a_failure(tmp_path, content):
    path = tmp_path / "counts.json"
    if content is not None:
        path.write_text(content)
    guard = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "count_guard.py"), str(path)], capture_output=True, text=True
    )
    assert guard.returncode == 1 and len(guard.stderr.strip().splitlines()) == 1, guard.stderr


def test_ci_runs_the_guard():
    script = (ROOT / ".ci" / "run").read_text()
    assert "-p scripts.count_guard --count-file" in script and "scripts/count_guard.py" in script
    # the path in the option's own word: as a word of its own, pytest-xdist's workers (.ci/run's -n 2) take
    # it for a test path and root themselves in its folder, where the project's conftest finds no test of its own
    assert '-n 2 --dist loadfile -p scripts.count_guard --count-file="$counts"' in script
    assert textwrap.dedent(script).count("python -m pytest") == 1
