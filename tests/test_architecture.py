"""The house rules, checked by kept tools: layers (import-linter reads every import, function-level and
TYPE_CHECKING ones included), file sizes, and a light ``import fastdist_lab``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "fastdist_lab"
MAX_LINES = 500


def _lint(source_root: Path, cwd: Path) -> subprocess.CompletedProcess:
    """Run import-linter with the project's contracts on the package found under ``source_root``."""
    env = dict(os.environ, PYTHONPATH=str(source_root))
    return subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
         "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_layers_contract_is_kept():
    result = _lint(REPO / "src", REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "upward"),
    [
        ("layout.py", "from .viz import plot_layout"),  # core -> viz
        ("streams/stream_report.py", "from ..runtime import LocalCluster"),  # streams -> runtime
        ("conventions/megatron.py", "from ..streams import predict"),  # independent siblings
        ("runtime/results.py", "from ..checks import check_layout"),  # runtime -> checks
    ],
)
def test_an_upward_import_inside_a_function_breaks_the_contract(tmp_path, module, upward):
    shutil.copytree(REPO / "src", tmp_path / "src")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "src" / "fastdist_lab" / module
    target.write_text(
        target.read_text()
        + textwrap.dedent(f"""

        def _reaches_up():
            {upward}
        """)
    )
    result = _lint(tmp_path / "src", tmp_path)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout and "0 kept, 1 broken" in result.stdout


def test_no_module_of_the_package_is_over_500_lines():
    sizes = {path.relative_to(PACKAGE): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    assert sizes, "no modules found"
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}


def test_importing_the_package_stays_light():
    code = (
        "import sys, fastdist_lab; "
        "heavy = sorted(m for m in ('torch', 'matplotlib', 'ipywidgets', 'pandas') if m in sys.modules); "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_python_from_the_clones_parent_imports_the_installed_package(tmp_path):
    # A clone named like the package, seen from its parent: with the src/ layout its root holds no package
    # folder that could shadow the installed one (it is at most a namespace-package candidate, which loses).
    clone = tmp_path / "fastdist_lab"
    clone.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, clone / name)
    shutil.copytree(REPO / "src", clone / "src")
    out = subprocess.run(
        [sys.executable, "-c", "import fastdist_lab, fastdist_lab.layout; print(fastdist_lab.__file__)"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert Path(out.stdout.strip()).resolve().parent == PACKAGE.resolve()
