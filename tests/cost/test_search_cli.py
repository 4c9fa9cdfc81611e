"""The ``fastdist-lab search`` command: the ranked table (within 120 columns), JSON and CSV equal to ``cost.search``,
limits, one-line errors with exit code 2, exit 1 when nothing fits, each default once in ``--help``, and a progress
bar on a terminal only (never into a redirected stream)."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios

import pandas as pd
import pytest

from fastdist_lab.cli import build_parser, main
from fastdist_lab.cost import RANKED_COLUMNS, Hardware, ranked_lines, search

SMALL = ["--model", "llama2-7b", "--gpus", "16", "--global-batch-size", "64", "--hardware", "h100-sxm-80gb"]
BRIEF = ["--model", "llama2-70b", "--gpus", "512", "--global-batch-size", "1024", "--hardware", "h100-sxm-80gb"]


@pytest.fixture(scope="module")
def small():
    return search("llama2-7b", 16, hardware="h100-sxm-80gb", global_batch_size=64, top=20)


def test_table_ranks_the_rows_search_finds(capsys, small):
    assert main(["search", *SMALL]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # no progress bar into a stream nobody watches
    lines = captured.out.splitlines()
    assert lines[0].startswith("llama2-7b (sequence 4096), global batch 64 on 16 x h100-sxm-80gb (2 nodes of 8)")
    table = lines[lines.index("") + 1 :]
    assert table[: len(small) + 1] == ranked_lines(small)
    assert "memory/GPU" in table[0] and table[len(small) + 1] == "" and "tp tensor" in table[len(small) + 2]
    assert all(len(line) <= 120 for line in lines)
    first = table[1].split()
    sizes = [name for _, name, _ in RANKED_COLUMNS[:5]]  # tp pp v sdp dp
    assert first[0].lstrip("=") == "0" and [int(v) for v in first[1:6]] == small.frame.loc[0, sizes].tolist()


def test_json_and_csv_hold_the_search_frame(capsys, small):
    assert main(["search", *SMALL, "--format", "json", "--top", "5"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["gpus"] == 16 and document["hardware"] == "h100-sxm-80gb" and document["model"] == "llama2-7b"
    five = search("llama2-7b", 16, hardware="h100-sxm-80gb", global_batch_size=64, top=5)
    assert document["searched"] == five.searched == small.searched and document["dropped"] == five.dropped
    assert document["pruned"] == five.pruned  # set-ups a floor of their step kept from the best five
    rows = pd.DataFrame(document["rows"])
    pd.testing.assert_frame_equal(rows, small.frame.head(5), check_dtype=False)
    assert main(["search", *SMALL, "--format", "csv"]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out), index_col="row")
    assert frame.index.tolist() == list(range(20))
    pd.testing.assert_frame_equal(frame.drop(columns="schedule"), small.frame.drop(columns="schedule"),
                                  check_dtype=False, check_names=False)  # fmt: skip


def test_limits_narrow_the_search(capsys):
    limits = ["--tp", "2", "--pp", "1", "2", "--schedule", "1f1b", "--recompute", "full", "--zero-stage", "1",
              "--micro-batch-size", "1", "2", "--sequence-tensor-parallel", "--pipeline-first", "off"]  # fmt: skip
    assert main(["search", *SMALL, *limits, "--format", "json", "--top", "50"]) == 0
    rows = pd.DataFrame(json.loads(capsys.readouterr().out)["rows"])
    assert len(rows) and (rows["tensor_parallel"] == 2).all() and rows["pipeline_parallel"].isin([1, 2]).all()
    assert (rows["schedule"] == "1f1b").all() and (rows["recompute"] == "full").all()
    assert (rows["zero_stage"] == 1).all() and rows["micro_batch_size"].isin([1, 2]).all()
    assert rows["sequence_tensor_parallel"].all() and not rows["pipeline_first"].any()
    assert main(["search", *SMALL, "--recompute", "selective", "--no-flash-attention", "--format", "json"]) == 0
    rows = pd.DataFrame(json.loads(capsys.readouterr().out)["rows"])
    assert len(rows) and (rows["recompute"] == "selective").all()  # selective recompute needs stored scores


def test_a_measured_network_is_searched_on(capsys):
    """``--inter-node-GBps`` searches on that network: the rows are ``search``'s on the replaced preset, and the
    JSON and the title name it."""
    argv = ["search", *SMALL, "--inter-node-GBps", "2", "--top", "5", "--quiet"]
    assert main([*argv, "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["hardware"] == "h100-sxm-80gb, network 2 GB/s per GPU"
    slow = search("llama2-7b", 16, hardware=Hardware.preset("h100-sxm-80gb").replace(inter_node_GBps=2.0),
                  global_batch_size=64, top=5)  # fmt: skip
    assert [row["seconds"] for row in document["rows"]] == pytest.approx(list(slow.frame["seconds"]))
    fast = search("llama2-7b", 16, hardware="h100-sxm-80gb", global_batch_size=64, top=5)
    assert slow.frame["seconds"].iloc[0] > fast.frame["seconds"].iloc[0]
    assert main(argv) == 0
    assert "on 16 x h100-sxm-80gb, network 2 GB/s per GPU (2 nodes of 8)" in " ".join(capsys.readouterr().out.split())


def test_nothing_that_fits_exits_1(capsys):
    assert main(["search", "--model", "gpt3-175b", "--gpus", "8", "--global-batch-size", "8", "--top", "3"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"none of the [\d,]+ set-ups searched fits the memory", " ".join(out.split())), out
    assert "memory/GPU" not in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpus", "12", "--global-batch-size", "8"], "gpus=12 must be a multiple of gpus_per_node=8"),
        (["--gpus", "0", "--global-batch-size", "8"], "gpus=0"),
        (["--gpus", "8", "--global-batch-size", "0"], "global_batch_size=0"),
        ([*SMALL, "--top", "0"], "top=0"),
        ([*SMALL, "--tp", "3"], "no layout of 32 layers"),
        ([*SMALL, "--seq-length", "0"], "seq_length=0"),
        ([*SMALL, "--hardware", "pcie-100gbe", "--virtual-pipeline-stages", "0"], "virtual_pipeline_stages=0"),
        ([*SMALL, "--inter-node-GBps", "-1"], "inter_node_GBps=-1.0 must be a finite number > 0"),
    ],
)
def test_bad_values_are_one_line_exit_2(capsys, argv, message):
    assert main(["search", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fastdist-lab search: error: ") and err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpus", "8"], "the following arguments are required: --global-batch-size"),
        ([*SMALL, "--model", "gpt5"], "invalid choice: 'gpt5'"),
        ([*SMALL, "--schedule", "2f2b"], "invalid choice: '2f2b'"),
        ([*SMALL, "--pipeline-first", "maybe"], "invalid choice: 'maybe'"),
        ([*SMALL, "--tp", "two"], "invalid int value: 'two'"),
    ],
)
def test_bad_flags_are_one_line_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as exited:
        main(["search", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_help_shows_each_default_once():
    command = build_parser()._subparsers._group_actions[0].choices["search"]
    text = command.format_help()
    assert "(default: None)" not in text and "SUPPRESS" not in text
    blocks = re.split(r"\n(?=  -)", text)
    assert len(blocks) > 20
    for block in blocks:
        assert block.count("default") <= 1, block
    for flag, default in (("--model", "llama2-7b"), ("--hardware", "dgx-h100"), ("--top", "20"),
                          ("--gpus-per-node", "8"), ("--micro-batch-size", "1 2 4 8")):  # fmt: skip
        block = text[text.index("options:") :][text[text.index("options:") :].index("  " + flag) :]
        assert f"default: {default}" in " ".join(block.split()[:40]), flag


def _run_search(stderr_to_terminal: bool, tmp_path) -> tuple[int, str, str]:
    """The brief's search in a fresh process, stdout piped; stderr a pseudo-terminal or a pipe."""
    # the bar shows from the first table on: the search takes under a second on a quiet machine
    env = {**os.environ, "TMPDIR": str(tmp_path), "COLUMNS": "120", "FASTDIST_LAB_BAR_DELAY": "0"}
    argv = [sys.executable, "-m", "fastdist_lab", "search", *BRIEF, "--top", "3"]
    if not stderr_to_terminal:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
        return done.returncode, done.stdout, done.stderr
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a terminal of 120 columns
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=follower, env=env, cwd=tmp_path, text=True)
    os.close(follower)
    seen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 600)
        if not ready:
            break
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the follower side closed: the process is done with stderr
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    out = process.stdout.read()
    process.stdout.close()
    return process.wait(timeout=60), out, seen.decode(errors="replace")


