"""Write a student's copy of course notebooks: the worked solutions taken out, every output cleared.

    python scripts/strip_solutions.py notebooks/09_collectives_by_hand.ipynb [more.ipynb ...] [--out-dir student]

A solution is a code cell tagged ``solution`` (stored collapsed: ``metadata.jupyter.source_hidden``); the exercise
stub before it (``answer = ...``) and the check after it stay, so the check says "replace the ... with your answer"
until the student writes one. Outputs go too: a stored ``correct: ...`` would give the answer away. Each copy keeps
its file name, under ``--out-dir`` (default ``student``), never over its source. Bad input: one line on stderr,
exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

SOLUTION_TAG = "solution"


def strip(notebook: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """``notebook`` without its solution cells and with every output cleared, and how many cells were removed."""
    kept, removed = [], 0
    for cell in notebook["cells"]:
        if SOLUTION_TAG in cell.get("metadata", {}).get("tags", []):
            removed += 1
            continue
        cell = dict(cell)
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        kept.append(cell)
    return dict(notebook, cells=kept), removed


def main(argv: list[str] | None = None) -> int:
    """Strip every notebook named in ``argv``; print where each copy went."""
    parser = argparse.ArgumentParser(description="Write students' copies of notebooks without solution cells.")
    parser.add_argument("notebooks", nargs="+", type=Path, help="notebooks to strip (.ipynb)")
    parser.add_argument("--out-dir", type=Path, default=Path("student"), help="where the copies go (default: student)")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        try:
            notebook = json.loads(path.read_text())
            notebook["cells"]  # noqa: B018 - a JSON file that is no notebook fails here
        except (OSError, ValueError, KeyError, TypeError) as error:
            print(f"strip_solutions: {path} is not a readable notebook ({type(error).__name__}: {error})",
                  file=sys.stderr)  # fmt: skip
            return 2
        target = args.out_dir / path.name
        if target.resolve() == path.resolve():
            print(f"strip_solutions: {target} would overwrite its source; choose another --out-dir", file=sys.stderr)
            return 2
        stripped, removed = strip(notebook)
        args.out_dir.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(stripped, indent=1, ensure_ascii=False) + "\n")
        print(f"{target}: {removed} solution cell(s) removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
