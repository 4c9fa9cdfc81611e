"""The public API held to a committed list (``tests/api/public_names.json``): every public namespace (the root and
each subpackage) and the public attributes of every class they export. A removal or a rename shows up here, so it is
made on purpose, with a deprecated alias for one release. Regenerate the list after such a change with
``python scripts/public_names.py``."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "public_names.py"
REGENERATE = "python scripts/public_names.py"


def _script():
    spec = importlib.util.spec_from_file_location("public_names_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_public_names_are_the_committed_list():
    script = _script()
    changes = script.difference(json.loads(script.LIST.read_text()), script.public_names())
    assert changes == [], (
        "the public names changed (a removed or renamed name needs a deprecated alias for one release); "
        f"if this is deliberate, regenerate the list with `{REGENERATE}`:\n" + "\n".join(changes)
    )


def test_the_list_holds_every_namespace_and_the_main_classes():
    names = json.loads((REPO / "tests" / "api" / "public_names.json").read_text())
    assert set(names["namespaces"]) == {
        "fastdist_lab",
        *(
            f"fastdist_lab.{p}"
            for p in ("errors", "viz", "conventions", "streams", "setup", "cost", "runtime", "checks", "exercises")
        ),
        "fastdist_lab.widgets",
    }
    assert {"plot", "world_size", "tensor_parallel"} <= set(names["classes"]["fastdist_lab.Layout"])
    assert {"from_args", "expert", "rank_of"} <= set(names["classes"]["fastdist_lab.conventions.Megatron"])
    assert "estimate" in names["namespaces"]["fastdist_lab.cost"]


def test_a_name_removed_or_renamed_in_a_copy_of_the_package_breaks_the_list(tmp_path):
    copy = tmp_path / "src" / "fastdist_lab"
    shutil.copytree(REPO / "src" / "fastdist_lab", copy, ignore=shutil.ignore_patterns("__pycache__"))
    cost = copy / "cost" / "__init__.py"
    assert ' "divisors",' in cost.read_text()
    cost.write_text(cost.read_text().replace(' "divisors",', ""))  # removed from a subpackage
    layout = copy / "layout.py"
    assert "    def plot_dims(self" in layout.read_text()
    layout.write_text(layout.read_text().replace("    def plot_dims(self", "    def plot_dim(self"))  # a renamed method
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"],
        env=dict(os.environ, PYTHONPATH=str(copy.parent)), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.splitlines() == ["fastdist_lab.Layout: -plot_dims +plot_dim", "fastdist_lab.cost: -divisors"]
