"""What Megatron-Core's ``initialize_model_parallel`` builds for one configuration, and what it refuses.

Facts implemented (read from ``megatron/core/parallel_state.py`` on Megatron-LM's main branch of August 2026,
rewritten here, checked against it by ``tests/conventions/crosscheck_megatron_state.py``):

* data parallel = world / (tp * pp * cp); a decoder ``RankGenerator(tp, ep=1, dp, pp, cp, order)`` and an expert one
  ``RankGenerator(etp, ep, edp, pp, cp=1, order)`` with etp = ``expert_tensor_parallel_size`` (default tp) and
  edp = world / (etp * ep * pp);
* refusals, in Megatron's order and with its words: world not divisible by tp*pp*cp; a virtual pipeline with
  pp == 1; a parallel size > 1 whose token the order omits; world not divisible by etp*ep*pp; an order not ending
  in ``pp`` with pp > 1 and edp != dp ("When not using pp-last rank ordering, ..."); decoder and expert pipeline
  groups that differ; dp*cp or edp not divisible by ``num_distributed_optimizer_instances``; hierarchical
  context-parallel sizes whose product is not cp;
* groups, by Megatron's names: the decoder ones (``MEGATRON_GROUPS``), ``EMBEDDING_GROUP`` (first and last stage of
  each pipeline group, the first alone when pp == 1), ``POSITION_EMBEDDING_GROUP`` (first stage),
  ``INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP`` (each dp-cp group cut into ``num_distributed_optimizer_instances``
  consecutive pieces), the expert groups, the partial expert-data groups and
  ``INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP`` (consecutive expert tp-ep-pp groups, ``edp / instances`` at a
  time). Members are listed in process-group rank order (torch's ``new_group`` sorts them).

Not modelled: the generalized-tensor-parallel weight-remat axes (``gtp_remat``; their size is 1 unless
``--tensor-parallel-num-weight-shards`` asks otherwise) and the hybrid context-parallel groups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConventionError, ConventionWorldSizeNeeded
from ..layout import Layout
from ..lazy import warn_deprecated
from .equivalence import equivalent, first_group_mismatch
from .launch import Command, shell_commands, split_launch
from .megatron import DEFAULT_ORDER, Megatron, check_size, embedding_groups, position_embedding_groups
from .megatron_args import INT_ARGS, find_megatron_command, parse_megatron_args, state_arguments

EXPERT_GROUPS: dict[str, str] = {
    "EXPERT_MODEL_PARALLEL_GROUP": "ep",
    "EXPERT_TENSOR_PARALLEL_GROUP": "tp",
    "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP": "tp-ep",
    "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP": "tp-ep-pp",
    "EXPERT_DATA_PARALLEL_GROUP": "dp",
}
"""The expert groups ``initialize_model_parallel`` builds from the expert generator, with their token."""


def _refuse(reason: str) -> ConventionError:
    return ConventionError(f"Megatron-Core's initialize_model_parallel refuses this: {reason}")


class MegatronParallelState(Megatron):
    """``initialize_model_parallel(...)`` for a world of ``world_size`` ranks: the decoder generator (this object is
    it: ``get_ranks``, ``groups``, ``equivalent`` work as on ``Megatron``), the expert generator (``expert``) and every
    group Megatron builds (``named_groups()``). Arguments keep Megatron's names; refusals raise ``ConventionError``
    with Megatron's reason."""

    source_notes: tuple[str, ...] = ()
    """Where the world size came from and what the listing leaves out (set by ``from_args``)."""
    program: str = ""
    """The program a launch line runs (set by ``from_args``)."""

    def __init__(
        self,
        world_size: int,
        tensor_model_parallel_size: int = 1,
        pipeline_model_parallel_size: int = 1,
        context_parallel_size: int = 1,
        expert_model_parallel_size: int = 1,
        expert_tensor_parallel_size: int | None = None,
        num_distributed_optimizer_instances: int = 1,
        virtual_pipeline_model_parallel_size: int | None = None,
        hierarchical_context_parallel_sizes: Sequence[int] | None = None,
        order: str = DEFAULT_ORDER,
        *,
        sequence_parallel: bool = False,
        local_world_size: int | None = None,
    ):
        world = check_size("world_size", world_size)
        tp = check_size("tensor_model_parallel_size", tensor_model_parallel_size)
        pp = check_size("pipeline_model_parallel_size", pipeline_model_parallel_size)
        cp = check_size("context_parallel_size", context_parallel_size)
        ep = check_size("expert_model_parallel_size", expert_model_parallel_size)
        etp = tp
        if expert_tensor_parallel_size is not None:
            etp = check_size("expert_tensor_parallel_size", expert_tensor_parallel_size)
        instances = check_size("num_distributed_optimizer_instances", num_distributed_optimizer_instances)
        if not isinstance(order, str):
            raise ConventionError(f"order={order!r} must be a string such as 'tp-cp-ep-dp-pp'")
        if world % (tp * pp * cp):
            raise _refuse(
                f"world_size ({world}) is not divisible by {tp * pp * cp} (tensor {tp} x pipeline {pp} x context {cp})"
            )
        dp = world // (tp * pp * cp)
        if virtual_pipeline_model_parallel_size is not None:
            check_size("virtual_pipeline_model_parallel_size", virtual_pipeline_model_parallel_size)
            if not pp > 1:
                raise _refuse("pipeline-model-parallel size should be greater than 1 with interleaved schedule")
        super().__init__(tp=tp, pp=pp, dp=dp, cp=cp, ep=1, order=order)
        if world % (etp * ep * pp):
            raise _refuse(
                f"world_size ({world}) is not divisible by expert_tensor_model_pipeline_parallel size ({etp * ep * pp})"
            )
        edp = world // (etp * ep * pp)
        expert = Megatron(tp=etp, pp=pp, dp=edp, cp=1, ep=ep, order=order)
        expert.name = f"Megatron expert {expert.order}"
        if not (order.endswith("pp") or pp == 1 or edp == dp):
            raise _refuse(
                "When not using pp-last rank ordering, the data parallel size of the attention and moe layers must be "
                f"the same (order {order!r}: data parallel {dp}, expert data parallel {edp})"
            )
        if not np.array_equal(self.groups("pp"), expert.groups("pp")):
            raise _refuse(
                "Pipeline parallel groups are expected to be the same for Non-Expert and Expert part, but got "
                f"{_first_rows(self.groups('pp'))} and {_first_rows(expert.groups('pp'))}"
            )
        if (dp * cp) % instances:
            raise _refuse(
                f"Data parallel size should be divisible by partial DistOpt shard factor (data parallel {dp} x "
                f"context {cp} = {dp * cp}, num_distributed_optimizer_instances={instances})"
            )
        hierarchical = None
        if hierarchical_context_parallel_sizes:
            hierarchical = tuple(
                check_size("hierarchical context-parallel size", s) for s in hierarchical_context_parallel_sizes
            )
            if math.prod(hierarchical) != cp:
                raise _refuse(
                    f"hierarchical_context_parallel_sizes {list(hierarchical)} multiply to {math.prod(hierarchical)}, "
                    f"not context_parallel_size={cp}"
                )
        if edp % instances:
            raise _refuse(
                f"Expert data parallel size should be divisible by partial DistOpt shard factor (expert data parallel "
                f"{edp}, num_distributed_optimizer_instances={instances})"
            )
        if local_world_size is not None and world % check_size("local_world_size", local_world_size):
            raise ConventionError(f"local_world_size={local_world_size} must divide world_size={world}")
        self.name = f"Megatron {self.order}"
        self.expert = expert
        self.requested_order = order
        self.expert_tp, self.expert_dp = etp, edp
        self.num_distributed_optimizer_instances = instances
        self.virtual_pipeline_model_parallel_size = virtual_pipeline_model_parallel_size
        self.hierarchical_context_parallel_sizes = hierarchical
        self.sequence_parallel = bool(sequence_parallel) and tp > 1
        self.local_world_size = world if local_world_size is None else int(local_world_size)
        self.expert_ep = ep

    @classmethod
    def from_args(
        cls, args: str | Sequence[str], world_size: int | None = None, local_world_size: int | None = None
    ) -> MegatronParallelState:
        """What a Megatron-LM command line describes: its arguments (``"--tensor-model-parallel-size 4
        --pipeline-model-parallel-size 2 ..."``), or a whole launch line or script (``torchrun --nnodes 2
        --nproc-per-node 8 ... pretrain_gpt.py ...``; see ``megatron_args``).

        The world comes from ``world_size`` / ``local_world_size`` when given, else from the launcher (torchrun's
        ``--nnodes`` x ``--nproc-per-node``, ...) or ``WORLD_SIZE=``. Refusals are Megatron's, with its reasons.
        """
        if isinstance(args, str):
            command = find_megatron_command(shell_commands(args))
        elif isinstance(args, Sequence) and all(isinstance(a, str) for a in args):
            command = Command(list(args), {}, 1)
        else:
            raise ConventionError(f"args={args!r} must be a command line (a string) or a list of arguments")
        launch = split_launch(command)
        values, where = parse_megatron_args(launch.arguments, launch.argument_lines or command.line)
        kwargs, notes = state_arguments(values, command.line, where)
        notes = launch.notes + notes
        for name, given, found in (
            ("world_size", world_size, launch.world_size),
            ("local_world_size", local_world_size, launch.local_world_size),
        ):
            if given is not None and found is not None and given != found:
                notes.append(f"{name}={given} from the argument (the command line says {found})")
        world = world_size if world_size is not None else launch.world_size
        if world is None:
            raise ConventionWorldSizeNeeded(
                "the command line does not give the world size (no torchrun --nnodes / --nproc-per-node, no "
                "WORLD_SIZE=); pass the world size (world_size=..., --world-size)"
            )
        local = local_world_size if local_world_size is not None else launch.local_world_size
        try:
            state = cls(world, local_world_size=local if local is not None else world, **kwargs)
        except ConventionError as error:  # name the size flags of the refused combination, with their lines
            sizes = {attribute: flag for flag, attribute in INT_ARGS.items() if attribute.endswith("parallel_size")}
            written = ", ".join(
                f"{sizes[name]} {values[name]} (line {line})" for name, line in where.items() if name in sizes
            )
            raise ConventionError(f"{error}; set by {written}" if written else str(error)) from None
        state.source_notes = tuple(notes)
        state.program = launch.program
        return state

    # ------------------------------------------------------------------ groups
    def named_groups(self) -> dict[str, np.ndarray]:
        """Every group ``initialize_model_parallel`` builds, by Megatron's name: one row per group, members in
        process-group rank order. The inter-partial expert-data and hierarchical context-parallel groups appear only
        when their option is set (the intra-partial ones then equal the whole data groups, as in Megatron)."""
        out = super().named_groups()
        n = self.num_distributed_optimizer_instances
        out["INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP"] = _pieces(self.groups("dp-cp"), n)
        if self.hierarchical_context_parallel_sizes:
            for level, rows in enumerate(_hierarchical(self.groups("cp"), self.hierarchical_context_parallel_sizes)):
                out[f"HIERARCHICAL_CONTEXT_PARALLEL_GROUP_L{level}"] = rows
        for name, token in EXPERT_GROUPS.items():
            out[name] = self.expert.groups(token)
        intra, inter = _hierarchical(self.expert.groups("dp"), (self.expert_dp // n, n))
        out["INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP"] = intra
        if n > 1:
            out["INTER_PARTIAL_EXPERT_DATA_PARALLEL_GROUP"] = inter
        out["INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP"] = self.distributed_optimizer_instance_groups()
        return out

    def distributed_optimizer_instance_groups(self) -> np.ndarray:
        """``INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP``: consecutive expert tp-ep-pp groups, ``expert dp /
        instances`` of them per group, members sorted (one row per instance)."""
        groups = self.expert.groups("tp-ep-pp")
        per_instance = self.expert_dp // self.num_distributed_optimizer_instances
        rows = groups.reshape(-1, per_instance * groups.shape[1])
        return np.sort(rows, axis=1)

    # ------------------------------------------------------------------ this project's layout
    def layout_equivalent(self) -> tuple[Any, str]:
        """``(layout, why)``: the ``Layout`` whose nine dims give this configuration's decoder groups (cp =
        sequence-data, dp = batch-data), or ``(None, reason)`` when no Layout does. ``why`` also says what a
        Layout leaves out (experts, a virtual pipeline, optimizer instances)."""
        big = [t for t in self.order.split("-") if self.size(t) > 1]
        orders = {False: ("tp", "cp", "dp", "pp"), True: ("tp", "pp", "cp", "dp")}
        first = next((pf for pf, axes in orders.items() if big == [a for a in axes if a in big]), None)
        if first is None:
            sizes = ", ".join(f"{t}={self.size(t)}" for t in big)
            return None, (
                f"no Layout numbers ranks like order {self.order} with {sizes}: "
                "a Layout has tensor fastest, then context "
                "(sequence-data), data, pipeline (data-first) or pipeline, context, data (pipeline-first)"
            )
        try:
            layout = Layout(
                world_size=self.world_size,
                local_world_size=self.local_world_size,
                tensor_parallel=self.tp,
                pipeline_parallel=self.pp,
                sequence_data_parallel=self.cp,
                pipeline_first=first,
                sequence_tensor_parallel=self.sequence_parallel,
                expert_parallel=self.expert_ep,
                expert_tensor_parallel=self.expert_tp,
            )
        except ValueError as error:
            return None, f"no Layout: {error}"
        if not (result := equivalent(layout, self)):
            return None, f"no Layout: {result.reason}"
        notes = ["the decoder groups are this Layout's (cp = sequence-data, dp = batch-data)"]
        mismatch = expert_mismatch(layout, self)
        if mismatch:
            return None, f"no Layout: {mismatch}"
        if layout.has_experts:
            notes.append(
                f"so are the expert groups (expert parallel {self.expert_ep}, expert tensor parallel "
                f"{self.expert_tp}, expert data parallel {self.expert_dp})"
            )
        if self.num_distributed_optimizer_instances > 1:
            notes.append(f"{self.num_distributed_optimizer_instances} distributed-optimizer instances: not in a Layout")
        if self.virtual_pipeline_model_parallel_size:
            notes.append("the virtual pipeline changes no group")
        return layout, "; ".join(notes)

    def describe_configuration(self) -> str:
        """One line: the sizes, as Megatron names them."""
        text = (
            f"world {self.world_size}: tensor {self.tp}, pipeline {self.pp}, context {self.cp}, data {self.dp}; "
            f"expert parallel {self.expert_ep}, expert tensor {self.expert_tp}, expert data {self.expert_dp}; "
            f"order {self.order}"
        )
        if self.virtual_pipeline_model_parallel_size:
            text += f"; virtual pipeline {self.virtual_pipeline_model_parallel_size}"
        if self.num_distributed_optimizer_instances > 1:
            text += f"; {self.num_distributed_optimizer_instances} distributed-optimizer instances"
        return text + ("; sequence parallel" if self.sequence_parallel else "")

    def __repr__(self) -> str:
        return f"MegatronParallelState({self.describe_configuration()})"


# ------------------------------------------------------------------ old spellings on Megatron, for one release
# They build a MegatronParallelState, so they are attached here: megatron.py importing this module would close an
# import cycle (this module subclasses Megatron).
def _megatron_from_args(
    cls: type, args: str | Sequence[str], world_size: int | None = None, local_world_size: int | None = None
) -> MegatronParallelState:
    """Deprecated ``Megatron.from_args`` (one release): ``MegatronParallelState.from_args``, same arguments."""
    warn_deprecated(
        "fastdist_lab.conventions.Megatron.from_args", "fastdist_lab.conventions.MegatronParallelState.from_args"
    )
    return MegatronParallelState.from_args(args, world_size=world_size, local_world_size=local_world_size)


def _megatron_expert(
    cls: type,
    world_size: int,
    tp: int = 1,
    pp: int = 1,
    ep: int = 1,
    expert_tp: int | None = None,
    order: str = DEFAULT_ORDER,
    cp: int = 1,
) -> Megatron:
    """Deprecated ``Megatron.expert(world_size, tp, pp, ep, expert_tp, order, cp)`` (one release): the expert generator
    of ``MegatronParallelState(world_size, tensor_model_parallel_size=tp, ...)``, refusals included."""
    warn_deprecated(
        "fastdist_lab.conventions.Megatron.expert",
        "fastdist_lab.conventions.MegatronParallelState(world_size, tensor_model_parallel_size=tp, "
        "pipeline_model_parallel_size=pp, context_parallel_size=cp, expert_model_parallel_size=ep, "
        "expert_tensor_parallel_size=expert_tp, order=order).expert",
    )
    state = MegatronParallelState(
        world_size,
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        context_parallel_size=cp,
        expert_model_parallel_size=ep,
        expert_tensor_parallel_size=expert_tp,
        order=order,
    )
    return state.expert


Megatron.from_args = classmethod(_megatron_from_args)  # type: ignore[attr-defined]
Megatron.expert = classmethod(_megatron_expert)  # type: ignore[attr-defined]


LAYOUT_EXPERT_DIMS: dict[str, str] = {
    "EXPERT_MODEL_PARALLEL_GROUP": "expert",
    "EXPERT_TENSOR_PARALLEL_GROUP": "expert_tensor",
    "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP": "expert_tensor_and_expert",
    "EXPERT_DATA_PARALLEL_GROUP": "expert_data",
}
"""Megatron-Core's expert groups and the Layout's expert dim that holds the same groups."""


def expert_mismatch(layout: Any, state: MegatronParallelState) -> str:
    """The first of Megatron's expert groups (``LAYOUT_EXPERT_DIMS``) that the Layout's expert dim does not hold
    (members in group-rank order; the groups in any order), as a sentence; ``""`` when every one matches."""
    theirs = ((dim, (name, state.expert.groups(EXPERT_GROUPS[name]))) for name, dim in LAYOUT_EXPERT_DIMS.items())
    found = first_group_mismatch(layout, theirs)
    if found is None:
        return ""
    dim, name, groups, ours = found
    return f"{name} is {_first_rows(groups)} but the Layout's {dim} groups are {_first_rows(ours)}"


def _first_rows(groups: np.ndarray, n: int = 4) -> str:
    rows = groups[:n].tolist()
    return str(rows) + (" ..." if len(groups) > n else "")


def _pieces(groups: np.ndarray, n: int) -> np.ndarray:
    """Each row cut into ``n`` consecutive pieces (Megatron's intra-partial data-parallel groups)."""
    return groups.reshape(groups.shape[0] * n, groups.shape[1] // n)


def _hierarchical(groups: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    """Megatron's ``create_hierarchical_groups`` for every row: level L groups are
    ``rearrange(ranks, "(l s u) -> (l u) s")`` with s = sizes[L], u = product of the earlier sizes."""
    out = []
    for level, size in enumerate(sizes):
        u = math.prod(sizes[:level])
        rows = [np.asarray(row).reshape(-1, size, u).transpose(0, 2, 1).reshape(-1, size) for row in groups]
        out.append(np.concatenate(rows) if rows else np.empty((0, size), dtype=np.int64))
    return out


def named_group_table(state: MegatronParallelState) -> list[dict[str, Any]]:
    """One record per Megatron group name: name, group size, number of groups and the first group."""
    return [
        {"group": name, "size": int(rows.shape[1]), "count": int(rows.shape[0]), "first": rows[0].tolist()}
        for name, rows in state.named_groups().items()
    ]


__all__ = [
    "EXPERT_GROUPS",
    "MegatronParallelState",
    "embedding_groups",
    "named_group_table",
    "position_embedding_groups",
]
