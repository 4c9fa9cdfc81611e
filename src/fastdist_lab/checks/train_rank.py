"""What every rank runs for ``check_training``: its stages of a ``TinyGPT`` with its tensor shards, one training
step under torch's pipeline schedule (``cost.SCHEDULE_KINDS``), the gradients reduced over its data group, one SGD
step, and what it holds afterwards. The ZeRO stages (Rajbhandari et al. 2020, Figure 1; ``Training.zero_stage``):

- 0: the gradients all-reduced, every rank updating every weight;
- 1: reduce-scatter, each rank updating its slice of the flattened weights, all-gather of the updated slices
  (Fast-LLM's default);
- 2: the same step as 1, numerically and in its collectives: stage 2 only frees the gradients outside a rank's
  slice sooner, which one step of this size does not show;
- 3: as 2, and the weights too are sharded: each rank keeps only its slice of each stage's flattened weights and
  all-gathers them before the stage runs (the all-gather after the update is the next step's).

``Training.recompute`` runs blocks (``"full"``) or the attention core (``"selective"``) under
``torch.utils.checkpoint``; ``Training.sequence_tensor_parallel`` is the layout's (``check_training`` sets it).

Every group is the one the rank's ``Distributed`` holds from the cluster's pool (a fault may ask the pool for a group
of other members, through the pool's own ``get_process_group``). ``TrainingFault`` breaks one thing on purpose so
that tests can show the check names it; it is part of the API, not a patch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ..config import DistributedConfig, PhaseType
from ..experts import EXPERT_GROUP_DIMS
from ..seeds import generator_seeds
from ..setup import Training
from .moe_layer import is_expert, is_tensor_partial
from .parallel_ops import all_gather, all_reduce, reduce_scatter
from .pipeline_carrier import build_stages, make_schedule, pipeline_carrier, registered
from .tiny_gpt import Parallel, Recorder, StageModule, TinyGPT, split_dim, token_losses

TRAINING_DIMS = ("tensor", "sequence_data", "data", "pipeline")
"""The dims whose groups a training step uses."""
"""The expert dims whose groups a training step with experts uses."""


@dataclass(frozen=True)
class TrainingFault:
    """One thing broken on purpose (every field ``None``: nothing broken).

    - ``wrong_shard``: this global rank loads the next tensor rank's shard of every split parameter;
    - ``skip_layer``: the pipeline stage holding this layer leaves it out of the forward pass;
    - ``unreduced``: this global rank takes part in the data group's reduction but keeps its own gradients;
    - ``tp_seed_shift``: ``(rank, shift)``, that rank's tensor generator seeded with another ``tp_seed_shift``;
    - ``swapped``: ``(dim, rank)`` (an expert dim too), the members of that rank's group of ``dim`` use the group
      with its first two members swapped (a group the pool creates for that member list);
    - ``ungathered``: under ZeRO-3 this global rank takes part in the all-gather of the weights but keeps only its
      own slice (the rest of its weights zero);
    - ``misrouted``: in every MoE layer this global rank sends its tokens one expert rank further on than the
      rank holding their expert (``checks.moe_layer``).
    """

    wrong_shard: int | None = None
    skip_layer: int | None = None
    unreduced: int | None = None
    tp_seed_shift: tuple[int, int] | None = None
    swapped: tuple[str, int] | None = None
    ungathered: int | None = None
    misrouted: int | None = None


@dataclass
class TrainingPlan:
    """Everything a rank needs for the step: the model, the whole model's initial ``weights``, the global batch
    ``tokens`` (``[sequences, sequence_length + 1]``), the ``training`` set-up (schedule, micro-batches, ZeRO stage,
    recompute), dropout, the learning rate and the fault."""

    model: TinyGPT
    weights: dict[str, torch.Tensor]
    tokens: torch.Tensor
    training: Training = field(default_factory=Training)
    dropout: float = 0.0
    learning_rate: float = 0.1
    fault: TrainingFault = field(default_factory=TrainingFault)

    def num_stages(self, pipeline: int) -> int:
        """Pipeline stages of this plan on ``pipeline`` ranks."""
        return self.training.schedule_spec.stages(pipeline, self.training.virtual_pipeline_stages)


def stage_layers(layers: int, stage: int, stages: int) -> range:
    """The layers of ``stage`` out of ``stages``: as even a split as ``layers`` allows, earlier stages smaller."""
    return range(layers * stage // stages, layers * (stage + 1) // stages)


def _group(ctx: Any, dim: str, fault: TrainingFault) -> tuple[Any, tuple[int, ...], int]:
    """This rank's group of ``dim``: the group object, its members as the pool created it, this rank's place."""
    if ctx.distributed is None:
        raise RuntimeError(f"rank {ctx.rank} has no layout applied; apply one to the cluster first")
    group = ctx.distributed.group(dim)
    if dim in ctx.config.distributed_dims:
        members = tuple(int(r) for r in ctx.config.distributed_dims[dim].global_ranks)
    else:  # an expert dim: Fast-LLM's config has none, the pool's record has its members
        record = None if group is None else ctx.pool.record_of(group)
        members = (ctx.rank,) if record is None else tuple(record.members)
    if fault.swapped is not None and fault.swapped[0] == dim and fault.swapped[1] in members and len(members) > 1:
        members = (members[1], members[0], *members[2:])
        group = ctx.pool.get_process_group(members, members.index(ctx.rank))
    if group is None:
        return None, (ctx.rank,), 0
    record = ctx.pool.record_of(group)  # what the pool created this very object for
    members = record.members if record is not None else members
    return group, members, members.index(ctx.rank)


def expert_groups(ctx: Any, fault: TrainingFault) -> dict[str, tuple[Any, tuple[int, ...], int]]:
    """This rank's ``expert``, ``expert_tensor`` and ``expert_data`` groups from its ``Distributed`` (the pool's,
    ``runtime.expert_groups``) as ``_group`` gives them; on a dense layout no expert group, the tensor and data
    groups."""
    if ctx.distributed is not None and "expert" not in ctx.distributed.expert_groups:
        return {"expert": (None, (ctx.rank,), 0), "expert_tensor": _group(ctx, "tensor", fault),
                "expert_data": _group(ctx, "data", fault)}  # fmt: skip
    return {dim: _group(ctx, dim, fault) for dim in EXPERT_GROUP_DIMS}


def rank_groups(ctx: Any, fault: TrainingFault) -> dict[str, tuple[int, ...]]:
    """Before any step: the member list of each group this rank is about to use, as its pool created the group (a
    rank function; no communication)."""
    used = {dim: _group(ctx, dim, fault)[1] for dim in TRAINING_DIMS}
    if "expert" in ctx.distributed.expert_groups:  # a layout with experts: its expert groups too
        used.update({dim: members for dim, (_, members, _) in expert_groups(ctx, fault).items()})
    return used


def _metas(plan: TrainingPlan, stage: int, stages: int, par: Parallel, device: torch.device) -> dict[str, Any]:
    """The static shapes torch's ``PipelineStage`` takes: one micro-batch in and out of ``stage``."""
    model, batch = plan.model, plan.training.micro_batch_size
    length = model.sequence_length // par.sequence_data_size
    hidden_length = length // par.tensor_size if par.sequence_tensor_parallel else length

    def hidden(grad: bool) -> torch.Tensor:
        return torch.zeros(batch, hidden_length, model.hidden_size, device=device, requires_grad=grad)

    if stage == stages - 1:
        logits = torch.zeros(batch, length, model.vocab_size // par.tensor_size, device=device, requires_grad=True)
        output, output_grad = logits, torch.zeros_like(logits).detach()
    else:
        output, output_grad = hidden(True), hidden(False)
    if stage == 0:
        inputs = torch.zeros(batch, length, dtype=torch.long, device=device)
        return {"input_args": inputs, "output_args": output, "output_grads": output_grad}
    return dict(input_args=hidden(True), output_args=output, input_grads=hidden(False), output_grads=output_grad)


def _generators(ctx: Any, fault: TrainingFault) -> dict[str, torch.Generator]:
    """The rank's ``pp`` and ``tp`` generators, reseeded for step 0 of training (``Distributed.set_step``)."""
    distributed = ctx.distributed
    distributed.set_step(0, PhaseType.training)
    if fault.tp_seed_shift is not None and fault.tp_seed_shift[0] == ctx.rank:
        wrong = DistributedConfig(**{**ctx.config.fields(), "tp_seed_shift": fault.tp_seed_shift[1]})
        distributed.tp_generator.manual_seed(generator_seeds(wrong, 0, PhaseType.training)["tp"])
    return {"pp": distributed.pp_generator, "tp": distributed.tp_generator}


def _flat(tensors: list[torch.Tensor], parts: int) -> torch.Tensor:
    """The tensors flattened one after another, padded with zeros to a multiple of ``parts`` elements."""
    flat = torch.cat([tensor.detach().reshape(-1) for tensor in tensors])
    return torch.nn.functional.pad(flat, (0, -flat.numel() % parts))


def _unflatten(flat: torch.Tensor, targets: list[torch.Tensor]) -> None:
    """Copy consecutive slices of ``flat`` into ``targets`` (each its own shape)."""
    offset = 0
    with torch.no_grad():
        for target in targets:
            target.copy_(flat[offset : offset + target.numel()].view_as(target))
            offset += target.numel()


def _reduce(params: list[torch.nn.Parameter], group: Any, group_rank: int, plan: TrainingPlan, keep_own: bool) -> list:
    """Sum the gradients over the data group and take one SGD step: all-reduce then every rank updates every
    weight (``zero_stage=0``), or reduce-scatter, each rank updating its slice of the flattened weights, then
    all-gather of the updated slices (ZeRO 1-3). ``keep_own``: this rank's own gradient stands in for the sum.
    Returns, per parameter, the part of its flattened shard whose reduced gradient this rank holds
    (``(first, last, gradient)``, or ``None``)."""
    size = 1 if group is None else group.size()
    own = _flat([param.grad for param in params], size)
    reduced = own.clone()
    if plan.training.zero_stage == 0:
        first = 0
        all_reduce(reduced, group)
        reduced = own if keep_own else reduced
        _unflatten(reduced, [param.grad for param in params])
        torch.optim.SGD(params, lr=plan.learning_rate).step()
    else:
        chunk = own.numel() // size
        first = group_rank * chunk
        piece = reduce_scatter(own, group, 0)
        reduced = own[first : first + chunk] if keep_own or group is None else piece
        shard = torch.nn.Parameter(_flat(params, size)[first : first + chunk].clone())
        shard.grad = reduced.clone()
        torch.optim.SGD([shard], lr=plan.learning_rate).step()
        _unflatten(all_gather(shard.detach(), group, 0), params)
    pieces, offset, last = [], 0, first + reduced.numel()
    for param in params:
        begin, end = max(offset, first), min(offset + param.numel(), last)
        held = (begin - offset, end - offset, reduced[begin - first : end - first].clone()) if begin < end else None
        pieces.append(held)
        offset += param.numel()
    return pieces


def _sharded_weights(modules: dict[int, torch.nn.Module], group: Any, group_rank: int, keep_own: bool) -> None:
    """ZeRO-3: each stage's weights, flattened, kept only as this rank's slice (the rest zeroed), then all-gathered
    over the data group before the stage runs (``keep_own``: the fault that keeps only the slice)."""
    size = 1 if group is None else group.size()
    for module in modules.values():
        params = list(module.parameters())
        flat = _flat(params, size)
        chunk = flat.numel() // size
        mine = flat[group_rank * chunk : (group_rank + 1) * chunk].clone()
        with torch.no_grad():
            for param in params:
                param.zero_()
        gathered = all_gather(mine, group, 0)
        if keep_own:
            gathered = torch.cat([mine if part == group_rank else torch.zeros_like(mine) for part in range(size)])
        _unflatten(gathered, params)


def _place(param: torch.Tensor, par: Parallel) -> tuple[int, int]:
    """Which shard of how many ``param`` is: of the tensor group, of ``expert_tensor`` for an expert's weight."""
    if split_dim(param) is None:
        return 0, 1
    return (par.expert_tensor_rank, par.expert_tensor_size) if is_expert(param) else (par.tensor_rank, par.tensor_size)


def train_rank(ctx: Any, plan: TrainingPlan) -> dict[str, Any]:
    """One training step on this rank (a rank function for ``cluster.run``); returns its shards (initial, reduced
    gradient, updated), its loss when it holds the last stage, the groups it used and its dropout records."""
    begin = time.perf_counter()
    config, fault, model = ctx.config, plan.fault, plan.model
    used = {dim: _group(ctx, dim, fault) for dim in TRAINING_DIMS}
    used.update(expert_groups(ctx, fault))
    recorder = Recorder()
    par = Parallel(
        tensor=used["tensor"][0],
        tensor_rank=used["tensor"][2],
        tensor_size=len(used["tensor"][1]),
        sequence_data=used["sequence_data"][0],
        sequence_data_rank=used["sequence_data"][2],
        sequence_data_size=len(used["sequence_data"][1]),
        sequence_tensor_parallel=bool(config.sequence_tensor_parallel),
        dropout=plan.dropout,
        generators=_generators(ctx, fault),
        recorder=recorder,
        expert=used["expert"][0],
        expert_rank=used["expert"][2],
        expert_size=len(used["expert"][1]),
        expert_members=used["expert"][1],
        expert_tensor=used["expert_tensor"][0],
        expert_tensor_rank=used["expert_tensor"][2],
        expert_tensor_size=len(used["expert_tensor"][1]),
        misroute=fault.misrouted == ctx.rank,
        recompute=plan.training.recompute,
    )
    pipe_group, pipe_members, pipe_rank = used["pipeline"]
    stages = plan.num_stages(len(pipe_members))
    mine = [stage for stage in range(stages) if stage % len(pipe_members) == pipe_rank]
    shard_rank = (par.tensor_rank + 1) % par.tensor_size if fault.wrong_shard == ctx.rank else par.tensor_rank
    skip = frozenset() if fault.skip_layer is None else frozenset({fault.skip_layer})
    modules = {}
    for stage in mine:
        layers = stage_layers(model.layers, stage, stages)
        module = StageModule(model, layers, stage == 0, stage == stages - 1, par, skip).to(ctx.device)
        weights = {name: value.to(ctx.device) for name, value in plan.weights.items()}
        module.load(weights, shard_rank, par.tensor_size, (par.expert_tensor_rank, par.expert_tensor_size))
        modules[stage] = module
    data_group, _, data_rank = used["data"]
    if plan.training.zero_stage == 3:
        _sharded_weights(modules, data_group, data_rank, keep_own=fault.ungathered == ctx.rank)
    named = sorted((name, param) for module in modules.values() for name, param in module.named_parameters())
    initial = {name: param.detach().clone() for name, param in named}

    batch_rank = config.batch_data_rank
    micro_batches = plan.training.microbatches(len(pipe_members))
    rows = micro_batches * plan.training.micro_batch_size
    length = model.sequence_length // par.sequence_data_size
    columns = slice(par.sequence_data_rank * length, (par.sequence_data_rank + 1) * length)
    sequences = plan.tokens[batch_rank * rows : (batch_rank + 1) * rows].to(ctx.device)
    inputs, targets = sequences[:, :-1][:, columns], sequences[:, 1:][:, columns]
    total_tokens = plan.tokens.shape[0] * model.sequence_length

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return token_losses(logits, target, par).sum() / total_tokens

    metas = {stage: _metas(plan, stage, stages, par, ctx.device) for stage in mine}
    carrier = pipeline_carrier(ctx.pool, pipe_group, pipe_members, pipe_rank)
    losses: list[torch.Tensor] = []
    with registered(carrier, pipe_members):
        pipeline_stages = build_stages(modules, stages, carrier, metas)
        schedule = make_schedule(plan.training.schedule_spec, pipeline_stages, micro_batches, loss_fn)
        last = stages - 1 in modules
        args = (inputs,) if 0 in modules else ()
        schedule.step(*args, target=targets if last else None, losses=losses if last else None)
    stepped = time.perf_counter()

    params = [param for _, param in named]
    for param in params:
        if param.grad is None:  # a layer the forward pass left out
            param.grad = torch.zeros_like(param)
    if par.tensor is not None:
        for param in params:  # each tensor rank saw other tokens: the gradient is partial
            if (par.sequence_tensor_parallel and split_dim(param) is None) or is_tensor_partial(param):
                all_reduce(param.grad, par.tensor)
    keep_own = fault.unreduced == ctx.rank
    dense = [param for param in params if not is_expert(param)]
    expert = [param for param in params if is_expert(param)]
    held = dict(zip(map(id, dense), _reduce(dense, data_group, data_rank, plan, keep_own)))
    if expert:  # the experts' gradients are summed over the expert-data group
        expert_group, _, expert_rank = used["expert_data"]
        held.update(zip(map(id, expert), _reduce(expert, expert_group, expert_rank, plan, keep_own)))
    pieces = [held[id(param)] for param in params]
    shards = [
        {
            "name": name,
            "split": split_dim(param),
            "tensor_index": _place(param, par)[0],
            "tensor_parts": _place(param, par)[1],
            "initial": initial[name].cpu(),
            "updated": param.detach().cpu().clone(),
            "grad": None if piece is None else (piece[0], piece[1], piece[2].cpu()),
        }
        for (name, param), piece in zip(named, pieces)
    ]
    return {
        "rank": ctx.rank,
        "stages": mine,
        "loss": float(sum(loss.detach() for loss in losses)) if losses else None,
        "groups": {dim: members for dim, (_, members, _) in used.items()},
        "shards": shards,
        "masks": recorder.masks,
        "activations": recorder.activations,
        "misrouted": recorder.misrouted,
        "seconds": {"step": stepped - begin, "total": time.perf_counter() - begin},
    }
