"""The ``fastdist-lab layout`` command: output formats, one rank, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fastdist_lab.cli import main

FLAGS = [
    "--world-size",
    "16",
    "--local-world-size",
    "8",
    "--tensor-parallel",
    "2",
    "--pipeline-parallel",
    "2",
    "--sequence-data-parallel",
    "2",
]


def test_layout_table(capsys):
    assert main(["layout", *FLAGS]) == 0
    out = capsys.readouterr().out
    assert "tensor_rank" in out
    assert "model_and_sequence_data (size 8, 2 groups): [0 1 2 3 8 9 10 11] [4 5 6 7 12 13 14 15]" in out


def test_layout_json(capsys):
    assert main(["layout", *FLAGS, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["ranks"]) == 16 and doc["ranks"][5]["data_rank"] == 2
    assert doc["groups"]["data"][0] == [0, 2, 4, 6]


def test_layout_csv(capsys):
    assert main(["layout", *FLAGS, "--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("rank,node,local_rank,tensor_rank")
    assert len(lines) == 17
    assert lines[6].split(",")[0] == "5" and "1 3 5 7" in lines[6]


def test_layout_one_rank(capsys):
    assert main(["layout", *FLAGS, "--rank", "5", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    dims = {d["dim"]: d for d in doc["dims"]}
    assert dims["model_and_sequence_data"]["global_ranks"] == "(4, 5, 6, 7, 12, 13, 14, 15)"
    assert dims["pipeline"]["global_ranks"] == "range(5, 21, 8)"
    assert doc["coordinates"]["batch_data_rank"] == 1
    assert set(doc["seeds"]) == {"default_cpu", "pp_init", "tp_init", "pp", "tp"}


def test_default_layout_is_the_main_job_layout(capsys):
    assert main(["layout"]) == 0
    assert "Layout(world_size=8, local_world_size=8, tensor_parallel=2, pipeline_parallel=2" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--tensor-parallel", "3"], "tensor_parallel=3"),
        (["--tensor-parallel", "x"], "invalid int value: 'x'"),
        (["--world-size", "0"], "world_size=0"),
        (["--rank", "99"], "rank=99"),
        (["--format", "xml"], "invalid choice"),
    ],
)
def test_bad_input_one_line_exit_2(args, needle):
    proc = subprocess.run(
        [sys.executable, "-m", "fastdist_lab", "layout", *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr


def test_console_script_is_installed():
    import shutil

    exe = shutil.which("fastdist-lab") or str(__import__("pathlib").Path(sys.executable).with_name("fastdist-lab"))
    proc = subprocess.run(
        [exe, "layout", "--world-size", "4", "--tp", "2", "--pp", "1", "--sdp", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "tensor (size 2, 2 groups): [0 1] [2 3]" in proc.stdout


def test_import_is_light():
    code = (
        "import sys, fastdist_lab; print(sorted(m for m in ('torch', 'matplotlib', 'ipywidgets') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip()
    assert out == "[]"
