"""The mixture-of-experts MLP of ``TinyGPT`` (``TinyGPT.num_experts`` > 0): a top-k router and small experts, split
over a layout's expert groups the way Megatron-Core splits them (``megatron/core/transformer/moe``: the router,
``token_dispatcher.py``'s all-to-all dispatcher, ``experts.py``; read, not copied).

- Router: a linear layer without bias (replicated), softmax over the experts, the top ``top_k`` of them per token;
  the ``top_k`` gates are renormalised to sum to one.
- Experts: ``num_experts`` two-layer MLPs (``fc1`` with bias, GELU, ``fc2`` without bias), expert rank ``s`` of EP
  holding experts ``s * E / EP`` .. ``(s + 1) * E / EP - 1`` (``experts.held_experts``), each expert's ``fc1``
  column-parallel and ``fc2`` row-parallel over the ``expert_tensor`` group.
- Which tokens a rank routes: the tokens it holds. With sequence-tensor parallelism those are its sequence chunk;
  without, the tensor ranks hold the same tokens, so tensor rank ``t`` routes the ``t``-th of ``tensor_size`` near
  equal slices of them (``torch.tensor_split`` of the micro-batch's tokens) and the outputs are all-gathered over
  the tensor group. Each token then enters the MoE once per tensor group; the router's gradient is partial over the
  tensor group and ``train_rank`` sums it there.
- Dispatch: the (token, expert) pairs sorted by destination expert rank, the counts exchanged with an all-to-all over
  the ``expert`` group, then the rows and their expert ids with ``alltoall_base`` (split sizes); with ETP > 1 the
  received rows are all-gathered over ``expert_tensor``, each expert-tensor rank computes its shard of every row,
  the partial outputs are summed over ``expert_tensor`` and each rank keeps its own rows; the reverse all-to-all
  brings the outputs home, where they are weighted by their gates and summed per token.
- The one-process reference (no group) computes every expert on every token, weighted by its gate (zero when not
  chosen): the dense loop, another path than the dispatch.

A rank receiving rows for an expert it does not hold records it (``Recorder.misrouted``): ``TrainingFault(misrouted=
rank)`` makes that rank send its rows one expert rank further on.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed
import torch.nn.functional as F  # noqa: N812 - torch's own spelling

from .parallel_ops import Group, all_gather, all_reduce, reduce_from_group


def _param(*shape: int, split: int | None) -> torch.nn.Parameter:
    param = torch.nn.Parameter(torch.empty(*shape))
    param.tensor_split = split  # type: ignore[attr-defined]  # read by tiny_gpt.split_dim
    param.expert_weight = True  # type: ignore[attr-defined]  # read by is_expert
    return param


def is_expert(param: torch.Tensor) -> bool:
    """Whether ``param`` is an expert's weight (split over ``expert_tensor``, reduced over ``expert_data``)."""
    return bool(getattr(param, "expert_weight", False))


def is_tensor_partial(param: torch.Tensor) -> bool:
    """Whether ``param``'s gradient is partial over the tensor group without sequence-tensor parallelism (the router:
    each tensor rank routes its slice of the tokens)."""
    return bool(getattr(param, "tensor_partial", False))


def all_to_all_rows(tensor: torch.Tensor, group: Group, send: list[int], receive: list[int]) -> torch.Tensor:
    """Rows ``send[j]`` of ``tensor`` (in order) to member ``j`` of ``group``; ``receive[j]`` rows back from each."""
    if group is None:
        return tensor
    out = tensor.new_empty((sum(receive), *tensor.shape[1:]))
    group.alltoall_base(out, tensor.contiguous(), receive, send, torch.distributed.AllToAllOptions()).wait()
    return out


def exchange_counts(send: list[int], group: Group) -> list[int]:
    """How many rows each member of ``group`` sends this rank, given what this rank sends each (``send``)."""
    if group is None:
        return list(send)
    out = torch.empty(len(send), dtype=torch.int64)
    counts = torch.tensor(send, dtype=torch.int64)
    group.alltoall_base(out, counts, [], [], torch.distributed.AllToAllOptions()).wait()
    return [int(count) for count in out]


def gather_rows(tensor: torch.Tensor, group: Group, counts: list[int]) -> torch.Tensor:
    """Every member's rows (``counts[j]`` from member ``j``) concatenated in group-rank order."""
    if group is None:
        return tensor
    most = max(counts)
    padded = F.pad(tensor, (0, 0) * (tensor.dim() - 1) + (0, most - tensor.shape[0]))
    parts = all_gather(padded, group, 0).split(most)
    return torch.cat([part[:count] for part, count in zip(parts, counts)])


def _own(tensor: torch.Tensor, group: Group, counts: list[int]) -> torch.Tensor:
    if group is None:
        return tensor
    rank = group.rank()
    return tensor[sum(counts[:rank]) : sum(counts[: rank + 1])]


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Group, send: list[int], receive: list[int]) -> torch.Tensor:
        ctx.group, ctx.send, ctx.receive = group, send, receive
        return all_to_all_rows(tensor, group, send, receive)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return all_to_all_rows(grad, ctx.group, ctx.receive, ctx.send), None, None, None


class _GatherRows(torch.autograd.Function):
    """Forward: all-gather the rows; backward: (summed over the group when ``summed``) this member's rows."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Group, counts: list[int], summed: bool) -> torch.Tensor:
        ctx.group, ctx.counts, ctx.summed = group, counts, summed
        return gather_rows(tensor, group, counts)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        grad = all_reduce(grad.clone(), ctx.group) if ctx.summed else grad
        return _own(grad, ctx.group, ctx.counts).contiguous(), None, None, None


class _OwnRows(torch.autograd.Function):
    """Forward: this member's rows of a tensor every member holds whole; backward: the rows' gradients gathered."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Group, counts: list[int]) -> torch.Tensor:
        ctx.group, ctx.counts = group, counts
        return _own(tensor, group, counts).contiguous()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return gather_rows(grad.contiguous(), ctx.group, ctx.counts), None, None


