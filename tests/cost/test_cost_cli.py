"""The ``fastdist-lab cost`` command: table, JSON and CSV output, and one-line errors with exit code 2."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from fastdist_lab import Layout
from fastdist_lab.cli import main
from fastdist_lab.cost import Hardware, Training, Transformer, estimate

FLAGS = ["--world-size", "64", "--local-world-size", "8", "--tp", "8", "--pp", "2", "--sdp", "1"]
SET_UP = ["--model", "llama2-70b", "--micro-batch-size", "1", "--seq-length", "4096", "--num-microbatches", "16",
          "--distributed-optimizer", "--sequence-tensor-parallel", "--recompute", "selective"]  # fmt: skip


def expected():
    layout = Layout(world_size=64, local_world_size=8, tensor_parallel=8, pipeline_parallel=2)
    training = Training(num_microbatches=16, distributed_optimizer=True, sequence_tensor_parallel=True,
                        recompute="selective")  # fmt: skip
    return estimate(layout, Transformer.preset("llama2-70b", seq_length=4096), training)


def test_the_schedule_and_its_virtual_stages_are_priced(capsys):
    """``--schedule`` and ``--virtual-stages`` (the flags of ``train-step`` and ``search``) reach the estimate."""
    steps = {}
    for schedule, virtual in (("1f1b", "1"), ("zero-bubble", "2"), ("looped-bfs", "2")):
        argv = ["cost", *FLAGS, *SET_UP, "--schedule", schedule, "--virtual-stages", virtual, "--format", "json"]
        assert main(argv) == 0
        steps[schedule] = json.loads(capsys.readouterr().out)
    for schedule, virtual in (("zero-bubble", 2), ("looped-bfs", 2)):
        training = expected().training.replace(schedule=schedule, virtual_pipeline_stages=virtual)
        layout = Layout(world_size=64, local_world_size=8, tensor_parallel=8, pipeline_parallel=2)
        report = estimate(layout, Transformer.preset("llama2-70b", seq_length=4096), training)
        assert steps[schedule] == json.loads(json.dumps(report.to_dict("dgx-h100")))
    assert steps["zero-bubble"] != steps["1f1b"]


def test_cost_table(capsys):
    assert main(["cost", *FLAGS, *SET_UP]) == 0
    out = capsys.readouterr().out
    assert "memory per rank, by pipeline stage:" in out and "most loaded: stage 0" in out
    assert "reduce_scatter" in out and "send_recv" in out
    assert "communication time per step on dgx-h100" in out and "dominant: " in out
    assert "step time on dgx-h100: " in out and "pipeline bubble" in out


def test_cost_json_matches_estimate(capsys):
    assert main(["cost", *FLAGS, *SET_UP, "--format", "json", "--hardware", "dgx-a100"]) == 0
    doc = json.loads(capsys.readouterr().out)
    report = expected()
    assert [row["total_bytes"] for row in doc["memory"]] == report.memory["total_bytes"].tolist()
    assert [(r["dim"], r["collective"]) for r in doc["communication"]] == list(
        zip(report.communication["dim"], report.communication["collective"])
    )
    assert doc["summary"]["peak_bytes"] == report.peak_bytes
    assert doc["communication_time"]["hardware"]["name"] == "dgx-a100"
    assert sum(d["dominant"] for d in doc["communication_time"]["per_dim"]) == 1
    step = report.step("dgx-a100")
    assert doc["step"]["seconds"] == pytest.approx(step.seconds)
    assert doc["step"]["breakdown"] == pytest.approx(step.breakdown["seconds"].to_dict())


def test_cost_csv_sections(capsys):
    assert main(["cost", *FLAGS, *SET_UP, "--format", "csv"]) == 0
    sections = capsys.readouterr().out.split("# ")[1:]
    titles = [section.splitlines()[0] for section in sections]
    assert titles == ["memory", "communication", "communication time on dgx-h100", "step time on dgx-h100"]
    communication = pd.read_csv(io.StringIO(sections[1].split("\n", 1)[1]))
    # the CSV holds the raw numbers (the report's UnitFrame only displays them in units)
    pd.testing.assert_frame_equal(communication, expected().communication, check_dtype=False, check_frame_type=False)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tp", "3"], "tensor_parallel=3"),
        (["--model", "gpt3-1.3b", "--tp", "2", "--sdp", "2", "--seq-length", "4097"], "seq_length=4097"),
        (["--micro-batch-size", "0"], "micro_batch_size=0"),
        (["--zero-stage", "5"], "zero_stage=5"),
        (["--num-microbatches", "-1"], "num_microbatches=-1"),
        (["--schedule", "zb"], "schedule='zb' must be one of 'gpipe'"),
        (["--schedule", "interleaved-1f1b"], "needs virtual_pipeline_stages >= 2, got 1"),
        (["--pp", "4", "--sdp", "1", "--micro-batches", "9", "--schedule", "zero-bubble"], "multiple of its 2"),
        (["--inter-node-GBps", "0"], "inter_node_GBps=0.0 must be a finite number > 0"),
        (["--inter-node-GBps", "nan"], "inter_node_GBps=nan"),
    ],
)
def test_cost_bad_values_are_one_line_exit_2(capsys, argv, message):
    assert main(["cost", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fastdist-lab cost: error: ") and err.count("\n") == 1 and message in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--zero-stage", "1", "--distributed-optimizer"], "not allowed with argument"),
        (["--model", "gpt5"], "invalid choice: 'gpt5'"),
        (["--hardware", "tpu"], "invalid choice: 'tpu'"),
        (["--recompute", "half"], "invalid choice: 'half'"),
        (["--inter-node-GBps", "fast"], "invalid float value: 'fast'"),
    ],
)
def test_cost_bad_flags_are_one_line_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as exited:
        main(["cost", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_a_measured_network_replaces_the_presets(capsys):
    """``--inter-node-GBps`` prices the step on that network (BLOOM's Jean Zay: what NCCL measured there, not the
    adapters' line rate), says so wherever the hardware is named, and changes nothing inside a node."""
    steps, texts = {}, {}
    for bandwidth in (None, "25", "2.82"):
        extra = [] if bandwidth is None else ["--inter-node-GBps", bandwidth]
        assert main(["cost", *FLAGS, *SET_UP, "--hardware", "a100-sxm-80gb", *extra, "--format", "json"]) == 0
        steps[bandwidth] = json.loads(capsys.readouterr().out)["step"]["seconds"]
        assert main(["cost", *FLAGS, *SET_UP, "--hardware", "a100-sxm-80gb", *extra]) == 0
        texts[bandwidth] = capsys.readouterr().out
    assert steps["25"] == steps[None]  # the preset's own figure
    slow = Hardware.preset("a100-sxm-80gb").replace(inter_node_GBps=2.82)
    assert steps["2.82"] == pytest.approx(expected().step(slow).seconds) and steps["2.82"] > 1.01 * steps[None]
    assert "step time on a100-sxm-80gb, network 2.82 GB/s per GPU:" in texts["2.82"]
    assert "network" not in texts[None].split("step time on")[1].split(":")[0]
    one_node = ["--world-size", "8", "--local-world-size", "8", "--tp", "8", "--model", "llama2-7b"]
    for extra in ([], ["--inter-node-GBps", "0.5"]):
        assert main(["cost", *one_node, "--hardware", "a100-sxm-80gb", *extra, "--format", "json"]) == 0
        steps[len(extra)] = json.loads(capsys.readouterr().out)["step"]["seconds"]
    assert steps[0] == steps[2]  # no group crosses a node


def test_cost_command_in_a_fresh_process(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    bad = subprocess.run([sys.executable, "-m", "fastdist_lab", "cost", "--pp", "64"], capture_output=True,
                         text=True, env=env, cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "pipeline_parallel=64" in bad.stderr
    good = subprocess.run([sys.executable, "-m", "fastdist_lab", "cost", "--format", "json"], capture_output=True,
                          text=True, env=env, cwd=tmp_path)  # fmt: skip
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["summary"]["world_size"] == 8


def test_cost_replay_runs_the_step_on_local_gloo_ranks(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    argv = [
        "--world-size",
        "4",
        "--local-world-size",
        "2",
        "--tp",
        "2",
        "--pp",
        "2",
        "--sdp",
        "1",
        "--model",
        "gpt3-1.3b",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "fastdist_lab", "cost", *argv, "--replay", "--backend", "gloo", "--scale", "1e-4",
         "--format", "json"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    replay = document["replay"]
    assert replay["backend"] == "gloo" and replay["scale"] == 1e-4
    assert [row["dim"] for row in replay["per_dim"]] == [
        row["dim"] for row in document["communication_time"]["per_dim"]
    ]
    assert all(row["seconds"] > 0 and row["busbw_GBps"] > 0 for row in replay["per_dim"])
    assert "\r" not in done.stderr and "replay" not in done.stderr  # no progress bar into a redirected stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--replay", "--scale", "0"], "--scale=0.0 must be in (0, 1]"),
        (["--replay", "--scale", "1.5"], "--scale=1.5 must be in (0, 1]"),
        (["--replay", "--world-size", "128", "--local-world-size", "8"], "world_size=128 is over 64"),
    ],
)
def test_cost_replay_bad_values_are_one_line_exit_2(capsys, argv, message):
    assert main(["cost", *argv, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fastdist-lab cost: error: ") and err.count("\n") == 1 and message in err
