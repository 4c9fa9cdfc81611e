"""``fastdist-lab check``: the main job, on a local gloo cluster."""

from __future__ import annotations

import json

from fastdist_lab.cli import main


def test_check_default_layout_passes_and_prints_the_table(capsys, tmp_path):
    report = tmp_path / "check.json"
    assert main(["check", "--quiet", "--backend", "gloo", "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("layout: Layout(world_size=8") and "Verification OK" in out
    for dim in ("tensor", "pipeline", "sequence_data", "model_and_sequence_data"):
        assert dim in out
    assert json.loads(report.read_text())["layout"]["world_size"] == 8
    # the main job also compares every rank's real generator streams with the prediction
    assert "real vs predicted (step 0, training): all 40 (rank, generator) streams match exactly" in out
    assert out.rstrip().endswith("result: OK")


def test_check_bad_layout_is_one_line_and_exit_2(capsys):
    assert main(["check", "--quiet", "--world-size", "8", "--tp", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tensor_parallel=3" in err


def test_check_nccl_without_gpus_is_one_line_and_exit_2(capsys):
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("NCCL is available here; scripts/gpu_check.sh covers that path")
    assert main(["check", "--quiet", "--backend", "nccl"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NCCL needs one GPU per rank" in err


def test_check_bad_timeout_is_exit_2(capsys):
    assert main(["check", "--quiet", "--timeout", "0"]) == 2
    assert "--timeout" in capsys.readouterr().err
