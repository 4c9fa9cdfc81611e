"""torchtitan's parallelism settings where they live: a mapping, ``--parallelism.*`` flags, a TOML job config.

torchtitan's ``ParallelismConfig`` (``[parallelism]`` of the TOML job configs used until February 2026, the
``parallelism`` dataclass since) names the degrees ``data_parallel_replicate_degree``,
``data_parallel_shard_degree`` (-1: the rest of the world, its default), ``context_parallel_degree``,
``tensor_parallel_degree``, ``pipeline_parallel_degree``, ``expert_parallel_degree`` and (until April 2026)
``expert_tensor_parallel_degree``; the world is the launcher's (``NGPU`` in ``run_train.sh``, torchrun's
``--nproc_per_node`` and ``--nnodes``). Every other field torchtitan has had in that section is accepted and
changes no mesh (``OTHER_FIELDS``); an unknown one is a ``ConventionError`` naming it. A TOML text is read within
the loaders' bounds (``validation.MAX_VALUES``, ``MAX_NESTING``, ``MAX_DIGITS``) before tomllib parses it.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConventionError, ConventionWorldSizeNeeded
from ..formatting import clipped
from ..validation import MAX_DIGITS, MAX_NESTING, MAX_VALUES, check_digits, check_int, read_text
from .launch import Command, launch_parts, shell_commands, split_launch
from .torchtitan_dims import LOADER_VERSION, TorchtitanMesh, torchtitan

DEGREES: dict[str, str] = {
    "data_parallel_replicate_degree": "dp_replicate",
    "data_parallel_shard_degree": "dp_shard",
    "context_parallel_degree": "cp",
    "tensor_parallel_degree": "tp",
    "pipeline_parallel_degree": "pp",
    "expert_parallel_degree": "ep",
    "expert_tensor_parallel_degree": "etp",
}
"""torchtitan's degree fields and the ``ParallelDims`` argument each one sets."""

OTHER_FIELDS: frozenset[str] = frozenset(
    {
        "fsdp_reshard_after_forward",
        "enable_fsdp_symm_mem",
        "enable_sequence_parallel",
        "disable_loss_parallel",
        "enable_async_tensor_parallel",
        "enable_compiled_autograd",
        "spmd_backend",
        "full_dtensor",
        "module_fqns_per_model_part",
        "pipeline_parallel_first_stage_less_layers",
        "pipeline_parallel_last_stage_less_layers",
        "pipeline_parallel_layers_per_stage",
        "pipeline_parallel_schedule",
        "pipeline_parallel_schedule_csv",
        "pipeline_parallel_microbatch_size",
        "pipeline_parallel_microbatches",
        "pipeline_parallel_split_points",
        "pipeline_parallel_expert_parallel_overlap",
        "num_pp_microbatches",
        "context_parallel_rotate_method",
        "context_parallel_load_balancer",
        "context_parallel_ptrr_mask_key",
        "expert_parallel_comm_backend",
        "hybridep_non_blocking_expert_capacity_factor",
    }
)
"""Fields torchtitan's parallelism section has had that change no device mesh."""


