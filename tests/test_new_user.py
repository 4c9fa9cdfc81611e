"""What a new user meets first: one default everywhere, errors that name the bad value, helpful --help."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fastdist_lab import Layout, LayoutError
from fastdist_lab.cli import build_parser, main


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fastdist_lab", *argv], capture_output=True, text=True, timeout=120
    )  # fmt: skip


def test_a_layout_is_one_node_unless_told(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    layout = Layout(world_size=16, tensor_parallel=2)
    assert layout.local_world_size == 16 and layout.num_nodes == 1
    assert Layout(world_size=16, local_world_size=8).num_nodes == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # torchrun's variable is a way of being told
    assert Layout(world_size=16).local_world_size == 4


def test_keyword_typos_suggest_the_field():
    with pytest.raises(LayoutError, match=r"unexpected field\(s\): tensor \(did you mean tensor_parallel\?\)"):
        Layout(world_size=16, tensor=2)
    with pytest.raises(LayoutError, match=r"rank \(a Layout holds every rank; use layout.config\(rank\)"):
        Layout(world_size=16, rank=3)


def test_a_wrong_world_size_is_the_only_thing_said():
    with pytest.raises(LayoutError) as caught:
        Layout(world_size=0)
    assert str(caught.value) == "world_size=0 must be > 0"
    result = run_cli("layout", "--world-size", "0")
    assert result.returncode == 2 and result.stderr == "fastdist-lab layout: error: world_size=0 must be > 0\n"


def test_defaulted_sizes_are_named_when_they_are_the_problem():
    result = run_cli("layout", "--tp", "3")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert "tensor_parallel=3 must divide local_world_size=8" in result.stderr
    assert "not given, so the defaults: --world-size 8, --pipeline-parallel 1" in result.stderr
    assert "--tensor-parallel" not in result.stderr.split("defaults:")[1]  # given explicitly


def test_one_rank_of_a_huge_world_and_an_out_of_range_rank(capsys):
    assert main(["layout", "--world-size", str(2**30), "--rank", "5"]) == 0
    out = capsys.readouterr().out
    assert "[0, 1, 2, 3, 4, 5, 6, 7, ..., 1073741823] (1,073,741,824 ranks)" in out
    assert main(["layout", "--rank", "100000000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fastdist-lab layout: error: rank=100000000 must be in [0, world_size=8)")
    assert "--world-size 8" in err and len(err.splitlines()) == 1
    assert "DistributedConfig" not in err


def test_one_rank_shows_members_not_ranges(capsys):
    assert main(["layout", "--world-size", "16", "--local-world-size", "8", "--tp", "2", "--pp", "2", "--sdp", "2",
                 "--rank", "5"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "range(" not in out
    assert "[5, 13]" in out  # its pipeline group


def test_streams_refuses_a_negative_step_and_says_when_steps_wrap(capsys):
    assert main(["streams", "--step", "-1"]) == 2
    assert (
        capsys.readouterr().err == "fastdist-lab streams: error: step=-1 must be >= 0 (training steps count from 0)\n"
    )
    assert main(["streams", "--step", str(2**70), "--format", "json"]) == 0
    err = capsys.readouterr().err
    assert err == (
        "fastdist-lab streams: note: step 1180591620717411303424 gives the seeds of step 0: the seed arithmetic of "
        "Fast-LLM is modulo 2**64\n"
    )


def test_help_shows_defaults_and_explains_every_flag():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert "`" not in parser.format_help()
    for name, command in commands.items():
        text = command.format_help()
        assert "`" not in text, name
        for action in command._actions:
            if action.dest in ("help",):
                continue
            assert action.help, f"{name} {action.option_strings} has no help"
        if "--world-size" in text:  # every command with the layout flags (search takes GPUs, not a layout)
            assert "(default: 8)" in text, name  # the world size, filled in when not given
        # each flag's default is said once: never argparse's "(default: None)" beside a hand-written one
        formatter = command.formatter_class(name)
        for action in command._actions:
            shown = " ".join(formatter._expand_help(action).split()) if action.help else ""
            assert shown.count("default") <= 1, f"{name} {action.option_strings}: {shown}"
        assert "(default: None)" not in text and "(default: False)" not in text and "(default: [])" not in text, name
    streams = " ".join(commands["streams"].format_help().split())
    assert "set_step (>= 0) (default: 0)" in streams  # a default of 0 is a default


def test_the_worker_says_its_world_comes_from_the_launcher():
    from fastdist_lab.worker import _parser

    text = _parser().format_help()
    assert "(default: the launcher's WORLD_SIZE)" in " ".join(text.split()) and "(default: 8)" not in text


@pytest.mark.parametrize(
    "argv, needle",
    [
        (
            ["layout", "--tensor-paralel", "2"],
            "fastdist-lab layout: error: unrecognized argument --tensor-paralel (did you mean --tensor-parallel?)",
        ),
        (
            ["cost", "--micro-bach-size", "2"],
            "fastdist-lab cost: error: unrecognized argument --micro-bach-size (did you mean --micro-batch-size?)",
        ),
        (
            ["check", "--simulte=fake"],
            "fastdist-lab check: error: unrecognized argument --simulte (did you mean --simulate?)",
        ),
        (["streams", "7"], "fastdist-lab streams: error: unrecognized argument '7'"),
    ],
)
def test_cli_typos_get_a_did_you_mean_with_the_sub_command(argv, needle, capsys):
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert raised.value.code == 2
    assert capsys.readouterr().err.splitlines() == [needle]


def test_layout_from_a_yaml_without_a_world_takes_world_size_from_the_environment(tmp_path, capsys, monkeypatch):
    (tmp_path / "exp.yaml").write_text("model:\n  distributed:\n    tensor_parallel: 2\n")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert main(["layout", "--from", str(tmp_path / "exp.yaml")]) == 2
    err = capsys.readouterr().err
    assert "WORLD_SIZE" in err and "--world-size N" in err and len(err.splitlines()) == 1
    monkeypatch.setenv("WORLD_SIZE", "16")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert main(["layout", "--from", str(tmp_path / "exp.yaml")]) == 0
    out = capsys.readouterr().out
    assert "Layout(world_size=16, local_world_size=8, tensor_parallel=2" in out
    assert main(["layout", "--from", str(tmp_path / "exp.yaml"), "--world-size", "4"]) == 0  # the flag wins
    out = capsys.readouterr().out
    assert out.count("Layout(") == 1 and "Layout(world_size=4, local_world_size=4" in out  # printed once
    monkeypatch.setenv("WORLD_SIZE", "many")
    assert main(["layout", "--from", str(tmp_path / "exp.yaml")]) == 2
    assert "WORLD_SIZE='many' in the environment is not a number" in capsys.readouterr().err


def test_layout_from_empty_input_says_it_is_empty(capsys):
    assert main(["layout", "--from", ""]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "fastdist-lab layout: error: --from is empty: give a config file, its text or a launch line"
    )


def test_big_worlds_are_summarised_unless_every_row_is_asked_for(capsys):
    flags = ["layout", "--world-size", "65536", "--local-world-size", "8", "--tp", "8", "--pp", "8", "--sdp", "2"]
    assert main(flags) == 0
    out = capsys.readouterr().out
    assert "65,536 ranks: rows not listed (more than 4,096); --all-rows lists every one" in out
    assert len(out.splitlines()) < 60 and "nodes_spanned" in out
    assert main([*flags, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "ranks" not in doc and len(doc["topology"]) == 9 and doc["layout"]["world_size"] == 65536
    small = ["layout", "--world-size", "8192", "--local-world-size", "8", "--tp", "8", "--pp", "8", "--sdp", "2"]
    assert main([*small, "--all-rows", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 8192 + 1 and max(map(len, lines)) < 2000
    assert "group 0 of 8192 ranks" in lines[1]


def test_cli_tables_fit_120_columns_and_fake_worlds_say_not_run(capsys):
    layout = ["--world-size", "64", "--local-world-size", "8", "--tp", "8", "--pp", "2", "--sdp", "2"]
    for argv in (
        ["cost", *layout, "--model", "llama2-70b", "--distributed-optimizer"],
        ["streams", *layout],
        ["check", *layout, "--simulate", "fake", "--verbose", "--quiet"],
    ):
        main(argv)
        out = capsys.readouterr().out
        widest = max(out.splitlines(), key=len)
        assert len(widest) <= 120, f"{argv[0]}: {len(widest)} columns: {widest}"
        if argv[0] == "cost":
            assert "GiB" in out and " B " in out and " ms" in out and "e-0" not in out and "e+1" not in out
        if argv[0] == "check":  # no collective ran on fake groups: no time, no "passed"
            table = out[out.index("Verification OK") : out.index("DeviceMesh (cpu")]
            assert "not run" in table and "0.000" not in table and "passed" not in table
    main(["layout", "--world-size", "8"])
    assert "world (size 8, 1 group):" in capsys.readouterr().out
