"""Launch lines and launch scripts: the commands in them, and the world size their launcher gives.

``shell_commands(text)`` reads the small part of the shell that training scripts use (line continuations,
comments, ``NAME=value`` / ``export NAME=value``, arrays ``NAME=( ... )`` and ``NAME+=( ... )``, ``$NAME``,
``${NAME}``, ``${NAME[@]}``, ``${NAME:-default}``, ``$(( arithmetic ))``) and returns each command's words with
variables expanded. ``launcher_world(words)`` splits a command into launcher and program and reads the world from
torchrun / ``python -m torch.distributed.run`` (``--nnodes``, ``--nproc-per-node`` / ``--nproc_per_node``),
the older ``torch.distributed.launch``, DeepSpeed's launcher (``--num_nodes``,
``--num_gpus``) or ``WORLD_SIZE=`` / ``LOCAL_WORLD_SIZE=`` / ``NGPU=`` assignments. Errors are
``ConventionError`` naming the line or the flag.
"""

from __future__ import annotations

import ast
import operator
import re
import shlex
from dataclasses import dataclass, field

from ..errors import ConventionError
from ..validation import check_int

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ARRAY_START = re.compile(rf"^(?:export\s+)?({_NAME})(\+?)=\((.*)$", re.S)
_CONTROL = frozenset(
    {"if", "then", "fi", "else", "elif", "for", "do", "done", "while", "case", "esac", "set", "{", "}"}
)


@dataclass
class Command:
    """One command of a script: its words (variables expanded), its ``NAME=value`` prefixes and its line."""

    words: list[str]
    env: dict[str, str]
    line: int
    variables: dict[str, str] = field(default_factory=dict)