def test_a_progress_bar_on_a_terminal_and_nothing_into_a_redirected_stream(tmp_path):
    """The same search (95,288 set-ups), with no delay before the bar: on a terminal a bar shows on stderr;
    redirected, nothing (and the table is the same)."""
    code, out, err = _run_search(True, tmp_path)
    assert code == 0 and "search:" in err and "%|" in err, err[-2000:]
    code, redirected, quiet = _run_search(False, tmp_path)
    assert code == 0 and quiet == "" and redirected == out
    assert "llama2-70b (sequence 4096), global batch 1024 on 512 x h100-sxm-80gb (64 nodes of 8)" in out
    assert all(len(line) <= 120 for line in out.splitlines())


def test_a_mixture_of_experts_table_shows_the_expert_sizes(capsys):
    moe = ["--model", "qwen3-30b-a3b", "--gpus", "16", "--global-batch-size", "64", "--hardware", "h100-sxm-80gb"]
    assert main(["search", *moe, "--top", "6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = lines[lines.index("") + 1 :]
    expected = search("qwen3-30b-a3b", 16, hardware="h100-sxm-80gb", global_batch_size=64, top=6)
    assert table[:7] == ranked_lines(expected) and all(len(line) <= 120 for line in lines)
    titles = table[0].split()
    assert titles[5:8] == ["dp", "ep", "etp"]
    for i in range(6):
        ep, etp = (int(v) for v in table[1 + i].split()[6:8])
        assert (ep, etp) == tuple(expected.frame.loc[i, ["expert_parallel", "expert_tensor_parallel"]])
    assert "ep expert parallel, etp expert tensor parallel" in " ".join(lines)
    dense = search("llama2-7b", 16, hardware="h100-sxm-80gb", global_batch_size=64, top=2)
    assert " ep " not in ranked_lines(dense)[0]  # a dense model's table is as it was
