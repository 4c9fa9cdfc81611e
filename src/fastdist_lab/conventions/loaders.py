"""One loader for every framework's config: ``load_config(text_or_path)`` -> a layout or a convention, in words.

It recognises what it is given by its structure, never by a word anywhere in the text: a YAML mapping of Fast-LLM's
(``model: distributed:``, a ``distributed:`` mapping or the bare fields), a TOML document with tables (torchtitan's
job config, ``[parallelism]``), or shell commands (a launch line or script) one of which runs torchtitan (``-m
torchtitan.train``, ``run_train.sh``, ``--parallelism.*`` flags) or Megatron-LM (an entry script such as
``pretrain_gpt.py``, or Megatron's parallel arguments). Comments, strings and other commands of a script say
nothing. Python source (torchtitan's config registry, a training script) and empty input are refused in one line.
So is anything past the loaders' bounds, before the work it would cost: a text over ``MAX_CONFIG_BYTES`` or not UTF-8,
nesting past ``MAX_NESTING``, YAML or TOML values past ``MAX_VALUES`` (aliases expanded), integers past ``MAX_DIGITS``
(``validation``), scripts past ``MAX_SCRIPT_LINES`` or expansions past ``MAX_EXPANSION`` (``launch``). The answer
holds this project's ``Layout`` when one gives the same groups (and says which), else says plainly that none does and
keeps the framework's own convention, whose ``named_groups()`` lists every group the framework builds.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import DIM_NAMES
from ..errors import ConventionError
from ..fastllm import FASTLLM_FIELDS, load_yaml, read_fastllm
from ..formatting import clipped, quoted
from ..layout import Layout
from ..validation import check_text, read_text
from .base import Convention
from .launch import launch_parts, shell_commands
from .megatron_args import is_megatron_command
from .megatron_state import MegatronParallelState
from .project import as_convention
from .torchtitan_config import DEGREES, is_torchtitan_command, torchtitan_from_command, torchtitan_from_settings

FRAMEWORKS: tuple[str, ...] = ("fastllm", "megatron", "torchtitan")
"""The frameworks ``load_config`` reads (``framework=`` takes one of these to skip the detection)."""

FORMATS = "a Fast-LLM YAML, a torchtitan TOML or launch line, or a Megatron-LM launch line or script"
"""What ``load_config`` reads, in words (for its refusals, which stay one short line: the module's docstring and the
README say how each is recognised)."""


@dataclass(frozen=True)
class LoadedConfig:
    """What ``load_config`` read: the framework, this project's ``layout`` (or ``None`` with ``reason``), the
    framework's ``convention`` and a plain-words ``description``. ``value`` is the layout when there is one, else
    the convention."""

    framework: str
    source: str
    layout: Layout | None
    convention: Convention
    description: str
    reason: str = ""

    @property
    def value(self) -> Layout | Convention:
        """The ``Layout`` when one reproduces the groups, else the framework's convention."""
        return self.layout if self.layout is not None else self.convention

    def named_groups(self) -> dict[str, np.ndarray]:
        """Every group the framework builds, by the framework's name (a Fast-LLM layout: its nine dims)."""
        if self.framework == "fastllm" and self.layout is not None:
            return {name: self.layout.groups(name) for name in DIM_NAMES}
        return self.convention.named_groups()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"LoadedConfig({self.framework}, {self.source}: {self.value!r})"

    def _repr_html_(self) -> str:
        import html

        lines = "".join(f"<div>{html.escape(line)}</div>" for line in self.description.splitlines())
        return f"<div class='fastdist-loaded'><b>{html.escape(self.framework)}</b>{lines}</div>"


