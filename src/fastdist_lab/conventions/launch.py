"""Launch lines and launch scripts: the commands in them, and the world size their launcher gives.

``shell_commands(text)`` reads the small part of the shell that training scripts use (line continuations,
comments, ``NAME=value`` / ``export NAME=value``, arrays ``NAME=( ... )`` and ``NAME+=( ... )``, ``$NAME``,
``${NAME}``, ``${NAME[@]}``, ``${NAME:-default}``, ``$(( arithmetic ))``) and returns each command's words with
variables expanded. ``launcher_world(words)`` splits a command into launcher and program and reads the world from
torchrun / ``python -m torch.distributed.run`` (``--nnodes``, ``--nproc-per-node`` / ``--nproc_per_node``),
the older ``torch.distributed.launch``, DeepSpeed's launcher (``--num_nodes``,
``--num_gpus``) or ``WORLD_SIZE=`` / ``LOCAL_WORLD_SIZE=`` / ``NGPU=`` assignments. Errors are
``ConventionError`` naming the line or the flag.

A script is read up to ``MAX_SCRIPT_LINES`` lines, and its expansion is bounded as it grows: its substitutions stop at
``MAX_EXPANSION`` characters in all (a "billion laughs" of variables or an array doubled again and again is refused
there, not after filling the memory), a ``$(( ))`` at ``validation.MAX_NESTING`` operators and parentheses and at
``validation.MAX_DIGITS`` digits. Words are split in linear time (``shell_words``).
"""

from __future__ import annotations

import ast
import operator
import re
import shlex
from dataclasses import dataclass, field

from ..errors import ConventionError
from ..formatting import clipped, quoted
from ..validation import MAX_DIGITS, MAX_NESTING, check_digits, check_int

MAX_EXPANSION = 1 << 18
"""The most characters the variables, arrays and ``$(( ))`` of one script may substitute in all, counted as they are
substituted: a launch script's expansions make a few KiB, while a "billion laughs" of variables (``A1=$A0$A0...``) or an
array doubled again and again (``A+=(${A[@]})``) would take gigabytes and minutes."""

MAX_SCRIPT_LINES = 10_000
"""The most lines of a launch line or script the loaders read: published launch scripts have tens, and each line costs
tens of microseconds to read."""

LAUNCH_VARIABLES: tuple[str, ...] = ("WORLD_SIZE", "NGPU", "LOCAL_WORLD_SIZE")
"""The shell variables a plain launch reads the world from; a ``Command`` keeps their values as set before it."""

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ARRAY_START = re.compile(rf"^(?:export\s+)?({_NAME})(\+?)=\((.*)$", re.S)
_CONTROL = frozenset("if then fi else elif for do done while case esac set { }".split())


