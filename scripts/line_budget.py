"""Count the package's lines and say which features of later issues they serve, by who wrote each line.

Issue 26 asks for "package lines no more than today (24,543) for the same features": the package at the commit the
issue was filed at (``--since``, default 4fd4673) against the package now, leaving out what later issues added.
A plain ``wc -l`` cannot tell those apart, so this script asks ``git blame -M -C`` which commit wrote each line of
every tracked ``src/fastdist_lab/**.py`` at ``--rev`` (default HEAD; moved and copied lines keep their first
commit) and sorts the lines:

- written at or before ``--since``: the features the package had then;
- written after it by a commit that ``--features`` gives a feature to (one line a commit: ``<hash> <feature>``,
  ``#`` starts a comment; the committed list is ``scripts/line_budget_features.txt``): that feature's lines;
- written after it by any other commit (refactors, fixes, issue 26 itself, and commits nobody labelled): counted
  with the first group, as lines of the same features.

It prints the count at ``--since``, each group and the same-features total::

    python scripts/line_budget.py
    python scripts/line_budget.py --check      # exit 1 when the same features take more lines than at --since

Exit status: 0, or 1 with ``--check`` when the same-features count is above the count at ``--since``, 2 for bad
arguments (an unknown revision, a features line that names no commit, a checkout without the history).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

FILED_AT = "4fd4673"
"""The commit main was at when issue 26 was filed (the package had 24,543 lines)."""
PACKAGE = "src/fastdist_lab"
HEADER = re.compile(r"^([0-9a-f]{40}) \d+ \d+")
SAME = "same features"


class BudgetError(Exception):
    """A bad revision or features file: the message names it."""


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` and return its output; a failure is a :class:`BudgetError` with git's message."""
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode:
        message = (done.stderr.strip() or f"exit {done.returncode}").splitlines()[0]
        raise BudgetError(f"git {' '.join(args)}: {message}")
    return done.stdout


def read_features(repo: Path, path: Path) -> dict[str, str]:
    """The ``commit -> feature`` map of a features file, each commit resolved to its full hash."""
    features = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise BudgetError(f"{path}:{number}: want '<commit> <feature>', got {raw.strip()!r}")
        try:
            full = git(repo, "rev-parse", "--verify", "--quiet", f"{parts[0]}^{{commit}}").strip()
        except BudgetError:
            raise BudgetError(f"{path}:{number}: {parts[0]!r} is not a commit of {repo}") from None
        features[full] = parts[1].strip()
    return features


def line_authors(repo: Path, rev: str) -> Counter[str]:
    """How many lines of the package's Python files at ``rev`` each commit wrote (``git blame -M -C``)."""
    files = git(repo, "ls-tree", "-r", "--name-only", rev, "--", PACKAGE).split()
    authors: Counter[str] = Counter()
    for name in (f for f in files if f.endswith(".py")):
        for line in git(repo, "blame", "-M", "-C", "--line-porcelain", rev, "--", name).splitlines():
            match = HEADER.match(line)
            if match:
                authors[match.group(1)] += 1
    return authors


def budget(repo: Path, since: str, rev: str, features: dict[str, str]) -> tuple[int, Counter[str]]:
    """The line count at ``since`` and the lines at ``rev`` per group (:data:`SAME` or a feature)."""
    before = set(git(repo, "rev-list", since).split())
    at_since = sum(line_authors(repo, since).values())
    groups: Counter[str] = Counter()
    for commit, lines in line_authors(repo, rev).items():
        groups[SAME if commit in before else features.get(commit, SAME)] += lines
    return at_since, groups


def report(at_since: int, groups: Counter[str], since: str, rev: str) -> list[str]:
    """The printed lines: the count at ``since``, each feature's lines and the same-features total at ``rev``."""
    total = sum(groups.values())
    lines = [f"package at {since}: {at_since:,} lines", f"package at {rev}: {total:,} lines, of which"]
    lines += [f"  {feature}: {n:,}" for feature, n in sorted(groups.items()) if feature != SAME]
    same = groups[SAME]
    lines.append(f"  {SAME} (written before {since}, or after it by no listed feature): {same:,}")
    lines.append(f"same features: {same:,} against {at_since:,} at {since} ({same - at_since:+,})")
    return lines


def main(argv: list[str] | None = None) -> int:
    """The command line: print the budget; with ``--check`` exit 1 when the same features grew."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = Path(__file__).resolve().parent
    parser.add_argument("--repo", type=Path, default=here.parent, help="the checkout (default: this script's)")
    parser.add_argument("--since", default=FILED_AT, help=f"the commit to compare with (default {FILED_AT})")
    parser.add_argument("--rev", default="HEAD", help="the commit to count (default HEAD)")
    parser.add_argument("--features", type=Path, default=here / "line_budget_features.txt",
                        help="commit -> feature lines (default scripts/line_budget_features.txt)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the same features take more lines")
    args = parser.parse_args(argv)
    try:
        at_since, groups = budget(args.repo, args.since, args.rev, read_features(args.repo, args.features))
    except (BudgetError, OSError) as error:
        print(f"line_budget: {error}", file=sys.stderr)
        return 2
    print("\n".join(report(at_since, groups, args.since, args.rev)))
    return 1 if args.check and groups[SAME] > at_since else 0


if __name__ == "__main__":
    sys.exit(main())
