"""The collectives of tensor, sequence-tensor and sequence-data parallelism as autograd functions, and the
vocabulary-parallel cross-entropy, on the pool's own group objects (gloo, NCCL or torch's threaded groups).

They follow Megatron-LM (``megatron/core/tensor_parallel/mappings.py``: copy to / reduce from the tensor-parallel
region, gather from / reduce-scatter to the sequence-parallel region; ``cross_entropy.py``: the vocabulary-parallel
cross-entropy of Shoeybi et al. 2019, section 3) and Fast-LLM at commit 91b28fab (``fast_llm/core/ops.py``:
``reduce_forward``, ``gather``, ``split``; the sequence-data key/value gather of
``fast_llm/layers/attention/attention.py``). A group is the object the pool created (``None`` for a dim of size
1: every function is then the identity, so the one-process reference runs the very same code). Collectives are
called on the group object itself (``group.allreduce([t], opts).wait()``), never through c10d's registry, which
the pool does not use.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed

Group = Any
"""A group object from the pool (``ProcessGroupGloo``, ``ProcessGroupNCCL``, a threaded group) or ``None``."""


def all_reduce(tensor: torch.Tensor, group: Group, op: Any = None) -> torch.Tensor:
    """Reduce ``tensor`` in place over ``group`` (sum unless ``op``, a ``torch.distributed.ReduceOp``)."""
    if group is not None:
        options = torch.distributed.AllreduceOptions()
        options.reduceOp = torch.distributed.ReduceOp.SUM if op is None else op
        group.allreduce([tensor], options).wait()
    return tensor


def all_gather(tensor: torch.Tensor, group: Group, dim: int) -> torch.Tensor:
    """Every member's ``tensor`` concatenated along ``dim`` in group-rank order."""
    if group is None:
        return tensor
    tensor = tensor.contiguous()
    parts = [torch.empty_like(tensor) for _ in range(group.size())]
    group.allgather([parts], [tensor]).wait()
    return torch.cat(parts, dim=dim)


def reduce_scatter(tensor: torch.Tensor, group: Group, dim: int) -> torch.Tensor:
    """``tensor`` summed over ``group``, this member keeping its chunk along ``dim`` (chunk = group rank)."""
    if group is None:
        return tensor
    chunks = [chunk.contiguous() for chunk in tensor.chunk(group.size(), dim=dim)]
    out = torch.empty_like(chunks[0])
    options = torch.distributed.ReduceScatterOptions()
    options.reduceOp = torch.distributed.ReduceOp.SUM
    group.reduce_scatter([out], [chunks], options).wait()
    return out


class _CopyToGroup(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Group) -> torch.Tensor:
        ctx.group = group
        return tensor

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return all_reduce(grad.contiguous().clone(), ctx.group), None


class _ReduceFromGroup(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Group) -> torch.Tensor:
        return all_reduce(tensor.contiguous().clone(), group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class _GatherAlong(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Group, dim: int) -> torch.Tensor:
        ctx.group, ctx.dim = group, dim
        return all_gather(tensor, group, dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return reduce_scatter(grad, ctx.group, ctx.dim), None, None


class _ReduceScatterAlong(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Group, dim: int) -> torch.Tensor:
        ctx.group, ctx.dim = group, dim
        return reduce_scatter(tensor, group, dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return all_gather(grad, ctx.group, ctx.dim), None, None


def copy_to_group(tensor: torch.Tensor, group: Group) -> torch.Tensor:
    """Identity forward, gradient summed over ``group`` backward (the input of a column-parallel linear)."""
    return tensor if group is None else _CopyToGroup.apply(tensor, group)


def reduce_from_group(tensor: torch.Tensor, group: Group) -> torch.Tensor:
    """Sum over ``group`` forward, identity backward (the output of a row-parallel linear)."""
    return tensor if group is None else _ReduceFromGroup.apply(tensor, group)


def gather_along(tensor: torch.Tensor, group: Group, dim: int) -> torch.Tensor:
    """All-gather along ``dim`` forward, reduce-scatter backward (sequence-tensor input of a column-parallel
    linear; the sequence-data gather of keys and values)."""
    return tensor if group is None else _GatherAlong.apply(tensor, group, dim)


def reduce_scatter_along(tensor: torch.Tensor, group: Group, dim: int) -> torch.Tensor:
    """Reduce-scatter along ``dim`` forward, all-gather backward (sequence-tensor output of a row-parallel
    linear and of the vocabulary-parallel embedding)."""
    return tensor if group is None else _ReduceScatterAlong.apply(tensor, group, dim)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, group: Group, vocab_start: int) -> torch.Tensor:
        logits = logits.float()
        peak = logits.max(dim=-1).values
        all_reduce(peak, group, torch.distributed.ReduceOp.MAX)
        shifted = logits - peak.unsqueeze(-1)
        local = targets - vocab_start
        mine = (local >= 0) & (local < logits.shape[-1])
        index = torch.where(mine, local, torch.zeros_like(local)).unsqueeze(-1)
        target_logit = torch.where(mine, shifted.gather(-1, index).squeeze(-1), torch.zeros_like(peak))
        all_reduce(target_logit, group)
        exp = shifted.exp()
        total = exp.sum(dim=-1)
        all_reduce(total, group)
        ctx.save_for_backward(exp, total, index, mine)
        return total.log() - target_logit

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        exp, total, index, mine = ctx.saved_tensors
        softmax = exp / total.unsqueeze(-1)
        softmax.scatter_add_(-1, index, -mine.to(softmax.dtype).unsqueeze(-1))
        return softmax * grad.unsqueeze(-1), None, None, None


def vocab_parallel_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, group: Group, vocab_start: int
) -> torch.Tensor:
    """Per-token cross-entropy of ``logits`` (this rank's vocabulary slice ``[vocab_start, vocab_start + V_local)``
    on the last axis) against global ``targets``: the maximum, the target logit and the sum of exponentials are
    all-reduced over the tensor ``group`` (Megatron-LM's ``vocab_parallel_cross_entropy``); the backward pass needs
    no communication."""
    return _VocabParallelCrossEntropy.apply(logits, targets, group, vocab_start)
