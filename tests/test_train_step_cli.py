"""``fastdist-lab train-step``: exit 0 when the layout trains like one process, 1 when not, 2 on bad input (one
line on stderr, before any rank starts); the worst parameter rows and a count on stdout."""

from __future__ import annotations

import pytest

from fastdist_lab.cli import main

THREADS = ["train-step", "--simulate", "threads", "--quiet"]


def test_the_default_layout_agrees(capsys):
    assert main(THREADS) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("layout: Layout(world_size=8, local_world_size=8, tensor_parallel=2")
    assert lines[1].startswith("ranks: threads; schedule: 1f1b; micro_batches=2")  # cost.Training's default: pp
    assert "65 parameter tensors compared on 260 shards, tolerance 1e-05 relative: 65 ok, 0 outside" in out
    assert "worst 5:" in out and lines[-1] == "result: OK"


def test_a_tolerance_nothing_meets_exits_1(capsys):
    assert main([*THREADS, "--tp", "2", "--pp", "1", "--sdp", "1", "--world-size", "2", "--tolerance", "1e-12",
                 "--rows", "2"]) == 1  # fmt: skip
    out = capsys.readouterr().out
    assert "worst 2:" in out and "more problem(s) (TrainingCheck.problems)" in out
    assert out.splitlines()[-1] == "result: FAILED"


def test_dropout_prints_the_judgments(capsys):
    assert main([*THREADS, "--dropout", "0.1", "--schedule", "gpipe"]) == 0
    out = capsys.readouterr().out
    assert "dropout on: no one-process reference" in out
    assert "masks different across each data group" in out and out.splitlines()[-1] == "result: OK"


def test_a_search_rows_set_up_runs_as_it_stands(capsys):
    """The flags of ``fastdist-lab cost`` / ``search``: zero bubble with two virtual stages, ZeRO 3, recompute."""
    flags = ["--schedule", "zero-bubble", "--virtual-stages", "2", "--micro-batches", "4", "--zero-stage", "3",
             "--recompute", "full", "--micro-batch-size", "2", "--sequence-tensor-parallel"]  # fmt: skip
    assert main([*THREADS, *flags]) == 0
    out = capsys.readouterr().out
    assert "schedule: zero-bubble; micro_batches=4; micro_batch_size=2" in out and "zero_stage=3" in out
    assert "recompute=full" in out and "sequence_tensor_parallel=True" in out and out.splitlines()[-1] == "result: OK"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--schedule", "zb"], "schedule='zb' must be one of 'gpipe', '1f1b', 'interleaved-1f1b', 'looped-bfs', 'zero"),
        (["--schedule", "interleaved-1f1b"], "needs virtual_pipeline_stages >= 2, got 1"),
        (["--micro-batches", "1"], "schedule='1f1b' needs num_microbatches >= pipeline_parallel=2 to run, got 1"),
        (["--zero-stage", "4"], "zero_stage=4"),
        (["--recompute", "full", "--dropout", "0.1"], "recompute='full' with dropout=0.1"),
        (["--simulate", "fake"], "--simulate fake runs no collective"),
        (["--dropout", "1.5"], "dropout=1.5 must be a probability in [0, 1)"),
        (["--tp", "8", "--pp", "1", "--sdp", "1"], "tensor_parallel=8 must divide the model's heads=4"),
        (["--layers", "1"], "2 pipeline stages need at least 2 layers; the model has 1"),
        (["--tolerance", "0"], "--tolerance=0.0 must be > 0"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, flags, message):
    code = main([*THREADS, *flags])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("fastdist-lab train-step: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_a_layout_with_experts_trains_a_mixture_of_experts(capsys):
    argv = [*THREADS, "--tp", "2", "--pp", "1", "--sdp", "1", "--ep", "2", "--etp", "1", "--num-experts", "4"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "expert_parallel=2" in out.splitlines()[0] and out.splitlines()[-1] == "result: OK"


def test_another_engine_runs_the_same_step_and_says_it_only_prices(capsys):
    """``--engine`` changes the price (``fastdist-lab cost``), not the step: the first line says so, the step agrees."""
    assert main([*THREADS, "--engine", "deepspeed"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("engine: deepspeed is priced by `fastdist-lab cost`") and "do not depend" in lines[0]
    assert lines[1].startswith("layout: ") and lines[-1] == "result: OK"


def test_torch_compile_is_priced_and_the_step_says_it_runs_eager(capsys):
    assert main([*THREADS, "--torch-compile"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("torch.compile is priced by `fastdist-lab cost`") and "eager" in lines[0]
    assert lines[1].startswith("layout: ") and lines[-1] == "result: OK"


def test_the_default_engine_adds_no_line(capsys):
    assert main([*THREADS, "--engine", "megatron"]) == 0
    assert capsys.readouterr().out.startswith("layout: ")