def detect_framework(text: str, name: str = "the text") -> str:
    """Which framework's config or command line ``text`` is, from its structure (``ConventionError`` when it
    cannot tell, naming what it read; for empty input and Python source too).

    A TOML table header (``[parallelism]``) is torchtitan's job config; a YAML mapping with Fast-LLM's keys is
    Fast-LLM's; else the shell commands of the text decide: one that runs torchtitan (``-m torchtitan.*``,
    ``run_train.sh``, ``--parallelism.*`` flags) or Megatron-LM (``pretrain_*.py``, its parallel arguments).
    """
    if not check_text(text, name, error=ConventionError).strip():
        raise ConventionError(f"{name} is empty: nothing to read; give {FORMATS}")
    if _is_python(text):
        raise ConventionError(_python_refused(name))
    if _TOML_TABLE.search(text):
        return "torchtitan"
    parses, data = _yaml_load(text, name)
    mapping = data if isinstance(data, Mapping) else None
    if mapping is not None and set(map(str, mapping)) & _FASTLLM_KEYS:
        return "fastllm"
    if mapping is None and _YAML_KEY.match(text) and not parses:
        return "fastllm"  # a mapping that YAML cannot read: Fast-LLM's reader names the line at fault
    try:
        commands = shell_commands(text)
    except ConventionError:
        if mapping is None:
            raise
        commands = []
    found: dict[str, int] = {}
    for command in commands:
        for framework, recognise in (("torchtitan", is_torchtitan_command), ("megatron", is_megatron_command)):
            if recognise(command):
                found[framework] = command.line
    if len(found) == 1:
        return next(iter(found))
    if found:
        raise ConventionError(
            f"{name} holds a torchtitan command (line {found['torchtitan']}) and a Megatron-LM command "
            f"(line {found['megatron']}); give one of them"
        )
    if mapping is not None:
        keys = clipped(", ".join(map(str, list(mapping)[:8])), 60)
        raise ConventionError(f"{name} is a YAML mapping (keys {keys}) of no framework read here; give {FORMATS}")
    programs = [_program(command) for command in commands if _program(command)]
    ran = f" (its commands run {clipped(', '.join(dict.fromkeys(programs)), 40)})" if programs else ""
    raise ConventionError(f"cannot tell which framework {name} is{ran}: give {FORMATS}")


_TOML_TABLE = re.compile(r"^[^\S\n]*\[\[?[\w.-]+\]\]?[^\S\n]*(#.*)?$", re.M)  # blanks, not line ends: no backtracking
_FASTLLM_KEYS = {"model", "distributed", *FASTLLM_FIELDS}
_PYTHON_STATEMENTS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _python_refused(name: str) -> str:
    return f"{name} is Python source, which is not read: give {FORMATS}"


_PYTHON_STATEMENT = re.compile(r"^(import|from|def|class|async)\s", re.M)


def _is_python(text: str) -> bool:
    """Python source: a ``python`` shebang, or text that parses as Python and imports or defines something."""
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    if first.startswith("#!") and "python" in first:
        return True
    if not _PYTHON_STATEMENT.search(text):  # no top-level import or definition: nothing to parse
        return False
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):  # the last two: CPython's "too complex to parse"
        return False
    return any(isinstance(node, _PYTHON_STATEMENTS) for node in tree.body)


_YAML_KEY = re.compile(  # comment and blank lines, then a Fast-LLM key (each line matched once: no backtracking)
    r"^(?:[^\S\n]*(?:#[^\n]*)?\n)*[^\S\n]*(model|distributed|" + "|".join(FASTLLM_FIELDS) + r")[^\S\n]*:(\s|$)"
)


def _yaml_load(text: str, name: str) -> tuple[bool, Any]:
    """Whether ``text`` parses as YAML, and what it parses to (``None`` when it does not); YAML past the loaders'
    bounds is refused (``ConventionError``)."""
    import yaml

    try:
        return True, load_yaml(text, name, ConventionError)[0]
    except yaml.YAMLError:
        return False, None


def _program(command: Any) -> str:
    parts = launch_parts(command)
    return " ".join(part for part in (parts.launcher, parts.program) if part)


def _framework_of_mapping(data: Mapping[str, Any]) -> str:
    keys = set(data)
    if "parallelism" in keys or (keys and keys <= set(DEGREES) | {"spmd_backend"}):
        return "torchtitan"
    if keys & {"model", "distributed"} or (keys and keys <= set(FASTLLM_FIELDS)):
        return "fastllm"
    raise ConventionError(f"cannot tell which framework a mapping with keys {sorted(keys)} belongs to")


