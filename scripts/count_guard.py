"""A guard against a test run that stops early and still looks green.

A session that is interrupted, or whose process ends in the middle (``os._exit``, a signal, a killed runner), can
print a summary of only the tests it got to, or nothing at all, with an exit code of 0. This guard compares two of
pytest's own counts: the tests collected and the tests whose run finished.

As a pytest plugin it writes them to a JSON file after the collection and after every test::

    python -m pytest -p scripts.count_guard --count-file=counts.json

(the path in the option's word: given as a word of its own, pytest-xdist's workers take it for a test path and its
folder for their root folder)

and fails the session (exit code 1, one line in the summary) when fewer tests finished than were collected. As a
program, run after pytest, it reads that file and exits 1 with one line naming the numbers unless every collected
test finished; a missing or unfinished file (the process never reached its end) is a failure too::

    python scripts/count_guard.py counts.json

``.ci/run`` uses both.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--count-file PATH``: where the counts go."""
    parser.addoption("--count-file", default=None, help="write the collected and finished test counts here (JSON)")


class CountGuard:
    """The counts of one session, written to ``path`` as they change (a plugin registered by ``--count-file``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.collected: int | None = None
        self.finished = 0
        self.exitstatus: int | None = None
        self.write()

    def write(self) -> None:
        """Replace the counts file with the counts so far (atomically: a reader never sees half a file)."""
        document = {"collected": self.collected, "finished": self.finished, "exitstatus": self.exitstatus}
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps(document))
        os.replace(temporary, self.path)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Record how many tests the session will run (after deselection)."""
        self.collected = len(session.items)
        self.write()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """Under pytest-xdist the controller collects nothing itself: each worker collects the whole session (after
        deselection) and reports its test ids here, the same list from every worker."""
        self.collected = len(ids)
        self.write()

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        """One more test finished (passed, failed, skipped or errored: its whole run, teardown included)."""
        self.finished += 1
        self.write()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Write the final counts; a session that finished fewer tests than it collected fails."""
        problem = shortfall(self.collected, self.finished)
        if problem and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        self.exitstatus = int(session.exitstatus)
        self.write()
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if problem and reporter is not None:
            reporter.write_line(f"count guard: {problem}", red=True, bold=True)


def pytest_configure(config: pytest.Config) -> None:
    """Start counting when ``--count-file`` is given (a file left by an earlier run is replaced). Under pytest-xdist
    only the controller counts: it hears of every worker's collection and of every test that finished on any of
    them (its workers, which get the same options, leave the file alone)."""
    path = config.getoption("--count-file")
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(CountGuard(Path(path)), "count_guard_counts")


def shortfall(collected: int | None, finished: int | None) -> str:
    """What is wrong with these counts, in one line; empty when every collected test finished."""
    if collected is None:
        return "the session never finished collecting (no count of collected tests)"
    if finished is None or finished < collected:
        return f"only {finished or 0} of {collected} collected tests ran to the end: the session stopped early"
    return ""


def check(path: Path) -> str:
    """The problem with the counts file at ``path`` (empty when every collected test finished)."""
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return f"{path}: no counts (pytest never started with -p scripts.count_guard --count-file {path})"
    except (OSError, ValueError) as error:
        return f"{path}: unreadable counts ({error})"
    problem = shortfall(document.get("collected"), document.get("finished"))
    if not problem and document.get("exitstatus") is None:
        problem = "the session never reached its end (the process ended inside pytest)"
    return problem


def main(argv: list[str]) -> int:
    """``count_guard.py COUNTS_FILE``: exit 0 when every collected test finished, else 1 with one line."""
    if len(argv) != 1:
        sys.stderr.write("usage: python scripts/count_guard.py COUNTS_FILE\n")
        return 2
    problem = check(Path(argv[0]))
    if problem:
        sys.stderr.write(f"count guard: {problem}\n")
        return 1
    document = json.loads(Path(argv[0]).read_text())
    print(f"count guard: all {document['collected']} collected tests ran")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
