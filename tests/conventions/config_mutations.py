"""Seeded mutations of the published configs (``configs/``) and the judge of what a loader made of each one.

``mutations(count, seed)`` breaks the configs in every way a file can come broken: flipped bytes, truncations, other
encodings (UTF-16, latin-1 bytes, binary garbage, NUL), huge and large integers, wrong types, duplicated keys, deep
nesting (YAML, TOML, shell arithmetic), shell-variable and array "billion laughs", YAML anchor bombs and alias cycles,
very long lines, many lines, huge files, unclosed quotes and brackets, CRLF and byte-order marks. Kinds take turns, so
any prefix of the list holds every kind. ``judge(outcome)`` says whether an outcome keeps the loaders' promise: a
``LoadedConfig``, or one project error (``ConventionError`` / ``LayoutError``) whose message is one line of at most
``MESSAGE_LIMIT`` characters, within ``SECONDS_LIMIT`` seconds. ``load(path_or_text)`` runs ``load_config`` and
records that outcome (a run past ``HANG_SECONDS`` is cut short by an alarm and recorded as such).
"""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONFIGS = Path(__file__).parent / "configs"

SECONDS_LIMIT = 5.0
"""The time one input may take, loaded or refused."""

HANG_SECONDS = 10.0
"""An input still running after this long is interrupted (an alarm) and judged broken."""

MESSAGE_LIMIT = 300
"""The length of a refusal's message, at most. Every value a message quotes is cut to ``formatting.QUOTE_LIMIT``
characters; most refusals stay under 200 characters, the longest (a framework's refusal that names each size flag
with its line, e.g. Megatron-Core's) under 300."""

WORLDS: dict[str, dict[str, Any]] = {
    "fastllm_tutorial.yaml": {"world_size": 8},
    "fastllm_current.yaml": {"world_size": 16, "local_world_size": 8},
    "torchtitan_llama3_405b.toml": {"world_size": 64, "local_world_size": 8},
    "torchtitan_llama4_moe.toml": {"world_size": 256, "local_world_size": 8, "version": "2026-01"},
    "torchtitan_deepseek_ep.toml": {"world_size": 16, "local_world_size": 8},
}
"""The world (and torchtitan vintage) each config that gives none is read with (the others give their own)."""

CLI_FLAGS = {"world_size": "--world-size", "local_world_size": "--local-world-size", "version": "--torchtitan-version"}
"""The command line's flag for each of ``WORLDS``' arguments."""


@dataclass
class Mutation:
    """One broken config: its bytes, the file name it is written under and the world it is read with."""

    name: str
    kind: str
    data: bytes
    world: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """The bytes as text, as a command line would pass them (undecodable bytes as lone surrogates)."""
        return self.data.decode("utf-8", "surrogateescape")


@dataclass
class Outcome:
    """What a loader made of one input: a result, or an exception, and the seconds it took."""

    result: Any = None
    error: BaseException | None = None
    seconds: float = 0.0


class Overran(BaseException):
    """Raised by the alarm into a load that runs past ``HANG_SECONDS`` (a ``BaseException``: no loader catches it)."""


def load(source: Any, world: dict[str, Any], seconds: float = HANG_SECONDS, loader: Any = None) -> Outcome:
    """``loader(source, **world)`` (``load_config`` by default) timed, its result or exception kept, cut short by an
    alarm after ``seconds``."""
    from fastdist_lab.conventions import load_config

    loader = loader or load_config

    def overrun(signum: int, frame: Any) -> None:
        raise Overran(f"still running after {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, overrun)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.perf_counter()
    outcome = Outcome()
    try:
        outcome.result = loader(source, **world)
    except BaseException as error:  # noqa: BLE001 - every exception is judged, KeyboardInterrupt aside
        if isinstance(error, KeyboardInterrupt):
            raise
        outcome.error = error
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        outcome.seconds = time.perf_counter() - start
    return outcome


def judge(outcome: Outcome) -> str:
    """``"loaded"``, ``"refused"`` (one project error in one short line) or why the promise broke."""
    from fastdist_lab.conventions import LoadedConfig
    from fastdist_lab.errors import ConventionError, LayoutError

    if outcome.seconds > SECONDS_LIMIT:
        return f"broke: took {outcome.seconds:.1f} s (more than {SECONDS_LIMIT:.0f} s)"
    if outcome.error is None:
        if isinstance(outcome.result, LoadedConfig):
            return "loaded"
        return f"broke: returned a {type(outcome.result).__name__}, not a LoadedConfig"
    error = outcome.error
    if not isinstance(error, (ConventionError, LayoutError)):
        return f"broke: raised {type(error).__name__}: {str(error)[:100]!r}"
    message = str(error)
    if not message.strip() or "\n" in message or "\r" in message:
        return f"broke: a {type(error).__name__} whose message is not one line: {message[:100]!r}"
    if len(message) > MESSAGE_LIMIT:
        return f"broke: a message of {len(message):,} characters: {message[:100]!r}"
    return "refused"


CLI_SECONDS = 60.0
"""The time one ``fastdist-lab layout --from FILE`` process may take (an interpreter's start included): past it, the
process is killed and judged to hang."""


@dataclass
class CliOutcome:
    """What ``fastdist-lab layout --from FILE`` did: its exit code (``None``: killed after ``CLI_SECONDS``), its output
    and the seconds it took."""

    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0


def run_cli(path: Path, world: dict[str, Any], seconds: float = CLI_SECONDS) -> CliOutcome:
    """``python -m fastdist_lab layout --from PATH`` (with the world's flags) in a process of its own, timed."""
    flags = [f"{CLI_FLAGS[key]}={value}" for key, value in world.items()]
    command = [sys.executable, "-m", "fastdist_lab", "layout", "--from", str(path), *flags]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, errors="replace", timeout=seconds, cwd=path.parent
        )
    except subprocess.TimeoutExpired:
        return CliOutcome(None, seconds=time.perf_counter() - start)
    return CliOutcome(proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - start)