def load_config(
    source: str | os.PathLike | Mapping[str, Any],
    *,
    world_size: int | None = None,
    local_world_size: int | None = None,
    version: str | None = None,
    framework: str | None = None,
) -> LoadedConfig:
    """Read a framework's config or command line (a path, its text, or a mapping) into a ``LoadedConfig``.

    ``world_size`` / ``local_world_size`` win over what the source says (a Fast-LLM YAML or a torchtitan TOML
    usually says nothing: then they are needed); ``version`` picks torchtitan's vintage ("2026-08"/"current",
    the default; "2026-01"; "2025-12"). Raises ``LayoutError`` (Fast-LLM) or ``ConventionError`` (both
    ``ValueError``) naming the line, key or rule at fault; nothing is returned half-read.
    """
    name, text, data = "the mapping", None, None
    if isinstance(source, Mapping):
        data = source
    elif isinstance(source, (str, os.PathLike)) and _is_file(source):
        name = clipped(os.path.basename(os.fspath(source)))
        text = read_text(source, name, error=ConventionError)
    elif isinstance(source, str) and re.fullmatch(r"\S+\.(ya?ml|toml|sh|py)", source.strip()):
        raise ConventionError(f"cannot read {quoted(source)}: no such file")
    elif isinstance(source, str):
        name, text = "the text", check_text(source, "the text", error=ConventionError)
    elif isinstance(source, os.PathLike):
        raise ConventionError(f"cannot read {quoted(os.fspath(source))}: not a file")
    else:
        raise ConventionError(f"source={quoted(source)} must be a path, a config's text or a mapping")
    if framework is not None and framework not in FRAMEWORKS:
        raise ConventionError(f"framework={quoted(framework)}; use one of {', '.join(FRAMEWORKS)}")
    if text is not None and not text.strip():
        raise ConventionError(f"{name} is empty: nothing to read; give {FORMATS}")
    if text is not None and name.endswith(".py"):
        raise ConventionError(_python_refused(name))
    if framework is None:
        if text is not None and name.endswith((".yaml", ".yml")):
            framework = "fastllm"
        elif text is not None and name.endswith(".toml"):
            framework = "torchtitan"
        else:
            framework = _framework_of_mapping(data) if data is not None else detect_framework(text or "", name)
    if framework == "fastllm":
        readable = source if isinstance(source, (str, Mapping)) else os.fspath(source)
        return _fastllm(readable, name, world_size, local_world_size)
    if framework == "megatron":
        if text is None:
            raise ConventionError("a Megatron-LM configuration is a command line, not a mapping")
        state = MegatronParallelState.from_args(text, world_size=world_size, local_world_size=local_world_size)
        layout, why = state.layout_equivalent()
        head = f"Megatron-LM command line ({name}): {state.describe_configuration()}"
        return _answer("megatron", name, layout, state, head, state.source_notes, why)
    if text is not None and (name.endswith(".toml") or re.search(r"^[^\S\n]*\[[\w.]+\][^\S\n]*$", text, re.M)):
        mesh = torchtitan_from_settings(text, world_size, local_world_size, version, name=name)
    elif text is not None:
        mesh = torchtitan_from_command(text, world_size, local_world_size, version)
    else:
        mesh = torchtitan_from_settings(data, world_size, local_world_size, version)  # type: ignore[arg-type]
    layout, why = mesh.layout_equivalent()
    head = f"torchtitan parallelism ({name}): {mesh.describe_degrees()}"
    return _answer("torchtitan", name, layout, mesh, head, mesh.source_notes, why)


def _is_file(source: Any) -> bool:
    text = os.fspath(source)
    return "\n" not in text and len(text) < 4096 and os.path.isfile(text)


def _fastllm(source: Any, name: str, world_size: int | None, local_world_size: int | None) -> LoadedConfig:
    settings = read_fastllm(source, world_size=world_size, local_world_size=local_world_size)
    layout = Layout.from_fastllm(source, world_size=world_size, local_world_size=local_world_size)
    description = f"{settings.describe()}\nLayout: {layout!r}"
    return LoadedConfig("fastllm", name, layout, as_convention(layout), description)


def _answer(
    framework: str, name: str, layout: Layout | None, convention: Convention, head: str, notes: Any, why: str
) -> LoadedConfig:
    lines = [head, *(f"  {note}" for note in notes)]
    if layout is not None:
        lines += [f"Layout: {layout!r}", f"  {why}"]
        return LoadedConfig(framework, name, layout, convention, "\n".join(lines))
    lines.append(f"No Layout reproduces it: {why.removeprefix('no Layout: ')}")
    return LoadedConfig(framework, name, None, convention, "\n".join(lines), why.removeprefix("no Layout: "))
