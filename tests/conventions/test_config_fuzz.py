"""The loaders' promise, kept under fuzzing: every input ends within ``SECONDS_LIMIT`` in a ``LoadedConfig`` or one
project error of one short line, on the API and the CLI alike (``config_mutations``: seeded mutations of ``configs/``
and the judge). Each bound the loaders keep is refused in one line that names it and the value found, and the judge
itself reports every way an outcome can break the promise."""

from __future__ import annotations

import shlex
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastdist_lab.conventions import LoadedConfig, load_config
from fastdist_lab.conventions.launch import MAX_EXPANSION, MAX_SCRIPT_LINES, shell_commands, shell_words
from fastdist_lab.errors import ConventionError, LayoutError
from fastdist_lab.validation import MAX_CONFIG_BYTES, MAX_DIGITS, MAX_NESTING, MAX_VALUES

from .config_mutations import (
    CONFIGS,
    KINDS,
    MESSAGE_LIMIT,
    SECONDS_LIMIT,
    CliOutcome,
    Outcome,
    inputs,
    judge,
    judge_cli,
    load,
    mutations,
    run_cli,
    tally,
)

SEED = 20260807
QUICK, FULL = 60, 300
"""Mutations in the quick loop's profile and in the whole suite's (CI's)."""


def _fuzz(count: int, folder) -> None:
    """Load each mutation (file, and every few also text), judge it, count, print; every input keeps the promise."""
    verdicts, broken, longest, slowest = [], [], 0, (0.0, "")
    for label, source, world in inputs(count, SEED, folder):
        outcome = load(source, world)
        verdict = judge(outcome)  # (an input slower than SECONDS_LIMIT is one that broke the promise)
        verdicts.append(verdict)
        if verdict.startswith("broke"):
            broken.append(f"{label}: {verdict}")
        if outcome.error is not None:
            longest = max(longest, len(str(outcome.error)))
        slowest = max(slowest, (outcome.seconds, label))
    counts = tally(verdicts)
    summary = (
        f"{count} mutated configs ({len(verdicts)} inputs, files and texts): {counts['refused']} refused in one line "
        f"(the longest message {longest} characters), {counts['loaded']} loaded, {counts['broke']} broke the promise; "
        f"the slowest {slowest[0]:.2f} s ({slowest[1]})"
    )
    print(summary)
    assert not broken, summary + "\n" + "\n".join(broken)
    assert slowest[0] <= SECONDS_LIMIT and counts["refused"] and counts["loaded"], summary


def test_quick_fuzz_of_the_published_configs(tmp_path):
    _fuzz(QUICK, tmp_path)


def test_full_fuzz_of_the_published_configs(tmp_path):
    _fuzz(FULL, tmp_path)


def _cli_sample(kinds: list[str], folder, last: bool = False) -> None:
    """The first (or ``last``) of the ``FULL`` mutations of each of ``kinds``, through the real command line, two
    processes at a time."""
    chosen = {}
    for mutation in mutations(FULL, SEED)[:: -1 if last else 1]:
        chosen.setdefault(mutation.kind, mutation)
    paths = []
    for kind in kinds:
        path = folder / chosen[kind].name
        path.write_bytes(chosen[kind].data)
        paths.append((path, chosen[kind].world))
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(lambda job: run_cli(*job), paths))
    verdicts = [judge_cli(outcome) for outcome in outcomes]
    broken = [f"{path.name}: {verdict}" for (path, _), verdict in zip(paths, verdicts) if verdict.startswith("broke")]
    print(f"{len(paths)} mutated configs through fastdist-lab layout --from: {tally(verdicts)}")
    assert not broken, "\n".join(broken)


def test_quick_fuzz_through_the_command_line(tmp_path):
    _cli_sample(["encoding", "anchor_bomb", "shell_laughs"], tmp_path)


def test_full_fuzz_through_the_command_line(tmp_path):
    _cli_sample([kind for kind, _ in KINDS], tmp_path, last=True)


def test_mutations_are_seeded_and_every_kind_takes_its_turn():
    first, again = mutations(len(KINDS), SEED), mutations(len(KINDS), SEED)
    assert [m.data for m in first] == [m.data for m in again]
    assert [m.kind for m in first] == [kind for kind, _ in KINDS]
    assert [m.data for m in mutations(len(KINDS), SEED + 1)] != [m.data for m in first]


