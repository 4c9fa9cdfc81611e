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
_CONTROL = frozenset("if then fi else elif for do done while case esac set { }".split())


@dataclass
class Command:
    """One command of a script: its words (variables expanded), its ``NAME=value`` prefixes and its line.

    ``word_lines`` holds, word by word, the line each word is written on (a word that an array expanded to: the
    array item's own line), so an error can cite the line of the bad flag, not only the command's first line.
    """

    words: list[str]
    env: dict[str, str]
    line: int
    variables: dict[str, str] = field(default_factory=dict)
    word_lines: list[int] = field(default_factory=list)

    def lines(self) -> list[int]:
        """The line of every word (the command's line for words whose line is not known)."""
        if len(self.word_lines) == len(self.words):
            return list(self.word_lines)
        return [self.line] * len(self.words)


# Tags carried through expansion and splitting, then removed: the words after a _LINE tag were written on that line;
# a word holding a _FROM tag came from an array item written on that line.
_LINE, _FROM, _END = "\ue000", "\ue001", "\ue002"
_TAG = re.compile(f"([{_LINE}{_FROM}])([0-9]+){_END}")


def shell_commands(text: str) -> list[Command]:
    """Every command of ``text`` (one line or a script) with variables expanded, in order."""
    scalars: dict[str, str] = {}
    arrays: dict[str, list[tuple[str, int]]] = {}
    commands: list[Command] = []
    lines = _logical_lines(text)
    index = 0
    while index < len(lines):
        number, segments = lines[index]
        index += 1
        tagged = _tagged(segments)
        stripped = _TAG.sub("", tagged)
        if not stripped or stripped.split()[0].rstrip(";") in _CONTROL:
            continue
        array = _ARRAY_START.match(stripped)
        if array:
            name, append = array.group(1), array.group(2)
            body = tagged[tagged.index("=(") + 2 :]
            while ")" not in body and index < len(lines):
                body += "\n" + _tagged(lines[index][1])
                index += 1
            if ")" not in body:
                raise ConventionError(f"line {number}: array {name}=( is never closed")
            inner = body[: body.rindex(")")]
            items = _untag(_split(_expand(inner, scalars, arrays, number), number), number)
            arrays[name] = (arrays.get(name, []) if append else []) + items
            continue
        tagged_words = _split(_expand(tagged, scalars, arrays, number), number, keep_raw=stripped)
        located = _untag(tagged_words, number)
        words, word_lines = [word for word, _ in located], [line for _, line in located]
        env: dict[str, str] = {}
        while words and re.match(rf"^{_NAME}=", words[0]):
            key, _, value = words.pop(0).partition("=")
            word_lines.pop(0)
            env[key] = value
        if words and words[0] == "export":
            scalars.update(word.partition("=")[::2] for word in words[1:])  # NAME=value: (NAME, value)
            continue
        if not words:
            scalars.update(env)
            continue
        commands.append(Command(words, env, number, dict(scalars), word_lines))
    return commands


def _logical_lines(text: str) -> list[tuple[int, list[tuple[int, str]]]]:
    """Lines joined where they end with a backslash: (first line, [(line, text) of each physical line])."""
    out: list[tuple[int, list[tuple[int, str]]]] = []
    segments: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.rstrip().endswith("\\"):
            segments.append((number, raw.rstrip()[:-1]))
            continue
        segments.append((number, raw))
        out.append((segments[0][0], segments))
        segments = []
    if segments:
        out.append((segments[0][0], segments))
    return out


def _tagged(segments: list[tuple[int, str]]) -> str:
    """One logical line without its comment, each physical line's first word tagged with that line's number."""
    joined = " ".join(text for _, text in segments)
    kept = len(_strip_comment(joined))
    parts: list[str] = []
    offset = 0
    for number, text in segments:
        piece = text[: max(0, kept - offset)]
        offset += len(text) + 1
        if not piece.strip():
            continue
        lead = len(piece) - len(piece.lstrip())
        parts.append(f"{piece[:lead]}{_LINE}{number}{_END}{piece[lead:]}")
    return " ".join(parts).strip()


def _untag(words: list[str], line: int) -> list[tuple[str, int]]:
    """Each word without its tags, with the line it was written on (words that were only tags are dropped)."""
    located: list[tuple[str, int]] = []
    for word in words:
        own = None
        for kind, number in _TAG.findall(word):
            if kind == _LINE:
                line = int(number)
            elif own is None:
                own = int(number)
        plain = _TAG.sub("", word)
        if plain or not _TAG.search(word):
            located.append((plain, own if own is not None else line))
    return located


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
        raw = _TAG.sub("", keep_raw or text)
        raise ConventionError(f"line {number}: cannot split {raw!r} into words: {error}") from None


_VAR = re.compile(
    rf'"\$\{{({_NAME})\[[@*]\]\}}"|\$\(\((.*?)\)\)|\$\{{({_NAME})\[[@*]\]\}}|\$\{{({_NAME})(?::?-([^}}]*))?\}}'
    rf"|\$({_NAME}|[0-9@*#?])"
)