@dataclass
class Command:
    """One command of a script: its words (variables expanded), its ``NAME=value`` prefixes and its line.

    ``variables`` holds the script's ``LAUNCH_VARIABLES`` as set before the command; ``word_lines`` holds, word by
    word, the line each word is written on (a word that an array expanded to: the array item's own line), so an error
    can cite the line of the bad flag, not only the command's first line.
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


class _Expansion:
    """What the expansions of one script have substituted so far, refused past ``MAX_EXPANSION`` characters."""

    def __init__(self) -> None:
        self.used = 0

    def add(self, text: str, number: int) -> str:
        """``text``, substituted on line ``number``, counted."""
        self.used += len(text)
        if self.used > MAX_EXPANSION:
            raise ConventionError(
                f"line {number}: variables and arrays expand to {self.used:,} characters so far (more than "
                f"MAX_EXPANSION={MAX_EXPANSION:,}): a variable or an array that doubles?"
            )
        return text


def shell_commands(text: str) -> list[Command]:
    """Every command of ``text`` (one line or a script) with variables expanded, in order."""
    scalars: dict[str, str] = {}
    arrays: dict[str, list[tuple[str, int]]] = {}
    commands: list[Command] = []
    expansion = _Expansion()
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
            body = [tagged[tagged.index("=(") + 2 :]]
            while ")" not in body[-1] and index < len(lines):
                body.append(_tagged(lines[index][1]))
                index += 1
            if ")" not in body[-1]:
                raise ConventionError(f"line {number}: array {name}=( is never closed")
            inner = "\n".join(body)
            inner = inner[: inner.rindex(")")]
            items = _untag(_split(_expand(inner, scalars, arrays, number, expansion), number), number)
            if not append:
                arrays[name] = []
            arrays.setdefault(name, []).extend(items)
            continue
        tagged_words = _split(_expand(tagged, scalars, arrays, number, expansion), number, keep_raw=stripped)
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
        variables = {key: scalars[key] for key in LAUNCH_VARIABLES if key in scalars}
        commands.append(Command(words, env, number, variables, word_lines))
    return commands


def _logical_lines(text: str) -> list[tuple[int, list[tuple[int, str]]]]:
    """Lines joined where they end with a backslash: (first line, [(line, text) of each physical line])."""
    out: list[tuple[int, list[tuple[int, str]]]] = []
    segments: list[tuple[int, str]] = []
    lines = text.splitlines()
    if len(lines) > MAX_SCRIPT_LINES:
        raise ConventionError(f"a script of {len(lines):,} lines (more than MAX_SCRIPT_LINES={MAX_SCRIPT_LINES:,})")
    for number, raw in enumerate(lines, 1):
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


_WORD_PART = re.compile(r"""([ \t\r\n]+)|'([^']*)(')?|"((?:[^"\\]|\\.)*)(")?|\\(.)?|([^ \t\r\n'"\\]+)""", re.S)


def shell_words(text: str) -> list[str]:
    """``shlex.split(text)``: words split at blanks, quotes and backslashes as a POSIX shell reads them (``ValueError``
    for an unclosed quote or a final backslash), in time linear in the text, where shlex, which builds a word a
    character at a time, takes time that grows with the square of the longest word."""
    words: list[str] = []
    word: list[str] | None = None
    for match in _WORD_PART.finditer(text):
        blank, single, single_end, double, double_end, escaped, plain = match.groups()
        first = match.group(0)[0]
        if blank is not None:
            if word is not None:
                words.append("".join(word))
            word = None
            continue
        word = [] if word is None else word
        if (first == "'" and single_end is None) or (first == '"' and double_end is None):
            raise ValueError("No closing quotation")
        if first == "\\" and escaped is None:
            raise ValueError("No escaped character")
        if first == "'":
            word.append(single)
        elif first == '"':
            word.append(re.sub(r'\\(["\\])', r"\1", double))  # inside double quotes \ escapes only " and \
        else:
            word.append(escaped if first == "\\" else plain)
    if word is not None:
        words.append("".join(word))
    return words


def _split(text: str, number: int, keep_raw: str | None = None) -> list[str]:
    try:
        return shell_words(text)
    except ValueError as error:
        raw = _TAG.sub("", keep_raw or text)
        raise ConventionError(f"line {number}: cannot split {quoted(raw)} into words: {error}") from None


_VAR = re.compile(
    rf'"\$\{{({_NAME})\[[@*]\]\}}"|\$\(\((.*?)\)\)|\$\{{({_NAME})\[[@*]\]\}}|\$\{{({_NAME})(?::?-([^}}]*))?\}}'
    rf"|\$({_NAME}|[0-9@*#?])"
)