def judge_cli(outcome: CliOutcome) -> str:
    """``"loaded"`` (exit 0), ``"refused"`` (exit 2, one line on stderr) or why the command broke the promise."""
    if outcome.returncode is None:
        return f"broke: still running after {outcome.seconds:.0f} s (killed)"
    if "Traceback" in outcome.stdout + outcome.stderr:
        return f"broke: a traceback (exit {outcome.returncode}): {outcome.stderr[-100:]!r}"
    if outcome.returncode == 0:
        return "loaded"
    lines = outcome.stderr.splitlines()
    if outcome.returncode != 2:
        return f"broke: exit {outcome.returncode}: {outcome.stderr[:100]!r}"
    if len(lines) != 1 or len(lines[0]) > MESSAGE_LIMIT + 40:  # "fastdist-lab layout: error: " before the message
        return f"broke: exit 2 with {len(lines)} line(s) on stderr: {outcome.stderr[:100]!r}"
    return "refused"


# ---------------------------------------------------------------------------------------------------- the mutations
def mutations(count: int, seed: int = 0) -> list[Mutation]:
    """``count`` mutations of the published configs, the same ones for the same ``seed``; kinds take turns."""
    rng = random.Random(seed)
    bases = sorted(path for path in CONFIGS.iterdir() if path.is_file())
    out = []
    for index in range(count):
        kind, make = KINDS[index % len(KINDS)]
        base = rng.choice([path for path in bases if _fits(kind, path)])
        data, suffix = make(rng, base.read_bytes(), base.suffix)
        name = f"{index:03d}_{kind}_{base.stem}{suffix}"
        out.append(Mutation(name, kind, data, dict(WORLDS.get(base.name, {}))))
    return out


def _fits(kind: str, path: Path) -> bool:
    """Whether a kind of mutation applies to the config at ``path`` (format-specific kinds to their format)."""
    wanted = {"anchor_bomb": ".yaml", "alias_cycle": ".yaml", "array_doubling": ".sh", "shell_laughs": ".sh"}
    return path.suffix == wanted.get(kind, path.suffix)


def _numbers(text: str) -> list[re.Match]:
    return list(re.finditer(r"(?<![\w.-])[0-9]+(?![\w.])", text))


def _replace_number(rng: random.Random, data: bytes, value: str) -> bytes:
    text = data.decode()
    found = _numbers(text)
    if not found:
        return data + f"\n{value}\n".encode()
    match = rng.choice(found)
    return (text[: match.start()] + value + text[match.end() :]).encode()


def _insert_line(rng: random.Random, data: bytes, line: bytes) -> bytes:
    lines = data.split(b"\n")
    at = rng.randrange(len(lines) + 1)
    return b"\n".join([*lines[:at], line, *lines[at:]])