def _expand(text: str, scalars: dict[str, str], arrays: dict[str, list[tuple[str, int]]], number: int) -> str:
    def items_of(name: str, quoted: bool) -> str:
        # "${A[@]}" keeps each item one word; unquoted, the shell splits items at blanks (quotes inside stay literal)
        pieces = [(piece, line) for whole, line in arrays[name] for piece in ([whole] if quoted else whole.split())]
        return " ".join(shlex.quote(f"{_FROM}{line}{_END}{piece}") for piece, line in pieces)

    def value_of(name: str) -> str:
        if name in arrays:
            return items_of(name, quoted=False)
        return scalars.get(name, "")

    def substitute(match: re.Match) -> str:
        quoted_array, arithmetic, array, name, default, simple = match.groups()
        if quoted_array is not None:
            if quoted_array in arrays:
                return items_of(quoted_array, quoted=True)
            return shlex.quote(scalars[quoted_array]) if quoted_array in scalars else ""
        if arithmetic is not None:
            expression = _VAR.sub(substitute, _TAG.sub("", arithmetic))
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


@dataclass
class Launch:
    """A command split into its launcher part and the program's own arguments, with the world they give.

    ``launcher`` is ``torchrun``, ``torch.distributed.run``, ``torch.distributed.launch``, ``deepspeed``,
    ``python`` or empty (a program run directly); ``program`` a path or ``-m module``; ``argument_lines`` the line
    each argument is written on.
    """

    program: str
    arguments: list[str]
    world_size: int | None = None
    local_world_size: int | None = None
    notes: list[str] = field(default_factory=list)
    launcher: str = ""
    argument_lines: list[int] = field(default_factory=list)
    options: dict[str, tuple[str | None, int]] = field(default_factory=dict)


def _int_option(flag: str, value: str, line: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ConventionError(f"line {line}: {flag} {value!r} is not a number of processes; pass the size") from None
    return check_int(f"line {line}: {flag}", number, minimum=1, error=ConventionError)


_PYTHON = re.compile(r"^(python[0-9.]*|.*/python[0-9.]*)$")


def launch_parts(command: Command) -> Launch:
    """``command`` split into launcher, launcher options, program and the program's arguments, without reading
    the world (nothing is refused here: ``split_launch`` does that)."""
    located = list(zip(command.words, command.lines()))
    launcher = ""
    first = located[0][0] if located else ""
    if first in ("torchrun", "deepspeed") or first.endswith(("/torchrun", "/deepspeed")):
        launcher, located = first.rsplit("/", 1)[-1], located[1:]
    elif len(located) >= 3 and _PYTHON.match(first) and located[1][0] in _MODULE_FLAGS:
        if located[2][0] in ("torch.distributed.run", "torch.distributed.launch"):
            launcher, located = located[2][0], located[3:]
    if not launcher:
        if located and _PYTHON.match(located[0][0]):
            launcher, located = "python", located[1:]
            while located and located[0][0].startswith("-") and located[0][0] not in _MODULE_FLAGS:
                located.pop(0)
        program = ""
        if len(located) > 1 and located[0][0] in _MODULE_FLAGS:
            program, located = f"-m {located[1][0]}", located[2:]
        elif located and not located[0][0].startswith("-"):
            program, located = located[0][0], located[1:]
        return _launch(launcher, {}, program, located)
    options: dict[str, tuple[str | None, int]] = {}
    program = ""
    while located:
        word, line = located.pop(0)
        if not word.startswith("-"):
            program = word
            break
        flag, eq, value = word.partition("=")
        if flag in _MODULE_FLAGS:
            program = f"-m {located.pop(0)[0] if located else ''}".strip()
            break
        if flag in _TORCHRUN_FLAGS:
            options[flag.replace("_", "-").lstrip("-")] = ("1", line)
            continue
        if not eq:
            value = located.pop(0)[0] if located else None  # type: ignore[assignment]
        options[flag.replace("_", "-").lstrip("-")] = (value, line)
    return _launch(launcher, options, program, located)


def _launch(launcher: str, options: dict, program: str, located: list[tuple[str, int]]) -> Launch:
    words, lines = [word for word, _ in located], [line for _, line in located]
    return Launch(program, words, launcher=launcher, argument_lines=lines, options=options)


def split_launch(command: Command) -> Launch:
    """The launcher (torchrun, ``python -m torch.distributed.run|launch``, deepspeed, plain python) and program
    of ``command``, and the world size and processes per node the launcher (or ``WORLD_SIZE=``) gives."""
    launch = launch_parts(command)
    if launch.launcher in ("", "python"):
        return _plain(launch, command)
    for flag, (value, line) in launch.options.items():
        if value is None:
            raise ConventionError(f"line {line}: {launch.launcher} option --{flag} has no value")

    def option(name: str, default: str) -> tuple[str, int]:
        value, line = launch.options.get(name, (default, command.line))
        return str(value), line

    if launch.launcher == "deepspeed":
        nodes = _int_option("--num_nodes", *option("num-nodes", "1"))
        if "num-gpus" not in launch.options:
            raise ConventionError(
                f"line {command.line}: deepspeed without --num_gpus uses every GPU it finds; pass the size"
            )
        per_node = _int_option("--num_gpus", *option("num-gpus", "1"))
    else:
        nnodes, line = option("nnodes", "1")
        low, _, high = nnodes.partition(":")
        if high and high != low:
            raise ConventionError(f"line {line}: elastic --nnodes {nnodes}: the world size is not fixed; pass it")
        nodes = _int_option("--nnodes", low, line)
        per_node = _int_option("--nproc-per-node", *option("nproc-per-node", "1"))
    launch.world_size, launch.local_world_size = nodes * per_node, per_node
    launch.notes.append(f"{launch.launcher}: {nodes} node(s) x {per_node} process(es)")
    return launch


def _plain(launch: Launch, command: Command) -> Launch:
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
