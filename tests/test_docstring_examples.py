"""Every ``>>>`` example in the package's docstrings runs and gives what it shows (``doctest``, one test per module
that has examples). The modules are found by their source, so collecting this file imports nothing heavy; a module is
imported when its examples run."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fastdist_lab"
PROMPT = re.compile(r"^\s*>>> ", re.M)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


EXAMPLE_MODULES = sorted(
    _module_name(path) for path in PACKAGE.rglob("*.py") if PROMPT.search(path.read_text())
)  # fmt: skip
"""The modules whose source holds a ``>>>`` example."""


def run_examples(module: ModuleType) -> tuple[int, int, str]:
    """Run every docstring example of ``module``: ``(examples run, failures, doctest's report of the failures)``."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    for test in finder.find(module, module.__name__):
        runner.run(test, out=report.append)
    results = runner.summarize(verbose=False)
    return results.attempted, results.failed, "".join(report)


def test_the_package_has_docstring_examples():
    assert len(EXAMPLE_MODULES) >= 6, EXAMPLE_MODULES


@pytest.mark.parametrize("name", EXAMPLE_MODULES)
def test_every_docstring_example_runs_as_shown(name):
    module = importlib.import_module(name)
    attempted, failed, report = run_examples(module)
    prompts = len(PROMPT.findall(Path(module.__file__).read_text()))
    assert attempted == prompts, f"{prompts} '>>>' lines in {name} but doctest ran {attempted} (one it cannot find?)"
    assert failed == 0, report


def test_a_wrong_example_is_reported(tmp_path):
    source = tmp_path / "shown_wrong.py"
    source.write_text(
        'def double(x):\n    """Twice ``x``.\n\n    >>> double(2)\n    5\n    >>> double(1)\n    2\n    """\n'
        "    return 2 * x\n"
    )
    spec = importlib.util.spec_from_file_location("shown_wrong", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    attempted, failed, report = run_examples(module)
    assert (attempted, failed) == (2, 1)
    assert "double(2)" in report and "Expected:\n    5\nGot:\n    4" in report
