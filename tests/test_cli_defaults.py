"""The layout flags' defaults: without any size flag a command shows the main job's layout (world 8, tensor 2,
pipeline 2, sequence-data 2); once a size flag is given, a parallel factor not given is 1, as ``Layout(...)`` takes it
(``fastdist-lab train-step --world-size 8 --tensor-parallel 2 --pipeline-parallel 4`` is that ``Layout``)."""

from __future__ import annotations

import pytest

from fastdist_lab import Layout
from fastdist_lab.cli import build_parser, main
from fastdist_lab.commands.flags import DEFAULT_LAYOUT, config_from_args, layout_from_args

LAYOUT_COMMANDS = ("layout", "check", "streams", "cost", "train-step")
"""Every sub-command that takes the layout flags."""

DEMO = Layout(**DEFAULT_LAYOUT)


def _layout(command: str, *flags: str) -> Layout:
    return layout_from_args(build_parser().parse_args([command, *flags]))


@pytest.mark.parametrize("command", LAYOUT_COMMANDS)
@pytest.mark.parametrize(
    ("flags", "fields"),
    [
        (
            ("--world-size", "8", "--tensor-parallel", "2", "--pipeline-parallel", "4"),
            {"world_size": 8, "tensor_parallel": 2, "pipeline_parallel": 4},
        ),
        (("--world-size", "16"), {"world_size": 16}),
        (("--tp", "4"), {"world_size": 8, "tensor_parallel": 4}),
        (("--sdp", "2", "--pp", "2"), {"world_size": 8, "sequence_data_parallel": 2, "pipeline_parallel": 2}),
        (("--world-size", "16", "--local-world-size", "8"), {"world_size": 16, "local_world_size": 8}),
        (("--world-size", "8", "--tp", "2", "--pp", "2", "--sdp", "2"), DEFAULT_LAYOUT),
    ],
)
def test_a_factor_not_given_is_one_once_any_size_flag_is_given(command, flags, fields):
    assert _layout(command, *flags) == Layout(**fields)


@pytest.mark.parametrize("command", LAYOUT_COMMANDS)
@pytest.mark.parametrize("flags", [(), ("--pipeline-first",), ("--seed", "7")])
def test_without_size_flags_the_main_jobs_layout_stays(command, flags):
    layout = _layout(command, *flags)
    assert (layout.world_size, layout.tensor_parallel, layout.pipeline_parallel, layout.sequence_data_parallel) == (
        8, 2, 2, 2,
    )  # fmt: skip
    assert layout.pipeline_first == ("--pipeline-first" in flags)


def test_one_ranks_view_follows_the_same_rule():
    args = build_parser().parse_args(["layout", "--world-size", "8", "--tp", "2", "--pp", "4", "--rank", "5"])
    assert config_from_args(args, 5) == Layout(world_size=8, tensor_parallel=2, pipeline_parallel=4).config(5)
    args = build_parser().parse_args(["layout", "--rank", "5"])
    assert config_from_args(args, 5) == DEMO.config(5)


def test_the_command_line_of_the_issue_is_the_layout_of_python(capsys):
    assert main(["layout", "--world-size", "8", "--tensor-parallel", "2", "--pipeline-parallel", "4"]) == 0
    assert repr(Layout(world_size=8, tensor_parallel=2, pipeline_parallel=4)) in capsys.readouterr().out


def test_the_torchrun_worker_keeps_the_main_jobs_factors_on_the_launchers_world(monkeypatch):
    from fastdist_lab import worker

    parser = worker._parser()
    args = parser.parse_args([])
    args.world_size = 16  # what the worker takes from WORLD_SIZE: not a flag the user gave
    assert layout_from_args(args) == Layout(
        world_size=16, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2
    )
    args = parser.parse_args(["--tp", "4"])
    args.world_size = 16
    assert layout_from_args(args) == Layout(world_size=16, tensor_parallel=4)


@pytest.mark.parametrize("command", LAYOUT_COMMANDS)
def test_help_says_each_default_once_and_the_rule(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert text.count("a parallel factor not given is 1") == 1
    assert text.count("(default: 1 when any size flag is given, else 2)") == 3  # tensor, pipeline, sequence-data
    for flag in (
        "--world-size WORLD_SIZE",
        "--tp TENSOR_PARALLEL",
        "--pp PIPELINE_PARALLEL",
        "--sdp SEQUENCE_DATA_PARALLEL",
        "--seed SEED",
    ):
        after = text.rsplit(flag, 1)[1].split(" --", 1)[0]  # its entry, after the usage line
        assert after.count("default") == 1, (flag, after)
