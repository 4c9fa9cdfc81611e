"""Megatron-LM command lines: the parallel arguments of ``pretrain_gpt.py`` & co, and the world their launcher gives.

Megatron-LM's own argument names are read (``megatron/training/arguments.py`` and the config dataclasses it builds
its flags from, main branch of August 2026): ``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``,
``--context-parallel-size``, ``--expert-model-parallel-size``, ``--expert-tensor-parallel-size``,
``--num-distributed-optimizer-instances``, ``--hierarchical-context-parallel-sizes``, ``--use-tp-pp-dp-mapping``
(order ``tp-cp-ep-pp-dp`` instead of ``tp-cp-ep-dp-pp``), ``--sequence-parallel`` and the virtual-pipeline flags
``--num-virtual-stages-per-pipeline-rank`` / ``--num-layers-per-virtual-pipeline-stage`` (with ``--num-layers``).
Every other Megatron argument changes no group and is skipped, except a near miss of a parallel flag (e.g.
``--tensor-parallel-size``), which Megatron's parser refuses and so is refused here. The input may be the arguments
alone, a launch line or a whole launch script (see ``launch``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

from ..errors import ConventionError
from ..formatting import clipped, quoted
from ..validation import check_digits
from .launch import Command, launch_parts

INT_ARGS: dict[str, str] = {
    "--tensor-model-parallel-size": "tensor_model_parallel_size",
    "--pipeline-model-parallel-size": "pipeline_model_parallel_size",
    "--context-parallel-size": "context_parallel_size",
    "--expert-model-parallel-size": "expert_model_parallel_size",
    "--expert-tensor-parallel-size": "expert_tensor_parallel_size",
    "--num-distributed-optimizer-instances": "num_distributed_optimizer_instances",
    "--num-virtual-stages-per-pipeline-rank": "num_virtual_stages_per_pipeline_rank",
    "--num-layers-per-virtual-pipeline-stage": "num_layers_per_virtual_pipeline_stage",
    "--num-layers": "num_layers",
    "--tensor-parallel-num-weight-shards": "tensor_parallel_num_weight_shards",
    "--expert-tensor-parallel-num-weight-shards": "expert_tensor_parallel_num_weight_shards",
    "--model-parallel-size": "model_parallel_size",
}
"""Megatron-LM's integer arguments that shape the process groups, with their ``args`` attribute."""

FLAG_ARGS: dict[str, str] = {
    "--use-tp-pp-dp-mapping": "use_tp_pp_dp_mapping",
    "--sequence-parallel": "sequence_parallel",
    "--hybrid-context-parallel": "hybrid_context_parallel",
}
"""Megatron-LM's switches that this loader reads."""

LIST_ARGS: dict[str, str] = {"--hierarchical-context-parallel-sizes": "hierarchical_context_parallel_sizes"}
"""Megatron-LM's list arguments (``nargs='+'``) that this loader reads."""

OTHER_PARALLEL_ARGS: frozenset[str] = frozenset(
    {
        "--rl-inference-tensor-model-parallel-size",
        "--rl-inference-pipeline-model-parallel-size",
        "--rl-inference-expert-model-parallel-size",
        "--rl-inference-expert-tensor-model-parallel-size",
        "--pipeline-model-parallel-layout",
        "--pipeline-model-parallel-comm-backend",
        "--overlap-moe-expert-parallel-comm",
        "--ckpt-fully-parallel-save",
        "--ckpt-fully-parallel-load",
        "--data-parallel-random-init",
        "--data-parallel-sharding-strategy",
        "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers",
        "--no-sequence-parallel",
    }
)
"""Real Megatron-LM arguments close to the ones above (not near misses)."""

KNOWN_ARGS = {**INT_ARGS, **FLAG_ARGS, **LIST_ARGS}


MEGATRON_ENTRY = re.compile(r"(^|/)(pretrain_\w+|train_rl)\.py$")
"""Megatron-LM's entry scripts (``pretrain_gpt.py``, ``pretrain_mamba.py``, ``pretrain_vlm.py``, ``train_rl.py``,
...): a command that runs one is a Megatron-LM launch, whatever its arguments."""


def parse_megatron_args(words: Sequence[str], lines: int | Sequence[int] = 1) -> tuple[dict[str, Any], dict[str, int]]:
    """The parallel settings among Megatron-LM arguments ``words`` (later occurrences win, as with argparse), and
    the line each setting's flag is written on (``lines``: one line for all words, or each word's line)."""
    values: dict[str, Any] = {}
    where: dict[str, int] = {}
    words = list(words)
    word_lines = [lines] * len(words) if isinstance(lines, int) else list(lines)
    index = 0
    looked_up: set[str] = set()  # flags already compared with the known ones (a script may repeat one many times)
    while index < len(words):
        word, line = words[index], word_lines[index]
        index += 1
        if not word.startswith("--"):
            continue
        flag, eq, inline = word.partition("=")
        if flag in FLAG_ARGS:
            if eq:
                raise ConventionError(f"line {line}: {flag} takes no value (got {quoted(word)})")
            values[FLAG_ARGS[flag]] = True
            where[FLAG_ARGS[flag]] = line
        elif flag in INT_ARGS:
            if eq:
                text = inline
            elif index < len(words) and not words[index].startswith("--"):
                text, index = words[index], index + 1
            else:
                raise ConventionError(f"line {line}: argument {flag}: expected one argument")
            check_digits(f"line {line}: argument {flag}", text, error=ConventionError)
            try:
                values[INT_ARGS[flag]] = int(text)
            except ValueError:
                raise ConventionError(f"line {line}: argument {flag}: invalid int value: {quoted(text)}") from None
            where[INT_ARGS[flag]] = line
        elif flag in LIST_ARGS:
            items = [inline] if eq else []
            while not eq and index < len(words) and not words[index].startswith("-"):
                items.append(words[index])
                index += 1
            try:
                digits = [check_digits(f"line {line}: argument {flag}", item, error=ConventionError) for item in items]
                values[LIST_ARGS[flag]] = [int(item) for item in digits]
            except ConventionError:
                raise
            except ValueError:
                raise ConventionError(f"line {line}: argument {flag}: invalid int value in {quoted(items)}") from None
            if not items:
                raise ConventionError(f"line {line}: argument {flag}: expected at least one argument")
            where[LIST_ARGS[flag]] = line
        elif flag not in OTHER_PARALLEL_ARGS and flag not in looked_up:
            looked_up.add(flag)
            close = difflib.get_close_matches(flag.replace("_", "-"), list(KNOWN_ARGS), n=1, cutoff=0.85)
            if close:
                raise ConventionError(
                    f"line {line}: {clipped(flag)} is not a Megatron-LM argument (Megatron's parser refuses it); "
                    f"did you mean {close[0]}?"
                )
    return values, where