def _byte_flip(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        out[rng.randrange(len(out))] ^= rng.randint(1, 255)
    return bytes(out), suffix


def _truncate(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    return data[: rng.randrange(len(data))], suffix


def _encoding(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    codec = rng.choice(["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
    return data.decode().encode(codec), suffix


def _latin1(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    text = data.decode() + rng.choice(["\n# déjà vu, Größe ½\n", "\nname: café\n", "\n# naïve\n"])
    return text.encode(rng.choice(["latin-1", "cp1252"])), suffix


def _garbage(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    noise = bytes(rng.randrange(256) for _ in range(rng.choice([1, 16, 512, 4096])))
    return rng.choice([noise, data[: len(data) // 2] + noise, noise + data]), rng.choice([suffix, ".bin", ""])


def _nul(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    at = rng.randrange(len(data) + 1)
    return data[:at] + b"\x00" * rng.choice([1, 3, 100]) + data[at:], suffix


def _huge_int(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    digits = rng.choice([41, 100, 4301, 4400, 10_000, 100_000])
    return _replace_number(rng, data, "9" * digits), suffix


def _large_int(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    # (not 2**24 itself: a valid world of 2**24 ranks loads, in a time that grows with the world, tens of seconds)
    value = rng.choice([4096, 2**24 + 1, 2**31, 2**63, 2**64, 10**20, 10**39, 0, -1, -(2**63)])
    return _replace_number(rng, data, str(value)), suffix


def _wrong_type(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    value = rng.choice(["[1, 2]", "{a: 1}", '"eight"', "true", "2.5", "null", "1e400", "0x10", "-0", "inf", "~"])
    return _replace_number(rng, data, value), suffix


def _duplicate(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    lines = data.split(b"\n")
    at = rng.randrange(len(lines))
    copies = rng.choice([1, 2, 1000])
    return b"\n".join([*lines[: at + 1], *[lines[at]] * copies, *lines[at + 1 :]]), suffix


def _deep(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    depth = rng.choice([200, 1_000, 5_000, 20_000])
    line = rng.choice(
        [
            "tensor_parallel: " + "[" * depth + "1" + "]" * depth,
            "x: " + "{a: " * depth + "1" + "}" * depth,
            "x = " + "[" * depth + "1" + "]" * depth,
            "x = " + "{a = " * depth + "1" + "}" * depth,
            "N=$((" + "1+" * depth + "1))",
            "N=$((" + "-" * depth + "1))",
            "N=$((" + "(" * depth + "1" + ")" * depth + "))",
            "\n".join(" " * level + "a:" for level in range(min(depth, 3_000))) + " 1",
        ]
    )
    if suffix == ".toml" and line.startswith("x = "):
        return data.replace(b"[parallelism]\n", b"[parallelism]\n" + line.encode() + b"\n"), suffix
    return _insert_line(rng, data, line.encode()), suffix


def _shell_laughs(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    levels, copies = rng.choice([(12, 10), (30, 2), (8, 10), (40, 2)])
    lines = ["A0=lol"] + [f"A{i}=" + f"$A{i - 1}" * copies for i in range(1, levels + 1)]
    use = rng.choice([f"echo $A{levels}", f"torchrun --nproc_per_node 8 pretrain_gpt.py --x $A{levels}", ""])
    return b"\n".join([*(line.encode() for line in lines), use.encode(), data]), suffix


def _array_doubling(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    times = rng.choice([20, 27, 40])
    lines = ["ARGS=(--x 1)"] + ['ARGS+=("${ARGS[@]}")' if rng.random() < 0.5 else "ARGS+=(${ARGS[@]})"] * times
    return "\n".join(lines).encode() + b"\n" + data.replace(b"pretrain_gpt.py", b"pretrain_gpt.py ${ARGS[@]}"), suffix


def _anchor_bomb(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    depth = rng.choice([4, 6, 8, 9])
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, depth + 1)]
    text = data.decode()
    field = rng.choice(["tensor_parallel", "seed", "world_size", "backend", "timeout"])
    if "distributed:" in text:
        def aliased(match: re.Match) -> str:
            return f"distributed:\n{match.group(1)}{field}: *a{depth}\n{match.group(1)}"

        text = re.sub(r"distributed:\n([ ]+)", aliased, text, count=1)
    bomb = "\n".join(lines) + "\n"
    return (text.replace("model:", bomb + "model:", 1) if "model:" in text else bomb + text).encode(), suffix


def _alias_cycle(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    text = data.decode()
    value = rng.choice(["&c [*c]", "&c {a: *c}", "&c [1, [2, *c]]", "*nowhere"])
    return re.sub(r"(tensor_parallel|seed|compute_dtype|world_size): [^\n]*", rf"\1: {value}", text).encode(), suffix


def _long_line(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    size = rng.choice([10_000, 200_000, 1_000_000])
    line = rng.choice(
        [
            "# " + "x" * size,
            "name: " + "y" * size,
            "--num-layers " + "7" * min(size, 50) + " --" + "z" * size,
            "X=" + "w" * size,
            " ".join(["--tensor-model-parallel-size 2"] * (size // 30)),
            "$((" * (size // 3),
            "${A:-" * (size // 5),
        ]
    )
    return _insert_line(rng, data, line.encode()), suffix


def _many_lines(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    lines = rng.choice([50_000, 150_000])
    pattern = rng.choice(
        ["", " ", "\t ", "#", "V{i}=x\nls", "A+=(x{i})", "A=(", "x\\", "k{i}: {i}", "k{i} = {i}", "- {i}"]
    )
    block = "\n".join(pattern.format(i=i) for i in range(lines // max(1, pattern.count("\n") + 1)))
    return rng.choice([block.encode() + b"\n" + data, data + b"\n" + block.encode()]), suffix


def _huge_file(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    size = rng.choice([900_000, 1_100_000, 5_700_000])
    filler = rng.choice([b"# padding padding padding\n", b"k: v\n", b"x = 1\n", b"echo hi\n"])
    return data + filler * (size // len(filler)), suffix


def _unbalanced(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    token = rng.choice(['"', "'", "[", "{", "$((", "${", "$(", "A=(", "`", "\\", "[parallelism", "model: [", "&", "*"])
    return _insert_line(rng, data, token.encode() + b" 1"), suffix


def _line_endings(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    choice = rng.choice(["crlf", "cr", "bom", "bom_crlf", "separators"])
    if choice == "separators":
        return data.replace(b"\n", rng.choice(["\u2028", "\x85", "\x0c", "\x1e"]).encode()), suffix
    out = data.replace(b"\n", b"\r\n" if "crlf" in choice else b"\r" if choice == "cr" else b"\n")
    return (b"\xef\xbb\xbf" + out if "bom" in choice else out), suffix


def _tokens(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    vocabulary = [
        "--tensor-model-parallel-size", "--pipeline-model-parallel-size 3", "--parallelism.tensor_parallel_degree",
        "[parallelism]", "model:", "distributed:", "  world_size: 7", "torchrun", "-m torchtitan.train", "*a", "&a",
        "$((", "))", "${A[@]}", "\\", ";", "'", '"', "#", "=", ":", "-", "<<: *a", "!!python/object:os.system",
        "!!binary", "%YAML 1.1", "---", "...", "import os", "def f():", "NGPU=0", "WORLD_SIZE=-1", "--nnodes 1:4",
    ]  # fmt: skip
    lines = data.split(b"\n")
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(lines))
        lines[at] += b" " + rng.choice(vocabulary).encode()
    rng.shuffle(lines) if rng.random() < 0.2 else None
    return b"\n".join(lines), rng.choice([suffix, suffix, "", ".txt", ".yml", ".sh"])


def _controls(rng: random.Random, data: bytes, suffix: str) -> tuple[bytes, str]:
    out = bytearray(data)
    for _ in range(rng.randint(1, 5)):
        out.insert(rng.randrange(len(out) + 1), rng.choice([1, 7, 8, 11, 12, 27, 127]))
    return bytes(out), suffix


KINDS = [
    ("byte_flip", _byte_flip),
    ("truncate", _truncate),
    ("encoding", _encoding),
    ("latin1", _latin1),
    ("garbage", _garbage),
    ("nul", _nul),
    ("huge_int", _huge_int),
    ("large_int", _large_int),
    ("wrong_type", _wrong_type),
    ("duplicate", _duplicate),
    ("deep", _deep),
    ("shell_laughs", _shell_laughs),
    ("array_doubling", _array_doubling),
    ("anchor_bomb", _anchor_bomb),
    ("alias_cycle", _alias_cycle),
    ("long_line", _long_line),
    ("many_lines", _many_lines),
    ("huge_file", _huge_file),
    ("unbalanced", _unbalanced),
    ("line_endings", _line_endings),
    ("tokens", _tokens),
    ("controls", _controls),
]
"""Every kind of mutation, in turn order."""


def tally(verdicts: list[str]) -> dict[str, int]:
    """How many inputs were refused, loaded and broke the promise."""
    return {
        "refused": verdicts.count("refused"),
        "loaded": verdicts.count("loaded"),
        "broke": sum(verdict.startswith("broke") for verdict in verdicts),
    }


TEXT_EVERY = 4
"""Every ``TEXT_EVERY``-th mutation is also given as text (as a command line passes it), besides as a file."""


def inputs(count: int, seed: int, folder: Path) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """Each mutation as a file written under ``folder`` (and every ``TEXT_EVERY``-th also as its text): a label, the
    source to load and the world to read it with."""
    for index, mutation in enumerate(mutations(count, seed)):
        path = folder / mutation.name
        path.write_bytes(mutation.data)
        yield mutation.name, path, mutation.world
        if index % TEXT_EVERY == 0:
            yield f"{mutation.name} (as text)", mutation.text(), mutation.world
