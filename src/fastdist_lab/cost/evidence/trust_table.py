"""The table of validated runs the error bands rest on, as data: ``trust_table.json`` beside this module, one row per
validated run (its name, engine, hardware family, kind of parallelism, GPUs, the model's error on it, the MFU it
measured and its sequence length), with a digest of everything the rows were computed from (``inputs_digest``).

The table is the model's own output on the published runs, so it is written by a command, never by hand::

    python -m fastdist_lab.cost.evidence.write_trust

and ``stale()`` says, without running the model, whether the files it was computed from changed since (the published
runs, the vocabulary and the formulas): a quick test holds it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

TABLE = Path(__file__).with_name("trust_table.json")
"""Where the table lives (package data)."""

COLUMNS: tuple[str, ...] = ("run", "engine", "family", "kind", "gpus", "error", "mfu", "seq_length")
"""The columns of each row (``trust.TrustRun``'s fields)."""

_PACKAGE = Path(__file__).resolve().parents[2]


NOT_INPUTS: tuple[str, ...] = ("trust_table.py", "write_trust.py", "trust.py", "published_comparisons.py",
                               "published_collectives.py", "__init__.py")  # fmt: skip
"""Modules beside the inputs that the table's rows do not depend on."""


def input_files() -> list[Path]:
    """The files the table is computed from: the published runs (``runs/*.toml``), the evidence's Python that reads
    and prices them, the cost formulas and the vocabulary of a set-up."""
    here = Path(__file__).resolve().parent
    found = [*sorted((here / "runs").glob("*.toml")), *sorted(here.glob("*.py"))]
    found += sorted((_PACKAGE / "cost" / "formulas").glob("*.py")) + sorted((_PACKAGE / "setup").glob("*.py"))
    return [path for path in found if path.name not in NOT_INPUTS]


def _code(path: Path) -> bytes:
    """What of a file can change the rows: a data file's bytes, a module's code without its docstrings and comments."""
    if path.suffix != ".py":
        return path.read_bytes()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):  # a docstring
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    return ast.dump(tree).encode()


def inputs_digest() -> str:
    """SHA-256 over ``input_files()``: their paths inside the package and their code (``_code``)."""
    digest = hashlib.sha256()
    for path in input_files():
        digest.update(path.relative_to(_PACKAGE).as_posix().encode() + b"\0" + _code(path) + b"\0")
    return digest.hexdigest()


@functools.cache
def _document() -> dict[str, Any]:
    return json.loads(TABLE.read_text())


def table_rows() -> list[tuple[Any, ...]]:
    """Every row of the table, as a tuple of ``COLUMNS``."""
    return [tuple(row) for row in _document()["rows"]]


def stale() -> str:
    """Why the table is stale (empty when it is not): the files it was computed from changed since it was written."""
    if _document().get("inputs") != inputs_digest():
        return (
            f"{TABLE.name} was computed from other inputs than the files now in the package (the published runs, the "
            "formulas or the vocabulary changed): run `python -m fastdist_lab.cost.evidence.write_trust`"
        )
    return ""


def document(rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    """The table's file content for ``rows`` (as ``write_trust`` writes it)."""
    return {
        "written_by": "python -m fastdist_lab.cost.evidence.write_trust",
        "inputs": inputs_digest(),
        "columns": list(COLUMNS),
        "rows": [list(row) for row in rows],
    }


def write(rows: list[tuple[Any, ...]], path: Path = TABLE) -> None:
    """Write the table of ``rows`` to ``path`` (one row a line, so a change reads as a diff)."""
    text = json.dumps(document(rows), indent=1)
    lines = ",\n".join("  " + json.dumps(list(row)) for row in rows)
    head, _, _ = text.partition('"rows": [')
    path.write_text(f'{head}"rows": [\n{lines}\n ]\n}}\n')
    _document.cache_clear()