class Expert(torch.nn.Module):
    """One expert's shard: ``fc1`` column-parallel (with bias), GELU, ``fc2`` row-parallel (no bias)."""

    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.fc1_weight = _param(ffn, hidden, split=0)
        self.fc1_bias = _param(ffn, split=0)
        self.fc2_weight = _param(hidden, ffn, split=1)

    def forward(self, tensor: torch.Tensor) -> torch.Tensor:
        """This shard's partial output (summed over ``expert_tensor`` by the caller)."""
        return F.linear(F.gelu(F.linear(tensor, self.fc1_weight, self.fc1_bias)), self.fc2_weight)


class MoE(torch.nn.Module):
    """The MoE MLP of one block as a rank holds it (``par``: its ``Parallel``; see the module's docstring)."""

    def __init__(self, hidden: int, ffn: int, num_experts: int, top_k: int, par: Any, site: str):
        super().__init__()
        self.router = torch.nn.Parameter(torch.empty(num_experts, hidden))
        self.router.tensor_split = None  # type: ignore[attr-defined]
        self.router.tensor_partial = True  # type: ignore[attr-defined]
        self.local = num_experts // par.expert_size
        self.first = par.expert_rank * self.local
        ids = range(self.first, self.first + self.local)
        self.experts = torch.nn.ModuleDict({str(e): Expert(hidden, ffn // par.expert_tensor_size) for e in ids})
        self.num_experts, self.top_k, self.par, self.site = num_experts, top_k, par, site

    def forward(self, tensor: torch.Tensor, replicated: bool) -> torch.Tensor:
        """The MoE output of ``tensor`` (``[batch, length, hidden]``); ``replicated``: every tensor rank holds the
        same ``tensor`` (no sequence-tensor parallelism), so each routes its slice and the outputs are gathered."""
        par, shape = self.par, tensor.shape
        rows = tensor.reshape(-1, shape[-1])
        group = par.tensor if replicated else None
        counts = [len(part) for part in torch.arange(rows.shape[0]).tensor_split(par.tensor_size)]
        own = rows[sum(counts[: par.tensor_rank]) : sum(counts[: par.tensor_rank + 1])] if group is not None else rows
        probs = F.linear(own, self.router).softmax(dim=-1)
        gates, chosen = probs.topk(self.top_k, dim=-1)
        gates = gates / gates.sum(dim=-1, keepdim=True)
        if par.expert is None and par.expert_tensor is None:
            out = self.dense(own, gates, chosen)
        else:
            out = self.dispatched(own, gates, chosen)
        if group is not None:
            out = _GatherRows.apply(out, group, counts, False)
        return out.reshape(shape)

    def dense(self, rows: torch.Tensor, gates: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """Every expert on every row, weighted by its gate (zero where not chosen): the one-process reference."""
        weights = torch.zeros(rows.shape[0], self.num_experts, dtype=gates.dtype).scatter(1, chosen, gates)
        out = torch.zeros_like(rows)
        for name, expert in self.experts.items():
            out = out + weights[:, int(name), None] * expert(rows)
        return out

    def dispatched(self, rows: torch.Tensor, gates: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """The rows sent to their experts' ranks, computed there, sent back and combined (see the module)."""
        par, k = self.par, self.top_k
        experts = chosen.reshape(-1)
        destination = experts // self.local
        if par.misroute:  # the fault: one expert rank further on
            destination = (destination + 1) % par.expert_size
        order = torch.argsort(destination * self.num_experts + experts, stable=True)
        token = order // k
        send = torch.bincount(destination, minlength=par.expert_size).tolist()
        receive = exchange_counts(send, par.expert)
        received = _AllToAll.apply(rows[token], par.expert, send, receive)
        ids = all_to_all_rows(experts[order], par.expert, send, receive)
        self.note_misrouted(ids, receive)
        sizes = gather_rows(torch.tensor([len(ids)]), par.expert_tensor, [1] * par.expert_tensor_size)
        tensor_counts = [int(size) for size in sizes]
        gathered = _GatherRows.apply(received, par.expert_tensor, tensor_counts, True)
        local = (gather_rows(ids, par.expert_tensor, tensor_counts) - self.first) % self.local
        partial = torch.zeros_like(gathered)
        for index, expert in enumerate(self.experts.values()):
            where = torch.nonzero(local == index).reshape(-1)
            partial = partial.index_copy(0, where, expert(gathered[where]))
        out = _OwnRows.apply(reduce_from_group(partial, par.expert_tensor), par.expert_tensor, tensor_counts)
        back = _AllToAll.apply(out, par.expert, receive, send)
        weighted = back * gates.reshape(-1)[order, None]
        return torch.zeros_like(rows).index_add(0, token, weighted)

    def note_misrouted(self, ids: torch.Tensor, receive: list[int]) -> None:
        """Record, per sending rank, rows received for experts this rank does not hold."""
        if self.par.recorder is None:
            return
        foreign = (ids < self.first) | (ids >= self.first + self.local)
        for position, part in enumerate(foreign.split(receive)):
            if bool(part.any()):
                source = self.par.expert_members[position] if self.par.expert_members else position
                self.par.recorder.misrouted.append((self.site, int(source), int(part.sum())))