def torchtitan_degrees(settings: Mapping[str, Any], lines: Mapping[str, int] | None = None) -> dict[str, int]:
    """``ParallelDims`` keyword arguments from torchtitan field names (``ConventionError`` naming a bad key)."""
    degrees: dict[str, int] = {}
    for key, value in settings.items():
        where = f"parallelism.{clipped(str(key))}" + (f" (line {lines[key]})" if lines and key in lines else "")
        if key in OTHER_FIELDS:
            continue
        if key not in DEGREES:
            close = difflib.get_close_matches(str(key), [*DEGREES, *OTHER_FIELDS], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConventionError(f"{where}: not a field of torchtitan's parallelism config{hint}")
        at = f"line {lines[key]}: " if lines and key in lines else ""
        if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
            value = int(check_digits(f"{at}parallelism.{key}", value, error=ConventionError))
        degrees[DEGREES[key]] = check_int(f"{at}parallelism.{key}", value, error=ConventionError)
    degrees.setdefault("dp_shard", -1)
    return degrees


def read_toml(text: str, name: str) -> tuple[dict[str, Any], dict[str, int]]:
    """The ``[parallelism]`` table of a torchtitan TOML job config and each of its keys' lines."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    _toml_bounds(text, name)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConventionError(f"{name}: not valid TOML: {clipped(str(error), 120)}") from None
    section = data.get("parallelism")
    if section is None:
        sections = clipped(", ".join(f"[{k}]" for k, v in data.items() if isinstance(v, dict)), 60) or "none"
        raise ConventionError(f"{name}: no [parallelism] section (sections: {sections})")
    if not isinstance(section, dict):
        raise ConventionError(f"{name}: parallelism must be a table")
    lines: dict[str, int] = {}
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        header = re.match(r"^\s*\[([^\]]+)\]", line)
        if header:
            inside = header.group(1).strip() == "parallelism"
            continue
        key = re.match(r"^\s*([A-Za-z0-9_]+)\s*=", line)
        if inside and key:
            lines.setdefault(key.group(1), number)
    return section, lines


_TOML_TOKEN = re.compile(r"""\"\"\"|'''|["'#\[\]{},=.]|(?<![\w.])[0-9][0-9_]*""")
_TOML_SKIP = {  # from a string's (or a comment's) opening to its end
    '"""': re.compile(r'(?:[^"\\]|\\.|"(?!""))*"""', re.S),
    "'''": re.compile(r"(?:[^']|'(?!''))*'''"),
    '"': re.compile(r'(?:[^"\\\n]|\\.)*"?'),
    "'": re.compile(r"[^'\n]*'?"),
    "#": re.compile(r"[^\n]*"),
}


def _toml_bounds(text: str, name: str) -> int:
    """The values of a TOML text (its keys, tables and array items: each ``=``, ``[``, ``{`` and ``,`` outside strings
    and comments, and each part of a dotted key past its second), read before tomllib reads them: ``ConventionError``
    naming the limit and the line as soon as they pass ``MAX_VALUES``, the nesting of arrays, inline tables or a dotted
    key's parts passes ``MAX_NESTING`` (tomllib recurses once per level, and reads a dotted key in a time that grows
    with the square of its parts) or an integer has more than ``MAX_DIGITS`` digits (tomllib converts any)."""
    depth = values = position = dots = 0
    while (match := _TOML_TOKEN.search(text, position)) is not None:
        token, position = match.group(), match.end()
        if token in _TOML_SKIP:
            end = _TOML_SKIP[token].match(text, position)
            position = end.end() if end is not None else len(text)
            continue
        if token[0].isdigit():
            if len(token) > MAX_DIGITS:  # (the line is counted only for a refusal)
                check_digits(f"{name} (line {text.count(chr(10), 0, match.start()) + 1})", token, error=ConventionError)
            continue
        dots = dots + 1 if token == "." else 0  # the dots of one key (a number's point: one dot)
        depth = max(0, depth + (token in "[{") - (token in "]}"))
        values += token in "[{,=" or dots > 1
        if max(depth, dots) > MAX_NESTING or values > MAX_VALUES:
            at = f"{name} (line {text.count(chr(10), 0, match.start()) + 1})"
            if max(depth, dots) > MAX_NESTING:
                raise ConventionError(f"{at}: nested more than MAX_NESTING={MAX_NESTING} levels deep")
            raise ConventionError(f"{at}: more than MAX_VALUES={MAX_VALUES:,} keys, tables and array items")
    return values


def parallelism_flags(
    words: Sequence[str], lines: int | Sequence[int] = 1
) -> tuple[dict[str, Any], dict[str, str], dict[str, int]]:
    """``--parallelism.NAME VALUE`` / ``--parallelism.NAME=VALUE`` settings, the job options that locate the
    rest of the config (``--job.config_file``, ``--module``, ``--config``), and the line of each setting's flag
    (``lines``: one line for all words, or each word's line)."""
    settings: dict[str, Any] = {}
    job: dict[str, str] = {}
    where: dict[str, int] = {}
    words = list(words)
    word_lines = [lines] * len(words) if isinstance(lines, int) else list(lines)
    index = 0
    while index < len(words):
        word, line = words[index], word_lines[index]
        index += 1
        flag, eq, value = word.partition("=")
        takes_value = not eq and index < len(words) and not words[index].startswith("--")
        if flag.startswith("--parallelism."):
            key = flag[len("--parallelism.") :].replace("-", "_")
            if key.startswith("no_") and key[3:] in OTHER_FIELDS:
                continue
            if key in DEGREES and not eq and not takes_value:
                raise ConventionError(f"line {line}: {flag} needs a value")
            if eq or takes_value:
                value = value if eq else words[index]
                index += 0 if eq else 1
            settings[key] = value
            where[key] = line
        elif flag in ("--job.config_file", "--job.config-file", "--module", "--config"):
            if not (eq or takes_value):
                raise ConventionError(f"line {line}: {flag} needs a value")
            job[flag.lstrip("-").replace("-", "_")] = value if eq else words[index]
            index += 0 if eq else 1
    return settings, job, where


TORCHTITAN_PROGRAM = re.compile(r"^-m torchtitan(\.\w+)*$|(^|/)torchtitan/[\w/]+\.py$|(^|/)run_train\.sh$")
"""Programs that run torchtitan: ``-m torchtitan.train`` (any ``torchtitan.*`` module), a script inside a
``torchtitan/`` folder (``torchtitan/train.py`` of 2025), or torchtitan's ``run_train.sh``."""


def is_torchtitan_command(command: Command) -> bool:
    """Whether ``command`` runs torchtitan, read from its structure: its program is torchtitan's
    (``TORCHTITAN_PROGRAM``, under any launcher or none), or its program's arguments (or the command itself, a line
    of bare arguments) hold ``--parallelism.*`` flags. A word in a comment, a string or another command never
    counts."""
    launch = launch_parts(command)
    if TORCHTITAN_PROGRAM.search(launch.program):
        return True
    return any(word.startswith("--parallelism.") for word in launch.arguments)


def torchtitan_from_command(
    text: str | Sequence[str],
    world_size: int | None = None,
    local_world_size: int | None = None,
    version: str | None = None,
) -> TorchtitanMesh:
    """torchtitan's meshes for a launch line (``NGPU=8 ./run_train.sh --parallelism.tensor_parallel_degree 2``,
    ``torchrun --nproc_per_node 8 -m torchtitan.train --job.config_file x.toml ...``). A ``--job.config_file``
    that exists is read first and the flags override it; degrees set nowhere take torchtitan's defaults.
    ``version`` defaults to ``LOADER_VERSION`` (today's meshes)."""
    if isinstance(text, str):
        chosen = [c for c in shell_commands(text) if is_torchtitan_command(c)]
        if not chosen:
            raise ConventionError(
                "no torchtitan command found (no -m torchtitan.train, no run_train.sh, no --parallelism.* flag)"
            )
        command = chosen[-1]
    else:
        command = Command(list(text), {}, 1)
    launch = split_launch(command)
    settings, job, where = parallelism_flags(launch.arguments, launch.argument_lines or command.line)
    notes = list(launch.notes)
    base: dict[str, Any] = {}
    path = job.get("job.config_file")
    if path and os.path.isfile(path):
        name = clipped(os.path.basename(path))
        base, _ = read_toml(read_text(path, name, error=ConventionError), name)
        notes.append(f"read {clipped(path)}")
    elif path or job.get("config"):
        missing = clipped(path or job["config"])
        notes.append(f"{missing} not read: degrees it sets are not known here (torchtitan's defaults)")
    version = version or LOADER_VERSION
    world = world_size if world_size is not None else launch.world_size
    if world is None:
        raise ConventionWorldSizeNeeded(
            "the command line does not give the world size (no NGPU=, no torchrun); "
            "pass the world size (world_size=..., --world-size)"
        )
    mesh = torchtitan(**torchtitan_degrees({**base, **settings}, where), version=version, world_size=world)
    mesh.local_world_size = local_world_size or launch.local_world_size or world
    mesh.source_notes = tuple(notes)
    return mesh


def torchtitan_from_settings(
    settings: Mapping[str, Any] | str,
    world_size: int | None = None,
    local_world_size: int | None = None,
    version: str | None = None,
    name: str = "the TOML text",
) -> TorchtitanMesh:
    """torchtitan's meshes for a mapping of ``ParallelismConfig`` fields (or ``{"parallelism": {...}}``) or for the
    text of a TOML job config; ``world_size`` is torchtitan's ``NGPU`` x nodes; ``version`` defaults to
    ``LOADER_VERSION`` (today's meshes)."""
    lines: dict[str, int] | None = None
    if isinstance(settings, str):
        settings, lines = read_toml(settings, name)
    elif "parallelism" in settings and isinstance(settings["parallelism"], Mapping):
        settings = settings["parallelism"]
    mesh = torchtitan(**torchtitan_degrees(settings, lines), version=version or LOADER_VERSION, world_size=world_size)
    mesh.local_world_size = local_world_size or mesh.world_size
    mesh.source_notes = ()
    return mesh