def shell_commands(text: str) -> list[Command]:
    """Every command of ``text`` (one line or a script) with variables expanded, in order."""
    scalars: dict[str, str] = {}
    arrays: dict[str, list[str]] = {}
    commands: list[Command] = []
    lines = _logical_lines(text)
    index = 0
    while index < len(lines):
        number, line = lines[index]
        index += 1
        stripped = _strip_comment(line).strip()
        if not stripped or stripped.split()[0].rstrip(";") in _CONTROL:
            continue
        array = _ARRAY_START.match(stripped)
        if array:
            name, append, rest = array.groups()
            body = rest
            while ")" not in _strip_comment(body) and index < len(lines):
                body += "\n" + _strip_comment(lines[index][1])
                index += 1
            body = _strip_comment(body)
            if ")" not in body:
                raise ConventionError(f"line {number}: array {name}=( is never closed")
            inner = body[: body.rindex(")")]
            items = _split(_expand(inner, scalars, arrays, number), number)
            arrays[name] = (arrays.get(name, []) if append else []) + items
            continue
        words = _split(_expand(stripped, scalars, arrays, number), number, keep_raw=stripped)
        env: dict[str, str] = {}
        while words and re.match(rf"^{_NAME}=", words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        if words and words[0] == "export":
            words.pop(0)
            for word in words:
                key, _, value = word.partition("=")
                scalars[key] = value
            continue
        if not words:
            scalars.update(env)
            continue
        commands.append(Command(words, env, number, dict(scalars)))
    return commands


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    buffer, start = "", 1
    for number, raw in enumerate(text.splitlines(), 1):
        if not buffer:
            start = number
        if raw.rstrip().endswith("\\"):
            buffer += raw.rstrip()[:-1] + " "
            continue
        out.append((start, buffer + raw))
        buffer = ""
    if buffer:
        out.append((start, buffer))
    return out


def _strip_comment(line: str) -> str:
    """``line`` without a ``#`` comment (a ``#`` that starts a word outside quotes)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _split(text: str, number: int, keep_raw: str | None = None) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as error:
        raise ConventionError(f"line {number}: cannot split {keep_raw or text!r} into words: {error}") from None


_VAR = re.compile(rf"\$\(\((.*?)\)\)|\$\{{({_NAME})\[[@*]\]\}}|\$\{{({_NAME})(?::?-([^}}]*))?\}}|\$({_NAME}|[0-9@*#?])")


def _expand(text: str, scalars: dict[str, str], arrays: dict[str, list[str]], number: int) -> str:
    def value_of(name: str) -> str:
        if name in arrays:
            return " ".join(shlex.quote(item) for item in arrays[name])
        return scalars.get(name, "")

    def substitute(match: re.Match) -> str:
        arithmetic, array, name, default, simple = match.groups()
        if arithmetic is not None:
            expression = _VAR.sub(substitute, arithmetic)
            expression = re.sub(_NAME, lambda m: scalars.get(m.group(0), "0"), expression)
            return str(_arithmetic(expression, number))
        if array is not None:
            return value_of(array)
        if name is not None:
            value = value_of(name)
            return value if value or default is None else default.strip("\"'")
        return value_of(simple)

    previous = None
    for _ in range(8):  # values may hold further variables
        if text == previous:
            break
        previous, text = text, _VAR.sub(substitute, text)
    return text


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv,
    ast.Mod: operator.mod,
}


def _arithmetic(expression: str, number: int) -> int:
    def evaluate(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return evaluate(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -evaluate(node.operand)
        raise ValueError(expression)

    try:
        return evaluate(ast.parse(expression.replace("/", "//").replace("////", "//"), mode="eval"))
    except (ValueError, SyntaxError, ZeroDivisionError):
        raise ConventionError(f"line {number}: cannot evaluate $(( {expression.strip()} ))") from None


# ---------------------------------------------------------------------- launchers
_TORCHRUN_FLAGS = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "--use-env", "--use_env"}
_MODULE_FLAGS = {"-m", "--module"}
LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "deepspeed")
"""Launchers whose options give the world size."""


@dataclass
class Launch:
    """A command split into its launcher part and the program's own arguments, with the world they give."""

    program: str
    arguments: list[str]
    world_size: int | None = None
    local_world_size: int | None = None
    notes: list[str] = field(default_factory=list)


def _int_option(flag: str, value: str, line: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ConventionError(f"line {line}: {flag} {value!r} is not a number of processes; pass the size") from None
    return check_int(f"line {line}: {flag}", number, minimum=1, error=ConventionError)


def split_launch(command: Command) -> Launch:
    """The launcher (torchrun, ``python -m torch.distributed.run|launch``, deepspeed, plain python) and program
    of ``command``, and the world size and processes per node the launcher (or ``WORLD_SIZE=``) gives."""
    words = list(command.words)
    launcher = ""
    if words and (words[0] in ("torchrun", "deepspeed") or words[0].endswith(("/torchrun", "/deepspeed"))):
        launcher = words.pop(0).rsplit("/", 1)[-1]
    elif len(words) >= 3 and re.match(r"^(python[0-9.]*|.*/python[0-9.]*)$", words[0]) and words[1] == "-m":
        if words[2] in ("torch.distributed.run", "torch.distributed.launch"):
            launcher = words[2]
            words = words[3:]
    if not launcher:
        if words and re.match(r"^(python[0-9.]*|.*/python[0-9.]*)$", words[0]):
            words.pop(0)
            while words and words[0].startswith("-") and words[0] not in _MODULE_FLAGS:
                words.pop(0)
        return _plain(words, command)
    options: dict[str, str] = {}
    program = ""
    while words:
        word = words.pop(0)
        if not word.startswith("-"):
            program = word
            break
        flag, eq, value = word.partition("=")
        if flag in _MODULE_FLAGS:
            program = f"-m {words.pop(0) if words else ''}".strip()
            break
        if flag in _TORCHRUN_FLAGS:
            options[flag.replace("_", "-")] = "1"
            continue
        if not eq:
            if not words:
                raise ConventionError(f"line {command.line}: {launcher} option {flag} has no value")
            value = words.pop(0)
        options[flag.replace("_", "-").lstrip("-")] = value
    launch = Launch(program, words)
    line = command.line
    if launcher == "deepspeed":
        nodes = _int_option("--num_nodes", options.get("num-nodes", "1"), line)
        if "num-gpus" not in options:
            raise ConventionError(f"line {line}: deepspeed without --num_gpus uses every GPU it finds; pass the size")
        per_node = _int_option("--num_gpus", options["num-gpus"], line)
    else:
        nnodes = options.get("nnodes", "1")
        low, _, high = nnodes.partition(":")
        if high and high != low:
            raise ConventionError(f"line {line}: elastic --nnodes {nnodes}: the world size is not fixed; pass it")
        nodes = _int_option("--nnodes", low, line)
        per_node = _int_option("--nproc-per-node", options.get("nproc-per-node", "1"), line)
    launch.world_size, launch.local_world_size = nodes * per_node, per_node
    launch.notes.append(f"{launcher}: {nodes} node(s) x {per_node} process(es)")
    return launch


def _plain(words: list[str], command: Command) -> Launch:
    program = ""
    if words and words[0] in _MODULE_FLAGS and len(words) > 1:
        program, words = f"-m {words[1]}", words[2:]
    elif words and not words[0].startswith("-"):
        program, words = words[0], words[1:]
    launch = Launch(program, words)
    env = {**command.variables, **command.env}
    for key in ("WORLD_SIZE", "NGPU"):
        if env.get(key, "").strip():
            launch.world_size = _int_option(key + "=", env[key].strip(), command.line)
            launch.notes.append(f"{key}={launch.world_size}")
            break
    if env.get("LOCAL_WORLD_SIZE", "").strip():
        launch.local_world_size = _int_option("LOCAL_WORLD_SIZE=", env["LOCAL_WORLD_SIZE"].strip(), command.line)
    elif launch.world_size is not None and "NGPU" in launch.notes[-1]:
        launch.local_world_size = launch.world_size
    return launch
