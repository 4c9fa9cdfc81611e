"""A field added to ``Training`` is one declaration: in a copy of the package, one more ``setting(...)`` field shows in
the commands' flags, the cost panel's controls and the search (its limit, its rows' ``Training``), with its check."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import fastdist_lab

PACKAGE = Path(fastdist_lab.__file__).parent

FIELD = '''
    activation_offload: bool = setting(
        False, flag="--activation-offload", help="activations offloaded to the host between passes", kind="flag",
        control="checkbox", label="activation offload", css="offload",
    )
    offload_share: float = setting(
        0.5, flag="--offload-share", help="the share of the activations offloaded", kind="number", minimum=0.0,
        maximum=1.0, control="float", label="offload share", css="offload-share",
    )
'''

PROBE = textwrap.dedent('''
    import contextlib, io, json, sys
    from fastdist_lab import cli
    from fastdist_lab.cost import LIMITS, search
    from fastdist_lab.setup import Training
    from fastdist_lab.widgets import CostPanel

    found = {}
    for command in ("cost", "search", "train-step"):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            cli.main([command, "--help"])
        found[command] = out.getvalue()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        found["code"] = cli.main(["cost", "--activation-offload", "--offload-share", "0.25", "--format", "json"])
        found["bad"] = cli.main(["cost", "--offload-share", "2"])
    found["training"] = json.loads(out.getvalue())["summary"]["training"]
    found["bad_err"] = err.getvalue()
    result = search("llama2-7b", 16, hardware="h100-sxm-80gb", global_batch_size=64, top=3, activation_offload=True)
    found["limit"] = LIMITS["activation_offload"]
    found["row"] = [result.training(i).activation_offload for i in range(len(result))]
    panel = CostPanel()
    control = panel.controls["activation_offload"]
    control.value = True
    found["panel"] = [panel.training().activation_offload, "fdl-cost-offload" in control._dom_classes,
                      panel.controls["offload_share"].max]
    print(json.dumps(found))
''')


def test_a_field_declared_once_shows_in_the_commands_the_panel_and_the_search(tmp_path):
    copy = tmp_path / "src" / "fastdist_lab"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    training = copy / "setup" / "training.py"
    text = training.read_text()
    anchor = "    )  # fmt: skip\n\n    def __post_init__(self) -> None:"
    assert anchor in text
    added = "    )" + FIELD + "    # fmt: skip\n\n    def __post_init__(self) -> None:"
    training.write_text(text.replace(anchor, added))
    env = {"PYTHONPATH": str(copy.parent), "PATH": "", "MPLBACKEND": "Agg"}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=tmp_path, env=env,
                         timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.splitlines()[-1])
    for command in ("cost", "search", "train-step"):
        assert "--activation-offload" in found[command] and "activations offloaded" in found[command], command
        assert "--offload-share" in found[command], command
    assert found["code"] == 0 and found["training"]["activation_offload"] is True
    assert found["training"]["offload_share"] == 0.25
    assert found["bad"] == 2 and found["bad_err"].count("\n") == 1 and "offload_share=2.0" in found["bad_err"]
    assert found["limit"] is False and found["row"] and all(found["row"])
    assert found["panel"] == [True, True, 1.0]
