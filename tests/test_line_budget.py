"""scripts/line_budget.py: the package's lines sorted by the commit that wrote them, on small git repositories made
here (lines from before ``--since``, a listed feature's lines, everything else as the same features; moved lines
keep their first commit; a grown package fails ``--check``; a features line that names no commit is refused)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "line_budget.py"
_spec = importlib.util.spec_from_file_location("line_budget", SCRIPT)
line_budget = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(line_budget)

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
OLD = [f"def old_function_number_{i}(argument_one, argument_two):  # written before the issue\n" for i in range(4)]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def _commit(repo: Path, files: dict[str, list[str] | None], message: str) -> str:
    for name, lines in files.items():
        path = repo / "src" / "fastdist_lab" / name
        if lines is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(lines))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture()
def repo(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A package of 4 old lines at 'filed'; then a feature adds 2 lines and a refactor 1 line."""
    _git(tmp_path, "init", "-q")
    commits = {"filed": _commit(tmp_path, {"a.py": OLD, "notes.txt": ["not python\n"]}, "filed")}
    commits["feature"] = _commit(tmp_path, {"a.py": [*OLD, "def new_feature():\n", "    return 1\n"]}, "feature")
    commits["refactor"] = _commit(tmp_path, {"b.py": ["VALUE = 2\n"]}, "refactor")
    return tmp_path, commits


def _features(tmp_path: Path, text: str) -> Path:
    path = tmp_path.parent / f"{tmp_path.name}-features.txt"
    path.write_text(text)
    return path


def test_lines_are_sorted_by_the_commit_that_wrote_them(repo):
    path, commits = repo
    features = line_budget.read_features(path, _features(path, f"{commits['feature'][:7]} issue 99  # a comment\n"))
    at_since, groups = line_budget.budget(path, commits["filed"], "HEAD", features)
    assert at_since == 4
    assert groups == {"issue 99": 2, line_budget.SAME: 5}  # 4 old lines + the refactor's line
    text = "\n".join(line_budget.report(at_since, groups, "filed", "HEAD"))
    assert "issue 99: 2" in text and "same features: 5 against 4 at filed (+1)" in text


def test_an_unlisted_commit_counts_as_the_same_features(repo):
    path, commits = repo
    at_since, groups = line_budget.budget(path, commits["filed"], "HEAD", {})
    assert groups == {line_budget.SAME: 7}


def test_moved_lines_keep_the_commit_that_first_wrote_them(repo):
    path, commits = repo
    _commit(path, {"a.py": ["def new_feature():\n", "    return 1\n"], "c.py": OLD}, "move the old lines to c.py")
    features = {commits["feature"]: "issue 99"}
    assert line_budget.budget(path, commits["filed"], "HEAD", features)[1] == {"issue 99": 2, line_budget.SAME: 5}


def test_check_fails_when_the_same_features_grew_and_passes_when_they_shrank(repo, capsys):
    path, commits = repo
    listed = _features(path, f"{commits['feature']} issue 99\n")
    args = ["--repo", str(path), "--since", commits["filed"], "--features", str(listed), "--check"]
    assert line_budget.main(args) == 1  # 5 lines of the same features against 4
    assert "(+1)" in capsys.readouterr().out
    _commit(path, {"a.py": [*OLD[:2], "def new_feature():\n", "    return 1\n"]}, "two old lines removed")
    assert line_budget.main(args) == 0
    assert "same features: 3 against 4" in capsys.readouterr().out


def test_a_features_line_that_names_no_commit_is_refused(repo):
    path, commits = repo
    bad = _features(path, f"{commits['feature']} issue 99\nfeedbee issue 98\n")
    done = subprocess.run([sys.executable, str(SCRIPT), "--repo", str(path), "--since", commits["filed"],
                           "--features", str(bad)], capture_output=True, text=True)
    assert done.returncode == 2
    assert "features.txt:2: 'feedbee' is not a commit of" in done.stderr
    malformed = _features(path, f"{commits['feature']}\n")
    assert line_budget.main(["--repo", str(path), "--features", str(malformed)]) == 2


def test_an_unknown_revision_is_refused_in_one_line(repo, capsys):
    path, _ = repo
    assert line_budget.main(["--repo", str(path), "--since", "no-such-rev", "--features", os.devnull]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("line_budget: git rev-list no-such-rev") and "\n" not in error
