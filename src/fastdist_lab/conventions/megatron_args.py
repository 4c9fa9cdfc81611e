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
from collections.abc import Sequence
from typing import Any

from ..errors import ConventionError
from .launch import Command

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


def parse_megatron_args(words: Sequence[str], line: int = 1) -> dict[str, Any]:
    """The parallel settings among Megatron-LM arguments ``words`` (later occurrences win, as with argparse)."""
    values: dict[str, Any] = {}
    index = 0
    words = list(words)
    while index < len(words):
        word = words[index]
        index += 1
        if not word.startswith("--"):
            continue
        flag, eq, inline = word.partition("=")
        if flag in FLAG_ARGS:
            if eq:
                raise ConventionError(f"line {line}: {flag} takes no value (got {word!r})")
            values[FLAG_ARGS[flag]] = True
        elif flag in INT_ARGS:
            if eq:
                text = inline
            elif index < len(words) and not words[index].startswith("--"):
                text, index = words[index], index + 1
            else:
                raise ConventionError(f"line {line}: argument {flag}: expected one argument")
            try:
                values[INT_ARGS[flag]] = int(text)
            except ValueError:
                raise ConventionError(f"line {line}: argument {flag}: invalid int value: {text!r}") from None
        elif flag in LIST_ARGS:
            items = [inline] if eq else []
            while not eq and index < len(words) and not words[index].startswith("-"):
                items.append(words[index])
                index += 1
            try:
                values[LIST_ARGS[flag]] = [int(item) for item in items]
            except ValueError:
                raise ConventionError(f"line {line}: argument {flag}: invalid int value in {items}") from None
            if not items:
                raise ConventionError(f"line {line}: argument {flag}: expected at least one argument")
        elif flag not in OTHER_PARALLEL_ARGS:
            close = difflib.get_close_matches(flag.replace("_", "-"), list(KNOWN_ARGS), n=1, cutoff=0.85)
            if close:
                raise ConventionError(
                    f"line {line}: {flag} is not a Megatron-LM argument (Megatron's parser refuses it); "
                    f"did you mean {close[0]}?"
                )
    return values


def state_arguments(values: dict[str, Any], line: int = 1) -> tuple[dict[str, Any], list[str]]:
    """``initialize_model_parallel`` keyword arguments from parsed values, as ``validate_args`` derives them,
    and notes on what a group listing leaves out."""
    notes: list[str] = []
    if values.get("model_parallel_size") is not None:
        raise ConventionError(
            f"line {line}: --model-parallel-size is no longer valid, use --tensor-model-parallel-size instead "
            "(Megatron-LM refuses it)"
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
    for shards, size, flag in (
        ("tensor_parallel_num_weight_shards", tp, "--tensor-parallel-num-weight-shards"),
        (
            "expert_tensor_parallel_num_weight_shards",
            values.get("expert_tensor_parallel_size") or tp,
            "--expert-tensor-parallel-num-weight-shards",
        ),
    ):
        if values.get(shards) is not None and values[shards] != size:
            raise ConventionError(
                f"line {line}: {flag} {values[shards]} asks for generalized tensor parallelism (a weight-remat axis "
                f"of size {values[shards]}/{size}); no convention here models that axis"
            )
    kwargs["order"] = "tp-cp-ep-pp-dp" if values.get("use_tp_pp_dp_mapping") else "tp-cp-ep-dp-pp"
    kwargs["sequence_parallel"] = bool(values.get("sequence_parallel"))
    vpp = values.get("num_virtual_stages_per_pipeline_rank")
    per_stage = values.get("num_layers_per_virtual_pipeline_stage")
    if vpp is not None and per_stage is not None:
        raise ConventionError(
            f"line {line}: No more than one of the following arguments can be set at the same time: "
            "--num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank (Megatron-LM refuses it)"
        )
    if per_stage is not None:
        pp, layers = values.get("pipeline_model_parallel_size", 1), values.get("num_layers")
        if layers is None:
            notes.append("--num-layers-per-virtual-pipeline-stage without --num-layers: virtual pipeline size unknown")
        elif layers % pp or (layers // pp) % per_stage:
            raise ConventionError(
                f"line {line}: --num-layers {layers} / --pipeline-model-parallel-size {pp} is not a multiple of "
                f"--num-layers-per-virtual-pipeline-stage {per_stage} (Megatron-LM refuses it)"
            )
        else:
            vpp = layers // pp // per_stage
    if vpp is not None and vpp != 1:
        kwargs["virtual_pipeline_model_parallel_size"] = vpp
    if values.get("hybrid_context_parallel"):
        notes.append("--hybrid-context-parallel: its extra data-and-context groups are not listed")
    return kwargs, notes


def find_megatron_command(commands: list[Command]) -> Command:
    """The command that runs Megatron-LM: the last one with a parallel argument, else the last launcher."""
    with_args = [c for c in commands if any(w.partition("=")[0] in KNOWN_ARGS for w in c.words)]
    if with_args:
        return with_args[-1]
    launchers = [c for c in commands if any("torchrun" in w or "torch.distributed" in w for w in c.words[:3])]
    if launchers:
        return launchers[-1]
    raise ConventionError("no Megatron-LM command found (no torchrun line and no --...-parallel-size argument)")
