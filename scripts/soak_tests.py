"""Run part of the suite many times beside busy processes, and say which tests failed, how often, and why.

A test that passes on an idle machine can fail when the CPUs are busy: a deadline that assumes an idle machine, a
race between threads, an output line another thread splits, a port or folder shared between tests. This script
makes that load on purpose and repeats the run::

    python scripts/soak_tests.py --runs 10 --busy 2 tests/runtime tests/checks
    python scripts/soak_tests.py --runs 3 --busy 2 --log-dir soak-logs tests/runtime/test_interrupts.py -- -k simulated

``--busy K`` starts K processes that spin on the CPUs for the whole soak (ended by their pid at the end, also on
Ctrl-C). Each run is ``python -m pytest -p no:cacheprovider --junitxml=... PATHS [-- PYTEST ARGS]`` in the current
folder; its output is kept as ``run-NN.log`` (and ``run-NN.xml``) in ``--log-dir`` (default: a new folder under the
system's temporary folder, printed at the start). At the end it prints every run's time and counts and, for each
test that failed at least once, how many runs it failed in and the first failure's message with the log it is in.

Exit status: 0 when every run passed, 1 when any test failed or errored in any run (or a run ended without its
report), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

SPIN = "while True:\n    pass\n"
"""What a busy process runs: one core kept at 100% until it is ended."""


@dataclass
class RunResult:
    """One run of pytest: its number, time, exit status and the failing tests' messages (test id -> message)."""

    number: int
    seconds: float
    status: int
    counts: dict[str, int]
    failures: dict[str, str] = field(default_factory=dict)
    log: Path | None = None


def read_report(path: Path) -> tuple[dict[str, int], dict[str, str]]:
    """The counts (tests, failures, errors, skipped) and the failing tests' first message lines of a JUnit XML
    report; ``FileNotFoundError`` / ``ElementTree.ParseError`` when pytest wrote none (a run that was killed)."""
    root = ElementTree.parse(path).getroot()
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failures: dict[str, str] = {}
    for case in root.iter("testcase"):
        counts["tests"] += 1
        test_id = "::".join(part for part in (case.get("classname", ""), case.get("name", "")) if part)
        for kind in ("failure", "error"):
            for problem in case.findall(kind):
                counts[f"{kind}s"] += 1
                message = (problem.get("message") or problem.text or kind).strip()
                failures.setdefault(test_id, f"{kind}: {message[:2000]}")
        if case.find("skipped") is not None:
            counts["skipped"] += 1
    return counts, failures


def start_busy(count: int) -> list[subprocess.Popen]:
    """``count`` processes that each keep one core busy."""
    return [
        subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        for _ in range(count)
    ]


def stop_busy(processes: list[subprocess.Popen]) -> None:
    """End the busy processes this script started, by their pid."""
    for process in processes:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()


def one_run(number: int, paths: list[str], pytest_args: list[str], log_dir: Path) -> RunResult:
    """Run pytest once on ``paths``, its output to ``run-NN.log``, its report to ``run-NN.xml``."""
    log = log_dir / f"run-{number:02d}.log"
    report = log_dir / f"run-{number:02d}.xml"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}", *paths, *pytest_args]
    begin = time.monotonic()
    with log.open("w") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        status = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT).returncode
    seconds = time.monotonic() - begin
    try:
        counts, failures = read_report(report)
    except (OSError, ElementTree.ParseError) as error:
        counts = {"tests": 0, "failures": 0, "errors": 1, "skipped": 0}
        failures = {"<the run itself>": f"no report ({error}); exit status {status}, see the log"}
    if status not in (0, 5) and not failures:  # pytest failed without a failing test: say so, never hide it
        failures = {"<the run itself>": f"pytest exited {status} with no failing test in its report, see the log"}
    return RunResult(number, seconds, status, counts, failures, log)


def summary(results: list[RunResult]) -> str:
    """Every run's line, then each failing test with its count of failed runs and its first failure."""
    lines = ["run  seconds  exit  tests  failed  errors  skipped"]
    for run in results:
        c = run.counts
        lines.append(
            f"{run.number:>3}  {run.seconds:7.1f}  {run.status:>4}  {c['tests']:>5}  {c['failures']:>6}  "
            f"{c['errors']:>6}  {c['skipped']:>7}"
        )
    seconds = [run.seconds for run in results]
    if seconds:
        lines.append(f"runs: {len(results)}, {min(seconds):.1f}-{max(seconds):.1f} s each, {sum(seconds):.1f} s in all")
    failing: dict[str, list[RunResult]] = {}
    for run in results:
        for test_id in run.failures:
            failing.setdefault(test_id, []).append(run)
    if not failing:
        lines.append(f"no test failed in {len(results)} runs")
        return "\n".join(lines)
    lines.append(f"{len(failing)} tests failed at least once:")
    for test_id, runs in sorted(failing.items(), key=lambda item: (-len(item[1]), item[0])):
        first = runs[0]
        message = first.failures[test_id].strip().splitlines()
        lines.append(f"- {test_id}: failed in {len(runs)} of {len(results)} runs (runs {[r.number for r in runs]})")
        lines.append(f"  first failure (run {first.number}, {first.log}):")
        lines.extend(f"    {line}" for line in message[:12])
    return "\n".join(lines)


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The options, and the arguments after ``--`` that go to every pytest run."""
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="test files or folders to run (as given to pytest)")
    parser.add_argument("--runs", type=int, default=10, help="how many times to run them (default: 10)")
    parser.add_argument("--busy", type=int, default=2, help="busy processes spinning beside the runs (default: 2)")
    parser.add_argument("--log-dir", type=Path, default=None, help="where run logs go (default: a new temp dir)")
    options = parser.parse_args(argv)
    if options.runs < 1:
        parser.error(f"--runs must be at least 1, not {options.runs}")
    if options.busy < 0:
        parser.error(f"--busy must be at least 0, not {options.busy}")
    return options, extra


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: the running pytest is killed (``subprocess.run`` does on any exception), the busy processes
    ended and the finished runs summarised."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the soak; see the module's docstring."""
    options, extra = parse(sys.argv[1:] if argv is None else argv)
    log_dir = options.log_dir or Path(tempfile.mkdtemp(prefix="soak-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"soak: {options.runs} runs of {' '.join(options.paths)} beside {options.busy} busy processes; logs in "
          f"{log_dir}", flush=True)  # fmt: skip
    results: list[RunResult] = []
    signal.signal(signal.SIGTERM, _interrupt)  # a soak ended by SIGTERM (a background job ignores SIGINT) cleans up
    busy = start_busy(options.busy)
    try:
        for number in range(1, options.runs + 1):
            run = one_run(number, options.paths, extra, log_dir)
            results.append(run)
            verdict = "passed" if not run.failures else f"{len(run.failures)} failing"
            print(f"soak: run {number}/{options.runs}: {verdict} in {run.seconds:.1f} s ({run.log})", flush=True)
    except KeyboardInterrupt:
        print("soak: interrupted; the summary covers the finished runs", flush=True)
    finally:
        stop_busy(busy)
    text = summary(results)
    (log_dir / "summary.txt").write_text(text + "\n")
    print(text)
    return 1 if any(run.failures for run in results) or not results else 0


if __name__ == "__main__":
    sys.exit(main())
