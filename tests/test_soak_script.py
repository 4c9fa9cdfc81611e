"""scripts/soak_tests.py: runs a part of the suite N times beside busy processes and reports each test that failed,
how often, with its first failure; a flaky test made on purpose must be caught, and the busy processes ended."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "soak_tests.py"

FLAKY = textwrap.dedent(
    """
    from pathlib import Path

    def test_steady():
        assert True

    def test_flaky_on_the_second_run():
        counter = Path(__file__).with_name("runs.txt")
        runs = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(runs))
        assert runs != 2, f"deadline missed on run {runs}: waited 3.2 s of 3.0 s"
    """
)


def _soak(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")  # the sample suites need no plugin: fast runs
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env
    )


def _spinners_since(begin: float) -> list[psutil.Process]:
    """The busy processes (``python -c SPIN``) created since ``begin`` that still run."""
    found = []
    for process in psutil.process_iter(["cmdline", "create_time"]):
        cmdline = process.info["cmdline"] or []
        if cmdline[-2:] == ["-c", "while True:\n    pass\n"] and process.info["create_time"] >= begin - 1:
            found.append(process)
    return found


def test_a_flaky_test_is_counted_with_its_first_message(tmp_path):
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_sample.py").write_text(FLAKY)
    logs = tmp_path / "logs"
    begin = time.time()
    result = _soak(tmp_path, "--runs", "3", "--busy", "1", "--log-dir", str(logs), "suite")
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "test_flaky_on_the_second_run: failed in 1 of 3 runs (runs [2])" in out
    assert "deadline missed on run 2: waited 3.2 s of 3.0 s" in out
    assert "test_steady" not in out.split("tests failed at least once")[1]
    assert sorted(p.name for p in logs.glob("run-*.log")) == ["run-01.log", "run-02.log", "run-03.log"]
    assert "failed in 1 of 3 runs" in (logs / "summary.txt").read_text()
    assert "beside 1 busy processes" in out
    assert not _spinners_since(begin)  # the busy process it started was ended


def test_all_green_exits_zero_and_says_so(tmp_path):
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    result = _soak(tmp_path, "--runs", "2", "--busy", "0", "--log-dir", str(tmp_path / "logs"), "suite")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no test failed in 2 runs" in result.stdout


def test_a_run_that_dies_without_a_report_is_a_failure(tmp_path):
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_dies.py").write_text("import os\n\ndef test_dies():\n    os._exit(3)\n")
    result = _soak(tmp_path, "--runs", "1", "--busy", "0", "--log-dir", str(tmp_path / "logs"), "suite")
    assert result.returncode == 1
    assert "<the run itself>" in result.stdout


def test_bad_arguments_exit_2(tmp_path):
    result = _soak(tmp_path, "--runs", "0", "suite")
    assert result.returncode == 2
    assert "--runs must be at least 1, not 0" in result.stderr


def test_a_soak_ended_by_sigterm_ends_its_pytest_and_busy_processes_and_summarises(tmp_path):
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_slow.py").write_text("import time\n\ndef test_slow():\n    time.sleep(120)\n")
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    soak = subprocess.Popen([sys.executable, str(SCRIPT), "--runs", "2", "--busy", "1", "--log-dir",
                             str(tmp_path / "logs"), "suite"], cwd=tmp_path, stdout=subprocess.PIPE, text=True,
                            env=env)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        children: list[psutil.Process] = []
        while time.monotonic() < deadline and len(children) < 2:  # the busy process and the run's pytest
            children = psutil.Process(soak.pid).children()
            time.sleep(0.2)
        assert len(children) == 2, f"the soak started {len(children)} of its 2 children in 60 s"
        soak.terminate()
        out, _ = soak.communicate(timeout=60)
    finally:
        if soak.poll() is None:
            soak.kill()
    assert "soak: interrupted" in out and "runs:" not in out.split("interrupted")[0]
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, f"still running after the soak ended: {[p.pid for p in alive]}"