# ---------------------------------------------------------------------------------------------------- the judge
def _error(message: str, kind: type[BaseException] = ConventionError) -> Outcome:
    return Outcome(error=kind(message), seconds=0.01)


@pytest.mark.parametrize(
    "outcome, verdict",
    [
        (_error("line 3: --tensor-model-parallel-size 'x' is not an integer"), "refused"),
        (_error("model.distributed.foo (line 3): not a field", LayoutError), "refused"),
        (_error("Exceeds the limit (4300 digits) for integer string conversion", ValueError), "raised ValueError"),
        (Outcome(error=RecursionError("maximum recursion depth exceeded"), seconds=0.2), "raised RecursionError"),
        (_error("not valid YAML: unacceptable character\n  in '<unicode string>', position 3"), "not one line"),
        (_error(""), "not one line"),
        (_error("seed=" + "[" * 5000), "a message of 5,005 characters"),
        (Outcome(error=ConventionError("line 1: refused"), seconds=SECONDS_LIMIT + 1), "broke: took"),
        (Outcome(result={"tensor_parallel": 2}, seconds=0.01), "broke: returned a dict"),
    ],
)
def test_the_judge_reports_every_way_to_break_the_promise(outcome, verdict):
    assert verdict in judge(outcome)


def test_the_judge_passes_a_loaded_config():
    outcome = load(CONFIGS / "megatron_gpt_175b.sh", {})
    assert isinstance(outcome.result, LoadedConfig) and judge(outcome) == "loaded"


def test_a_load_that_never_returns_is_cut_short_and_judged_broken():
    def never_returns(source, **world):
        while True:
            time.sleep(0.01)

    start = time.perf_counter()
    outcome = load("anything", {}, seconds=0.2, loader=never_returns)
    assert time.perf_counter() - start < 5 and judge(outcome).startswith("broke: raised Overran")
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # the alarm is off again


@pytest.mark.parametrize(
    "outcome, verdict",
    [
        (CliOutcome(0, "Layout(world_size=8)\n", ""), "loaded"),
        (CliOutcome(2, "", "fastdist-lab layout: error: line 1: refused\n"), "refused"),
        (CliOutcome(1, "", 'Traceback (most recent call last):\n  File "x"\nValueError: x\n'), "broke: a traceback"),
        (CliOutcome(2, "", "fastdist-lab layout: error: one\ntwo\n"), "broke: exit 2 with 2 line(s)"),
        (CliOutcome(2, "", "fastdist-lab layout: error: " + "x" * 1000 + "\n"), "broke: exit 2 with 1 line(s)"),
        (CliOutcome(1, "", "Killed\n"), "broke: exit 1"),
        (CliOutcome(None, seconds=60), "broke: still running"),
    ],
)
def test_the_command_line_judge_reports_every_way_to_break_the_promise(outcome, verdict):
    assert judge_cli(outcome).startswith(verdict)


# ---------------------------------------------------------------------------------------------------- each bound
def _refusal(source, error=ConventionError, **world) -> str:
    start = time.perf_counter()
    with pytest.raises(error) as raised:
        load_config(source, **world)
    message = str(raised.value)
    assert time.perf_counter() - start < SECONDS_LIMIT and "\n" not in message and len(message) <= MESSAGE_LIMIT
    return message


def _yaml(value: str) -> str:
    return f"model:\n  distributed:\n    world_size: 8\n    seed: {value}\n"


