"""Regression tests of structural faults found in review: each failed on the code before the fix."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fastdist_lab"


def test_a_broken_sub_command_import_is_an_error_not_a_missing_command():
    code = (
        "import sys\n"
        "sys.modules['fastdist_lab.commands.streams'] = None  # its import now fails\n"
        "try:\n"
        "    from fastdist_lab.cli import build_parser\n"
        "    build_parser()\n"
        "except ImportError as error:\n"
        "    print('ImportError', error)\n"
        "else:\n"
        "    print('silently dropped')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.startswith("ImportError"), out.stdout


def test_no_function_turns_its_locals_into_fields():
    calls = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("locals", "vars"):
                calls.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert calls == []


def test_every_public_name_has_a_docstring():
    missing = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        if not ast.get_docstring(tree):
            missing.append(f"{path.relative_to(PACKAGE)} (module)")
        for node in tree.body:
            nodes = [node]
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                nodes += [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            for item in nodes:
                if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue
                if item.name.startswith("_") or ast.get_docstring(item):
                    continue
                decorators = {getattr(d, "attr", getattr(d, "id", "")) for d in item.decorator_list}
                if "setter" in decorators or "deleter" in decorators:
                    continue
                missing.append(f"{path.relative_to(PACKAGE)}:{item.lineno} {item.name}")
    assert missing == []
