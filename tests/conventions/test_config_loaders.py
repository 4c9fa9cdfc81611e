"""``load_config`` and ``fastdist-lab layout --from`` on config files and launch lines modelled on published ones
(``configs/``), and malformed inputs: each error names the line, key or flag at fault."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdist_lab import Layout, LayoutError
from fastdist_lab.cli import main
from fastdist_lab.conventions import MegatronParallelState, equivalent, load_config, torchtitan
from fastdist_lab.conventions.launch import shell_commands, split_launch
from fastdist_lab.errors import ConventionError, WorldSizeNeeded

CONFIGS = Path(__file__).parent / "configs"


def test_fastllm_tutorial_needs_the_world_from_the_caller():
    loaded = load_config(CONFIGS / "fastllm_tutorial.yaml", world_size=8)
    assert loaded.framework == "fastllm" and loaded.layout == Layout(world_size=8, local_world_size=8, seed=984059)
    assert "compute_dtype" in loaded.description and "fastllm_tutorial.yaml" in loaded.description


def test_fastllm_large_run_reads_world_and_node_size_from_the_file():
    layout = load_config(CONFIGS / "fastllm_large.yaml").layout
    assert layout == Layout(world_size=128, local_world_size=8, tensor_parallel=4, pipeline_parallel=8,
                            sequence_tensor_parallel=True, timeout=3600)  # fmt: skip


def test_fastllm_both_vintages():
    current = load_config(CONFIGS / "fastllm_current.yaml", world_size=16, local_world_size=8)
    assert current.layout.pipeline_first and current.layout.test_seed_shift == 12345
    assert "Fast-LLM current" in current.description
    old = load_config(CONFIGS / "fastllm_distributed.yaml")
    assert old.layout.sequence_data_parallel == 4 and old.layout.backend.value == "gloo"
    assert old.layout.reproducible_init and old.layout.test_seed_shift == 777 and "91b28fab" in old.description


def test_megatron_gpt_script_expands_its_variables():
    loaded = load_config(CONFIGS / "megatron_gpt_175b.sh")
    state = loaded.convention
    assert (state.world_size, state.tp, state.pp, state.dp) == (128, 8, 16, 1)
    assert loaded.layout == Layout(world_size=128, local_world_size=8, tensor_parallel=8, pipeline_parallel=16)
    assert equivalent(loaded.layout, state)
    with pytest.raises(ConventionError, match=r"world_size \(8\) is not divisible by 128"):
        MegatronParallelState.from_args(
            (CONFIGS / "megatron_gpt_175b.sh").read_text().replace("NUM_NODES=16", "NUM_NODES=1")
        )


def test_megatron_mixtral_script_experts_have_no_layout_counterpart():
    loaded = load_config(CONFIGS / "megatron_mixtral.sh")
    state = loaded.convention
    assert (state.world_size, state.pp, state.dp, state.expert_ep, state.expert_dp) == (32, 4, 8, 8, 1)
    assert state.sequence_parallel is False  # Megatron drops sequence parallelism when tp == 1
    assert loaded.layout.pipeline_parallel == 4 and "expert groups" in loaded.description
    assert state.named_groups()["EXPERT_MODEL_PARALLEL_GROUP"].tolist()[0] == list(range(8))


def test_megatron_launch_line_spellings():
    line = "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel"
    for launcher in (
        "torchrun --nnodes 2 --nproc-per-node 8",
        "torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend c10d",
        "python -m torch.distributed.run --nproc_per_node 8 --nnodes 2",
        "python3 -m torch.distributed.launch --nproc_per_node=8 --nnodes=2 --use_env",
    ):
        state = MegatronParallelState.from_args(f"{launcher} pretrain_gpt.py {line}")
        assert (state.world_size, state.local_world_size, state.tp, state.pp) == (16, 8, 2, 2), launcher
        assert state.sequence_parallel
    assert MegatronParallelState.from_args(f"WORLD_SIZE=8 python pretrain_gpt.py {line}").world_size == 8
    assert MegatronParallelState.from_args(line, world_size=4).dp == 1
    assert MegatronParallelState.from_args(line.split(), world_size=8).dp == 2
    mapped = MegatronParallelState.from_args(f"{line} --use-tp-pp-dp-mapping", world_size=16)
    assert mapped.order == "tp-cp-ep-pp-dp" and mapped.layout_equivalent()[0].pipeline_first
    vpp = MegatronParallelState.from_args(
        f"{line} --num-layers 32 --num-layers-per-virtual-pipeline-stage 4", world_size=8
    )
    assert vpp.virtual_pipeline_model_parallel_size == 4


def test_torchtitan_toml_configs():
    llama3 = load_config(CONFIGS / "torchtitan_llama3_405b.toml", world_size=64, local_world_size=8)
    mesh = llama3.convention
    assert mesh.degrees["dp_shard"] == 8 and mesh.version == "2026-08"  # today's meshes unless told otherwise
    old = load_config(CONFIGS / "torchtitan_llama3_405b.toml", world_size=64, local_world_size=8, version="2025-12")
    assert old.convention.version == "2025-12" and "dp_shard_cp" in old.named_groups()
    assert llama3.layout == Layout(world_size=64, local_world_size=8, tensor_parallel=8)
    llama4 = load_config(CONFIGS / "torchtitan_llama4_moe.toml", world_size=256, local_world_size=8, version="2026-01")
    assert llama4.convention.degrees["etp"] == 8 and llama4.layout.pipeline_parallel == 4
    deepseek = load_config(CONFIGS / "torchtitan_deepseek_ep.toml", world_size=16, local_world_size=8)
    assert deepseek.convention.groups("ep").tolist() == [list(range(8)), list(range(8, 16))]
    assert "so are the expert groups, torchtitan's expert meshes" in deepseek.description
    assert deepseek.layout.groups("expert").tolist() == deepseek.convention.groups("ep").tolist()
    assert llama4.layout.expert_sizes["expert_tensor"] == 8 and llama4.layout.has_experts == (
        llama4.convention.degrees["ep"] > 1
    )
    with pytest.raises(ConventionError, match="pass the world size"):
        load_config(CONFIGS / "torchtitan_deepseek_ep.toml")


@pytest.mark.parametrize(
    "source, also",
    [
        ("model:\n  distributed:\n    tensor_parallel: 2\n", LayoutError),
        ("--tensor-model-parallel-size 2", ConventionError),
        ("./run_train.sh --parallelism.tensor_parallel_degree 2", ConventionError),
        ("[parallelism]\ndata_parallel_shard_degree = -1\n", ConventionError),
        (CONFIGS / "torchtitan_deepseek_ep.toml", ConventionError),
    ],
)
def test_every_framework_asks_for_the_world_size_with_one_error_type(source, also):
    with pytest.raises(WorldSizeNeeded, match="pass the world size") as raised:
        load_config(source)
    assert isinstance(raised.value, also)
    assert load_config(source, world_size=8).convention.world_size == 8


def test_other_errors_are_not_a_missing_world_size():
    for source in ("torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 3", "hello world"):
        with pytest.raises(ValueError) as raised:
            load_config(source)
        assert not isinstance(raised.value, WorldSizeNeeded)


def test_torchtitan_launch_lines():
    line = (
        "NGPU=8 MODULE=deepseek_v3 CONFIG=deepseek_v3_16b ./run_train.sh --parallelism.data_parallel_shard_degree=4 "
        "--parallelism.tensor_parallel_degree=2 --parallelism.expert_parallel_degree=2"
    )
    loaded = load_config(line)
    assert loaded.convention.version == "2026-08"  # the --module/--config launch style is torchtitan after 2026-02
    assert loaded.convention.degrees["ep"] == 2 and loaded.layout.tensor_parallel == 2
    job = CONFIGS / "torchtitan_llama3_405b.toml"
    run = (
        f"torchrun --nproc_per_node=8 --nnodes 4 -m torchtitan.train --job.config_file {job} "
        "--parallelism.pipeline_parallel_degree 2"
    )
    mesh = load_config(run).convention
    assert (mesh.degrees["tp"], mesh.degrees["pp"], mesh.degrees["dp_shard"]) == (8, 2, 2)
    assert any("read" in note for note in mesh.source_notes)
    assert load_config({"parallelism": {"tensor_parallel_degree": 2}}, world_size=4).layout.tensor_parallel == 2


def test_no_layout_is_said_plainly_and_the_groups_are_kept():
    line = (
        "torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
        "--context-parallel-size 2 --pipeline-model-parallel-size 2 --use-tp-pp-dp-mapping "
        "--expert-model-parallel-size 4 --expert-tensor-parallel-size 1"
    )
    loaded = load_config(line)
    assert loaded.layout is None and loaded.value is loaded.convention
    assert "No Layout reproduces it" in loaded.description and "tp-cp-ep-pp-dp" in loaded.reason
    assert "EXPERT_MODEL_PARALLEL_GROUP" in loaded.named_groups()
    wide = load_config(CONFIGS / "torchtitan_llama3_405b.toml", world_size=64, local_world_size=4)
    assert wide.layout is None and "tensor_parallel=8 must divide local_world_size=4" in wide.reason


@pytest.mark.parametrize(
    "text, error, message",
    [
        (
            "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-parallel-size 2",
            ConventionError,
            r"line 1: --tensor-parallel-size is not a Megatron-LM argument.*--tensor-model-parallel-size",
        ),
        (
            "torchrun --nproc_per_node 8 pretrain_gpt.py --pipeline-model-parallel-size two",
            ConventionError,
            r"argument --pipeline-model-parallel-size: invalid int value: 'two'",
        ),
        (
            "torchrun --nproc_per_node 8 pretrain_gpt.py --context-parallel-size",
            ConventionError,
            "expected one argument",
        ),
        (
            "torchrun --nproc_per_node 8 pretrain_gpt.py --model-parallel-size 2",
            ConventionError,
            "--model-parallel-size is no longer valid",
        ),
        (
            "torchrun --nnodes 1:4 --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2",
            ConventionError,
            "elastic --nnodes 1:4",
        ),
        (
            "torchrun --nproc_per_node auto pretrain_gpt.py --tensor-model-parallel-size 2",
            ConventionError,
            "--nproc-per-node 'auto' is not a number",
        ),
        ("--tensor-model-parallel-size 2", ConventionError, "does not give the world size"),
        (
            "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
            "--tensor-parallel-num-weight-shards 4",
            ConventionError,
            "generalized tensor parallelism",
        ),
        ("A=(\n --tensor-model-parallel-size 2\n", ConventionError, r"line 1: array A=\( is never closed"),
        (
            "N=$((8 ** 2))\ntorchrun --nproc_per_node $N x.py --tensor-model-parallel-size 2",
            ConventionError,
            r"line 1: cannot evaluate",
        ),
        (
            "NGPU=8 ./run_train.sh --parallelism.tensor_parallel_degre 2",
            ConventionError,
            r"parallelism\.tensor_parallel_degre \(line 1\): not a field.*'tensor_parallel_degree'",
        ),
        ("NGPU=8 ./run_train.sh --parallelism.tensor_parallel_degree", ConventionError, "needs a value"),
        ("NGPU=8 ./run_train.sh --parallelism.tensor_parallel_degree x", ConventionError, "must be an integer"),
        (
            "[parallelism]\ntensor_parallel_degree = 2\nexpert_degree = 2\n",
            ConventionError,
            r"parallelism\.expert_degree \(line 3\): not a field",
        ),
        (
            "[parallelism]\ntensor_parallel_degree = 2.5\n",
            ConventionError,
            r"line 2: parallelism.tensor_parallel_degree=2.5 must be",
        ),
        ("[job]\ndump_folder = 1\n", ConventionError, r"no \[parallelism\] section \(sections: \[job\]\)"),
        ("[parallelism]\ntensor_parallel_degree = \n", ConventionError, "not valid TOML"),
        ("model:\n  distributed:\n    tensor_paralel: 2\n", LayoutError, r"tensor_paralel \(line 3\)"),
        ("hello world", ConventionError, "cannot tell which framework"),
        ("missing.yaml", ConventionError, "no such file"),
    ],
)
def test_malformed_inputs_name_the_line_or_key(text, error, message):
    with pytest.raises(error, match=message):
        load_config(text, world_size=None if "world size" in message else 8)


def test_shell_expansion():
    script = (
        'A=2\nexport B=${A}\nC=${MISSING:-"3"}\nARGS=(\n  --x $A # a comment\n  "--y z"\n)\n'
        "ARGS+=(--w $((A*B+C)))\nrun ${ARGS[@]}\n"
    )
    [command] = shell_commands(script)
    # as bash does: unquoted ${ARGS[@]} splits an item at blanks, "${ARGS[@]}" keeps each item one word
    assert command.words == ["run", "--x", "2", "--y", "z", "--w", "7"] and command.line == 9
    assert command.word_lines == [9, 5, 5, 6, 6, 8, 8]  # each word's own line: where its array item is written
    [quoted] = shell_commands(script.replace("run ${ARGS[@]}", 'run "${ARGS[@]}"'))
    assert quoted.words == ["run", "--x", "2", "--y z", "--w", "7"]


# ---------------------------------------------------------------------- detected by structure, not by words
def test_a_python_config_registry_is_refused_in_one_line_naming_the_formats_read():
    # torchtitan's Python registry holds torchtitan launch lines in strings and comments: none of them is read
    for source in (CONFIGS / "torchtitan_registry.py", (CONFIGS / "torchtitan_registry.py").read_text()):
        with pytest.raises(ConventionError, match="is Python source") as raised:
            load_config(source, world_size=8)
        message = str(raised.value)
        assert "\n" not in message and "Fast-LLM YAML" in message and "torchtitan TOML" in message
        assert "Megatron-LM launch line" in message


def test_a_megatron_script_that_mentions_torchtitan_is_read_as_megatron():
    loaded = load_config(CONFIGS / "megatron_llama3_fp8.sh")
    state = loaded.convention
    assert loaded.framework == "megatron" and state.program == "pretrain_gpt.py"
    assert (state.world_size, state.tp, state.cp, state.pp, state.dp) == (16, 2, 2, 1, 4)  # the commented pp is not
    assert state.sequence_parallel and loaded.layout.sequence_data_parallel == 2


def test_torchtitans_own_launch_script_is_read_from_its_torchrun_command():
    loaded = load_config(CONFIGS / "torchtitan_run_train.sh")
    mesh = loaded.convention
    assert loaded.framework == "torchtitan" and mesh.version == "2026-08"  # --module/--config: today's torchtitan
    assert (mesh.world_size, mesh.degrees["ep"], mesh.degrees["dp_shard"]) == (8, 4, 8)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "the text is empty"),
        (" \n\t\n", "the text is empty"),
        ("echo 'torchrun --nproc_per_node 8 -m torchtitan.train --parallelism.tensor_parallel_degree 2'", "run echo"),
        ("# NGPU=8 ./run_train.sh --parallelism.tensor_parallel_degree 2\nls", "cannot tell which framework"),
        ("torchrun --nproc_per_node 8 train.py --lr 1e-4", "its commands run torchrun train.py"),
        ("name: torchtitan\nsteps: 10\n", r"a YAML mapping \(keys name, steps\) of no framework"),
        (
            "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2\n"
            "NGPU=8 ./run_train.sh --parallelism.tensor_parallel_degree 2",
            r"a torchtitan command \(line 2\) and a Megatron-LM command \(line 1\)",
        ),
    ],
)
def test_words_alone_decide_nothing(text, message):
    with pytest.raises(ConventionError, match=message) as raised:
        load_config(text, world_size=8)
    assert "\n" not in str(raised.value)


def test_an_empty_file_is_named_as_empty(tmp_path):
    for name in ("empty.sh", "empty.yaml", "empty.toml"):
        (tmp_path / name).write_text("\n")
        with pytest.raises(ConventionError, match=f"{name} is empty"):
            load_config(tmp_path / name, world_size=8)


def test_megatron_errors_cite_the_line_where_the_flag_is():
    script = (CONFIGS / "megatron_mixtral.sh").read_text()
    lines = script.splitlines()
    bad = lines.index("    --pipeline-model-parallel-size 4") + 1
    broken = script.replace("--pipeline-model-parallel-size 4", "--pipeline-model-parallel-size four")
    with pytest.raises(ConventionError, match=rf"^line {bad}: argument --pipeline-model-parallel-size"):
        load_config(broken)
    typo = script.replace("--expert-model-parallel-size 8", "--expert-model-paralel-size 8")
    with pytest.raises(ConventionError, match=rf"^line {bad + 1}: --expert-model-paralel-size is not"):
        load_config(typo)
    # a refusal of the combination names every size flag with its line
    refused = script.replace('NNODES=${SLURM_NNODES:-"4"}', "NNODES=1").replace(
        "--pipeline-model-parallel-size 4", "--pipeline-model-parallel-size 3"
    )
    with pytest.raises(ConventionError, match=rf"--pipeline-model-parallel-size 3 \(line {bad}\)"):
        load_config(refused)


# ---------------------------------------------------------------------- the CLI
def test_cli_layout_from_files(capsys):
    assert main(["layout", "--from", str(CONFIGS / "fastllm_large.yaml"), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["framework"] == "fastllm" and doc["layout"]["tensor_parallel"] == 4 and len(doc["ranks"]) == 128
    assert main(["layout", "--from", str(CONFIGS / "megatron_mixtral.sh"), "--rank", "9"]) == 0
    out = capsys.readouterr().out
    assert "Megatron-LM command line" in out and "pipeline_rank=1" in out


def test_cli_prints_the_groups_when_no_layout_reproduces_it(capsys):
    line = ("torchrun --nproc_per_node 16 pretrain_gpt.py --tensor-model-parallel-size 2 --context-parallel-size 2 "
            "--pipeline-model-parallel-size 2 --use-tp-pp-dp-mapping --expert-model-parallel-size 4 "
            "--expert-tensor-parallel-size 1")  # fmt: skip
    assert main(["layout", "--from", line]) == 0
    out = capsys.readouterr().out
    assert "CONTEXT_PARALLEL_GROUP (size 2, 8 groups): [0 2] [1 3]" in out
    assert out.strip().splitlines()[-1].startswith("No Layout reproduces this megatron configuration")
    assert main(["layout", "--from", line, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["layout"] is None and doc["groups"]["EMBEDDING_GROUP"][0] == [0, 4]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--from", "torchrun --nproc_per_node 8 x.py --tensor-model-parallel-size 3"], "is not divisible by 3"),
        (["--from", "model:\n  distributed:\n    foo: 1\n", "--world-size", "8"], "model.distributed.foo (line 3)"),
        (["--from", "nothing.toml"], "no such file"),
        (["--tp", "2", "--from", "--tensor-model-parallel-size 2"], "drop --tensor-parallel"),
        (["--from", "--tensor-model-parallel-size 2", "--world-size", "16", "--torchtitan-version", "x"], ""),
        (["--from", "[parallelism]\ntensor_parallel_degree = 2\n", "--torchtitan-version", "1999"], "not a torchtitan"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(args, needle, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fastdist_lab", "layout", *args],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    if not needle:  # --torchtitan-version is ignored for a Megatron line
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_torchtitan_preset_stays_backward_compatible():
    assert torchtitan(pp=2, dp_shard=2, tp=2).groups("dp_shard_cp").tolist() == [[0, 2], [1, 3], [4, 6], [5, 7]]


def test_shell_control_lines_are_skipped_and_commands_kept():
    script = '#!/bin/bash\nset -ex\nfind . -name x\nif [ -n "$X" ]; then\n  A=(1 2)\nfi\ndone_marker\ndocker run x\n'
    assert [c.words[0] for c in shell_commands(script)] == ["find", "done_marker", "docker"]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["--nnodes {n}", "--nnodes={n}", "--nnodes {n}:{n}", ""]),
    st.sampled_from(["--nproc-per-node {g}", "--nproc_per_node={g}", "--nproc_per_node {g}", ""]),
    st.sampled_from(["", "--standalone", "--rdzv-backend c10d --rdzv-endpoint host:29500", "--max-restarts 3"]),
    st.integers(1, 4),
    st.integers(1, 8),
    st.sampled_from(["pretrain_gpt.py --tensor-model-parallel-size 1", "-m torchtitan.train --x 1"]),
)
def test_world_size_agrees_with_torchruns_own_parser(nodes, procs, extra, n, g, program):
    """The launcher options read by ``split_launch`` give the world torchrun's own parser computes."""
    from torch.distributed.run import config_from_args, parse_args

    options = " ".join(part for part in (nodes, procs, extra) if part).format(n=n, g=g)
    argv = f"{options} {program}".split()
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = saved or "1"  # else torchrun's config_from_args sets it for the whole process
    # torch's DefaultLogsSpecs (torch.distributed.elastic.multiprocessing.api), built by config_from_args, makes a
    # torchelastic_* folder in the temporary folder on every call: here, in a private one removed afterwards
    with tempfile.TemporaryDirectory() as private:
        saved_tempdir, tempfile.tempdir = tempfile.tempdir, private
        try:
            config, _, script_args = config_from_args(parse_args(argv))
        finally:
            tempfile.tempdir = saved_tempdir
            if saved is None:
                del os.environ["OMP_NUM_THREADS"]
    [command] = shell_commands("torchrun " + " ".join(argv))
    launch = split_launch(command)
    assert launch.world_size == config.max_nodes * config.nproc_per_node
    assert launch.local_world_size == config.nproc_per_node
    assert launch.arguments == script_args[len(script_args) - len(launch.arguments) :]