def test_a_file_too_large_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_bytes(b"# padding\n" * (MAX_CONFIG_BYTES // 10 + 1))
    message = _refusal(path)
    assert f"huge.yaml: {path.stat().st_size:,} bytes (1.00 MiB)" in message
    assert f"more than MAX_CONFIG_BYTES={MAX_CONFIG_BYTES:,}" in message
    assert "MAX_CONFIG_BYTES" in _refusal("x" * (MAX_CONFIG_BYTES + 1))


def test_bytes_that_are_not_utf8_are_named_with_their_offset(tmp_path):
    cases = {
        "latin1.sh": ("# Größe\n".encode("latin-1"), "not UTF-8 text at byte 4 (invalid start byte)"),
        "utf16.yaml": ("model: {}\n".encode("utf-16"), "at byte 0 (invalid start byte) (a UTF-16 byte-order mark"),
        "binary.toml": (bytes(range(128, 256)), "not UTF-8 text at byte 0"),
        "nul.sh": (b"torchrun x.py\x00\n", "a NUL character at character 13"),
    }
    for name, (data, needle) in cases.items():
        (tmp_path / name).write_bytes(data)
        assert needle in _refusal(tmp_path / name), name
    assert "not UTF-8 text at character 3 ('\\udcff'" in _refusal("abc\udcff torchrun")
    assert "a NUL character at character 1" in _refusal("a\x00b")
    (tmp_path / "bom.yaml").write_bytes(b"\xef\xbb\xbf" + (CONFIGS / "fastllm_large.yaml").read_bytes())
    assert load_config(tmp_path / "bom.yaml").layout.tensor_parallel == 4  # a UTF-8 byte-order mark is no content


@pytest.mark.parametrize(
    "source, error",
    [
        (_yaml("[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)), (ConventionError, LayoutError)),
        ("\n".join(" " * depth + "a:" for depth in range(MAX_NESTING + 2)) + " 1\n", ConventionError),
        ("[parallelism]\nx = " + "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1) + "\n", ConventionError),
        ("[parallelism]\n" + ".".join(["a"] * 100_000) + " = 1\n", ConventionError),  # tomllib: square time, memory
    ],
)
def test_nesting_deeper_than_the_bound_is_refused(source, error):
    message = _refusal(source, error, world_size=8)
    assert f"nested more than MAX_NESTING={MAX_NESTING} levels deep" in message and "(line " in message


def test_shell_arithmetic_is_bounded_in_operators_and_digits():
    line = "torchrun --nproc_per_node $(({})) pretrain_gpt.py --tensor-model-parallel-size 1"
    chained = _refusal(line.format("1+" * 1000 + "1"))
    assert f"has 1,000 operators and parentheses (more than MAX_NESTING={MAX_NESTING})" in chained
    assert "MAX_NESTING" in _refusal(line.format("-" * 20_000 + "1"))
    squares = "X0=99999999\n" + "".join(f"X{i}=$((X{i - 1}*X{i - 1}))\n" for i in range(1, 14))
    message = _refusal(squares + line.format("X13"))
    assert f"line 4: $(( X2*X2 )) makes an integer of 64 digits (more than MAX_DIGITS={MAX_DIGITS})" in message
    assert f"an integer of 4,400 digits (more than MAX_DIGITS={MAX_DIGITS})" in _refusal(line.format("9" * 4400))
    assert load_config(line.format("2*4")).convention.world_size == 8


@pytest.mark.parametrize(
    "source, error, needle",
    [
        (_yaml("9" * 4400), ConventionError, "line 4): an integer of 4,400 digits (more than MAX_DIGITS=40)"),
        ("[parallelism]\ntensor_parallel_degree = " + "9" * 4301, ConventionError, "line 2): an integer of 4,301"),
        ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers " + "9" * 5000, ConventionError, "5,000 digits"),
        ("torchrun --nproc_per_node " + "9" * 100 + " x.py --tensor-model-parallel-size 1", ConventionError, "100 dig"),
        ("NGPU=8 ./run_train.sh --parallelism.tensor_parallel_degree " + "9" * 41, ConventionError, "41 digits"),
    ],
)
def test_integers_longer_than_the_bound_are_refused_before_conversion(source, error, needle):
    message = _refusal(source, error, world_size=8)
    assert needle in message and "MAX_DIGITS" in message


def test_yaml_aliases_are_bounded_in_the_values_they_stand_for():
    bomb = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    bomb += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    message = _refusal("\n".join(bomb) + "\n" + _yaml("*a8"), ConventionError)
    assert "the text (line 4): " in message
    assert "values so far, aliases expanded (more than MAX_VALUES=10,000)" in message
    assert "inside its own anchor" in _refusal(_yaml("&c [1, [2, *c]]"), ConventionError)
    small = "\n".join(bomb[:3]) + "\n" + _yaml("*a2")  # 1,111 values: read, and its refusal quotes one short line
    message = _refusal(small, LayoutError)
    assert message.startswith("the YAML text: model.distributed: seed=[[['lol', 'lol'")
    assert message.endswith("must be an integer")
    assert "MAX_VALUES" in _refusal("x:\n" + "- 1\n" * (MAX_VALUES + 1), ConventionError)
    assert "MAX_VALUES" in _refusal("[parallelism]\nx = [" + "1," * MAX_VALUES + "1]\n", ConventionError, world_size=8)


@pytest.mark.parametrize(
    "script",
    [
        "A0=lol\n" + "".join(f"A{i}=" + f"$A{i - 1}" * 10 + "\n" for i in range(1, 13)),
        "ARGS=(--x 1)\n" + 'ARGS+=("${ARGS[@]}")\n' * 27,
        "A=" + "x" * 10_000 + "\nN=$((" + "A+" * 99 + "A))\n",
    ],
)
def test_shell_expansion_is_refused_as_it_grows_past_the_bound(script):
    start = time.perf_counter()
    message = _refusal(script + "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 1\n")
    assert f"(more than MAX_EXPANSION={MAX_EXPANSION:,})" in message and time.perf_counter() - start < 2


def test_scripts_longer_than_the_bound_are_refused():
    script = "echo hi\n" * MAX_SCRIPT_LINES + "torchrun --nproc_per_node 8 pretrain_gpt.py"
    assert f"a script of {MAX_SCRIPT_LINES + 1:,} lines (more than MAX_SCRIPT_LINES" in _refusal(script)


@pytest.mark.parametrize(
    "source, needle",
    [
        ("torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size " + "x" * 100_000, "invalid int"),
        ("torchrun --nproc_per_node 8 pretrain_gpt.py --sequence-parallel=" + "y" * 100_000, "takes no value"),
        ("A=" + "'" + "z" * 100_000 + "\ntorchrun x.py --tensor-model-parallel-size 1", "cannot split"),
        ("N=$((" + "(" * 99 + "\ntorchrun x.py", "$(( is never closed"),
        (_yaml("'" + "w" * 100_000 + "'"), "seed='wwww"),
        ("model:\n  distributed:\n    " + "k" * 1000 + ": 1\n", "not a field"),  # (YAML keys: 1,024 at most)
        ("[parallelism]\n" + "k" * 100_000 + " = 1\n", "not a field"),
        ("torchrun --nnodes 1:" + "8" * 10_000 + " x.py --tensor-model-parallel-size 1", "elastic --nnodes"),
    ],
)
def test_refusals_quote_at_most_a_short_line_of_what_they_refuse(source, needle):
    message = _refusal(source, (ConventionError, LayoutError), world_size=8)
    assert needle in message and len(message) <= 200, message


def _interrupted(path, world: dict, at_call: int) -> bool:
    """Load ``path`` with Ctrl-C (a ``KeyboardInterrupt``) raised at the ``at_call``-th call of the package's code;
    whether it came before the load was done."""
    calls = 0

    def interrupt(frame, event, arg):
        nonlocal calls
        if event == "call" and "fastdist_lab" in frame.f_code.co_filename:
            calls += 1
            if calls == at_call:
                raise KeyboardInterrupt
        return None

    sys.settrace(interrupt)
    try:
        load_config(path, **world)
    except KeyboardInterrupt:
        return True
    finally:
        sys.settrace(None)
    return False


@pytest.mark.parametrize("config", ["megatron_mixtral.sh", "fastllm_large.yaml", "torchtitan_llama3_405b.toml"])
def test_an_interrupted_load_changes_no_later_answer(config):
    world = {"world_size": 64} if config.endswith(".toml") else {}
    before = load_config(CONFIGS / config, **world).description
    at_call = 1
    while _interrupted(CONFIGS / config, world, at_call):
        assert load_config(CONFIGS / config, **world).description == before, at_call
        at_call *= 2
    assert at_call > 64  # Ctrl-C came at many points of the load before one got through


# ---------------------------------------------------------------------------------------------------- bounded work
@given(st.text(alphabet=["a", "b", " ", "\t", "\n", "\r", "'", '"', "\\", "$", "#", "\ue000", "é"], max_size=16))
def test_shell_words_split_as_shlex_does(text):
    try:
        expected = shlex.split(text)
    except ValueError:
        with pytest.raises(ValueError):
            shell_words(text)
        return
    assert shell_words(text) == expected


def test_shell_words_take_linear_time_on_a_long_word():
    start = time.perf_counter()
    words = shell_words("a" * 1_000_000 + ' "b c" ' + "d\\ " * 100_000)
    assert len(words) == 3 and time.perf_counter() - start < 2  # shlex takes minutes: it grows a word char by char


def test_a_long_script_of_short_commands_reads_in_time():
    start = time.perf_counter()
    commands = shell_commands("V=x\nls\n" * (MAX_SCRIPT_LINES // 2))
    assert len(commands) == MAX_SCRIPT_LINES // 2 and time.perf_counter() - start < SECONDS_LIMIT / 2