def state_arguments(
    values: dict[str, Any], line: int = 1, where: dict[str, int] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """``initialize_model_parallel`` keyword arguments from parsed values, as ``validate_args`` derives them,
    and notes on what a group listing leaves out. Errors cite the line of the flag at fault (``where``, from
    ``parse_megatron_args``), else ``line``."""
    notes: list[str] = []

    def at(*names: str) -> int:
        found = [where[name] for name in names if where and name in where]
        return max(found) if found else line

    if values.get("model_parallel_size") is not None:
        raise ConventionError(
            f"line {at('model_parallel_size')}: --model-parallel-size is no longer valid, use "
            "--tensor-model-parallel-size instead (Megatron-LM refuses it)"
        )
    kwargs: dict[str, Any] = {
        key: values[key]
        for key in (
            "tensor_model_parallel_size",
            "pipeline_model_parallel_size",
            "context_parallel_size",
            "expert_model_parallel_size",
            "expert_tensor_parallel_size",
            "num_distributed_optimizer_instances",
            "hierarchical_context_parallel_sizes",
        )
        if key in values
    }
    tp = values.get("tensor_model_parallel_size", 1)
    etp = values.get("expert_tensor_parallel_size") or tp
    for shards, size in (("tensor_parallel_num_weight_shards", tp), ("expert_tensor_parallel_num_weight_shards", etp)):
        flag = "--" + shards.replace("_", "-")
        if values.get(shards) is not None and values[shards] != size:
            raise ConventionError(
                f"line {at(shards)}: {flag} {values[shards]} asks for generalized tensor parallelism (a weight-remat "
                f"axis of size {values[shards]}/{size}); no convention here models that axis"
            )
    kwargs["order"] = "tp-cp-ep-pp-dp" if values.get("use_tp_pp_dp_mapping") else "tp-cp-ep-dp-pp"
    kwargs["sequence_parallel"] = bool(values.get("sequence_parallel"))
    vpp = values.get("num_virtual_stages_per_pipeline_rank")
    per_stage = values.get("num_layers_per_virtual_pipeline_stage")
    if vpp is not None and per_stage is not None:
        both = at("num_virtual_stages_per_pipeline_rank", "num_layers_per_virtual_pipeline_stage")
        raise ConventionError(
            f"line {both}: No more than one of the following arguments can be set at the same time: "
            "--num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank (Megatron-LM refuses it)"
        )
    if per_stage is not None:
        pp, layers = values.get("pipeline_model_parallel_size", 1), values.get("num_layers")
        if layers is None:
            notes.append("--num-layers-per-virtual-pipeline-stage without --num-layers: virtual pipeline size unknown")
        elif layers % pp or (layers // pp) % per_stage:
            per_stage_line = at("num_layers_per_virtual_pipeline_stage")
            raise ConventionError(
                f"line {per_stage_line}: --num-layers {layers} / --pipeline-model-parallel-size {pp} is not a "
                f"multiple of --num-layers-per-virtual-pipeline-stage {per_stage} (Megatron-LM refuses it)"
            )
        else:
            vpp = layers // pp // per_stage
    if vpp is not None and vpp != 1:
        kwargs["virtual_pipeline_model_parallel_size"] = vpp
    if values.get("hybrid_context_parallel"):
        notes.append("--hybrid-context-parallel: its extra data-and-context groups are not listed")
    return kwargs, notes


def is_megatron_command(command: Command) -> bool:
    """Whether ``command`` runs Megatron-LM, read from its structure: its program is one of Megatron-LM's entry
    scripts (``MEGATRON_ENTRY``), or its program's arguments (or the command itself, a line of bare arguments)
    hold Megatron-LM's parallel arguments. A word in a comment, a string or another command never counts."""
    launch = launch_parts(command)
    if MEGATRON_ENTRY.search(launch.program):
        return True
    return any(word.partition("=")[0] in KNOWN_ARGS for word in launch.arguments)


def find_megatron_command(commands: list[Command]) -> Command:
    """The command that runs Megatron-LM: the last one ``is_megatron_command`` recognises, else the last launcher
    (torchrun, ``python -m torch.distributed.run|launch``) when the caller says the text is Megatron-LM's."""
    found = [c for c in commands if is_megatron_command(c)]
    if found:
        return found[-1]
    launchers = [c for c in commands if launch_parts(c).launcher not in ("", "python", "deepspeed")]
    if launchers:
        return launchers[-1]
    raise ConventionError(
        "no Megatron-LM command found (no pretrain_*.py, no torchrun line, no --...-parallel-size argument)"
    )
