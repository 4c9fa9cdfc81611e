"""The cost package is layer 2: it imports only core modules (the vocabulary of a set-up among them), and importing it
stays light."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import fastdist_lab

PACKAGE = Path(fastdist_lab.__file__).parent / "cost"
CORE = {
    "config",
    "layout",
    "seeds",
    "numbering",
    "errors",
    "validation",
    "painters",
    "formatting",
    "unit_frame",
    "lazy",
    "setup",
    "experts",
}


def test_cost_imports_only_core():
    for path in sorted(PACKAGE.rglob("*.py")):
        depth = len(path.relative_to(PACKAGE).parts)  # cost/x.py: 1, cost/formulas/x.py: 2
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level > depth:  # above cost
                top = (node.module or "").split(".")[0]
                assert top in CORE, f"{path.relative_to(PACKAGE)} imports {'.' * node.level}{node.module}"
            absolute = isinstance(node, ast.Import) or (isinstance(node, ast.ImportFrom) and node.level == 0)
            if absolute:
                names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                for name in names:
                    assert not name.startswith(("torch", "matplotlib", "ipywidgets", "fastdist_lab")), (path, name)


def test_root_reexports_are_lazy_and_light(tmp_path):
    code = (
        "import sys, json, fastdist_lab as f\n"
        "before = 'fastdist_lab.cost' in sys.modules\n"
        "r = f.estimate(f.Layout(world_size=8, local_world_size=8, tensor_parallel=2), 'llama2-7b')\n"
        "after = sorted(m for m in ('pandas', 'torch', 'matplotlib', 'ipywidgets') if m in sys.modules)\n"
        "print(json.dumps([before, after, r.peak_bytes > 0, f.estimate is f.cost.estimate]))\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    before, heavy, positive, same = json.loads(out.stdout)
    assert before is False and heavy == [] and positive and same
    for name in ("Transformer", "Training", "Hardware", "estimate", "compare"):
        assert name in fastdist_lab.__all__ and getattr(fastdist_lab, name) is getattr(fastdist_lab.cost, name)