def _expand(
    text: str, scalars: dict[str, str], arrays: dict[str, list[tuple[str, int]]], number: int, expansion: _Expansion
) -> str:
    def items_of(name: str, in_quotes: bool) -> str:
        # "${A[@]}" keeps each item one word; unquoted, the shell splits items at blanks (quotes inside stay literal)
        pieces = [(piece, line) for whole, line in arrays[name] for piece in ([whole] if in_quotes else whole.split())]
        return " ".join(shlex.quote(f"{_FROM}{line}{_END}{piece}") for piece, line in pieces)

    def value_of(name: str) -> str:
        if name in arrays:
            return items_of(name, in_quotes=False)
        return scalars.get(name, "")

    def substitute(match: re.Match) -> str:
        return expansion.add(substituted(match), number)

    def substituted(match: re.Match) -> str:
        quoted_array, arithmetic, array, name, default, simple = match.groups()
        if quoted_array is not None:
            if quoted_array in arrays:
                return items_of(quoted_array, in_quotes=True)
            return shlex.quote(scalars[quoted_array]) if quoted_array in scalars else ""
        if arithmetic is not None:
            expression = _VAR.sub(substitute, _TAG.sub("", arithmetic))
            expression = re.sub(_NAME, lambda m: expansion.add(scalars.get(m.group(0), "0"), number), expression)
            return str(_arithmetic(expression, number, _TAG.sub("", arithmetic)))
        if array is not None:
            return value_of(array)
        if name is not None:
            value = value_of(name)
            return value if value or default is None else default.strip("\"'")
        return value_of(simple)

    previous = None
    for _ in range(8 if "$" in text else 0):  # values may hold further variables
        if text == previous:
            break
        _check_closed(text, number)
        previous, text = text, _VAR.sub(substitute, text)
    return text


def _check_closed(text: str, number: int) -> None:
    """Refuse a ``$((`` or ``${`` that is never closed on its line (else each would be searched for to the end of the
    line, a time that grows with the square of the line)."""
    for line in text.split("\n"):
        for opening, closing in (("$((", "))"), ("${", "}")):
            if line.rfind(opening) > line.rfind(closing):
                raise ConventionError(f"line {number}: {opening} is never closed")


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv,
    ast.Mod: operator.mod,
}


def _arithmetic(expression: str, number: int, written: str) -> int:
    """The value of a ``$(( ))`` (``written``; ``expression`` with its variables substituted), within ``MAX_NESTING``
    operators and parentheses (so within as many levels of Python's parser) and ``MAX_DIGITS`` digits, operands and
    results alike."""
    shown = f"$(( {clipped(written.strip(), 60)} ))"
    operators = sum(not (character.isalnum() or character in " \t\n_)") for character in expression)
    if operators > MAX_NESTING:
        raise ConventionError(
            f"line {number}: {shown} has {operators:,} operators and parentheses (more than MAX_NESTING={MAX_NESTING})"
        )
    for digits in re.findall(r"[0-9]+", expression):
        check_digits(f"line {number}: {shown}", digits, error=ConventionError)

    def evaluate(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return evaluate(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            value = _OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value = -evaluate(node.operand)
        else:
            raise ValueError(expression)
        if abs(value) >= 10**MAX_DIGITS:
            digits = len(str(abs(value)))  # (at most twice MAX_DIGITS: each operand was within it)
            raise ConventionError(
                f"line {number}: {shown} makes an integer of {digits} digits (more than MAX_DIGITS={MAX_DIGITS})"
            )
        return value

    try:
        return evaluate(ast.parse(expression.replace("/", "//").replace("////", "//"), mode="eval"))
    except (ValueError, SyntaxError, ZeroDivisionError) as error:
        if isinstance(error, ConventionError):
            raise
        raise ConventionError(f"line {number}: cannot evaluate {shown}") from None


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
    check_digits(f"line {line}: {flag}", value, error=ConventionError)
    try:
        number = int(value)
    except ValueError:
        raise ConventionError(
            f"line {line}: {flag} {quoted(value)} is not a number of processes; pass the size"
        ) from None
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
            raise ConventionError(f"line {line}: {launch.launcher} option --{clipped(flag)} has no value")

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
            raise ConventionError(
                f"line {line}: elastic --nnodes {clipped(nnodes)}: the world size is not fixed; pass it"
            )
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
