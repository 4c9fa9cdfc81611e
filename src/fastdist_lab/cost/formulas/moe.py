"""What a mixture of experts adds to the cost model: which layers hold experts, where the expert groups sit on nodes,
the expert parameters per GPU and the all-to-all that sends tokens to their experts and back.

A MoE layer (``Transformer.moe_layers``; layers ``0, f, 2f, ...``) runs, per micro-batch and per rank, as
Megatron-Core's all-to-all token dispatcher does (``megatron/core/transformer/moe/token_dispatcher.py``):

1. the router (a ``T x h`` by ``h x E`` GEMM) picks ``k = experts_per_token`` experts for each of the rank's ``T``
   tokens; the MoE block splits a micro-batch's tokens over the tensor ranks (Megatron-Core requires sequence
   parallel with tensor parallel for MoE), so ``T`` is ``tokens / tensor_parallel``;
2. the tokens are permuted (each copied ``k`` times, grouped by expert) and an **all-to-all over the expert group**
   (``EP`` ranks) dispatches them: each rank sends ``k T h`` activations, ``(EP - 1) / EP`` of them to other ranks;
3. with expert tensor parallel (``ETP > 1``) the received tokens are all-gathered over the expert-tensor group, so
   each of its ranks runs its ``1 / ETP`` of every local expert's MLP on all of them (a grouped GEMM of ``E / EP``
   experts), then reduce-scattered back;
4. a second all-to-all combines the outputs, which are un-permuted and weighted; the backward runs the same two
   all-to-alls (and the ETP gather / reduce-scatter) in reverse.

Per rank the expert FLOPs are ``k T h f_moe`` times the MLP's GEMM factor, divided by ``ETP`` and multiplied by the
``ETP`` tokens gathered: the same for every EP and ETP, as they should be, times ``Training.expert_load_imbalance``
on the busiest rank (the one the step waits for). Not modelled: token dropping (capacity factors below the load),
the dispatcher's overlap with computation (DeepEP, Megatron-Core's ``--overlap-moe-expert-parallel-comm``): the
all-to-alls are exposed, as in Megatron-Core's default.

An all-to-all is NCCL's grouped point-to-point sends to every peer at once: the bytes that stay on the node move at
NVLink's rate, those that leave it through the GPU's own network adapter (every GPU of a node sends at once), the
slower of the two plus one Simple step of each link kind (NCCL's ``baseLat`` and ``hwLat``, ``nccl_tuning``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ...experts import EXPERT_GROUP_DIMS
from ...layout import Layout, nodes_spanned
from ...setup import Efficiency, Hardware, Transformer
from .nccl_tuning import BASE_LATENCY_US, NETWORK_STEP_US, NVLINK_STEP_US


def chunk_moe_layers(model: Transformer, chunk_layers: np.ndarray) -> np.ndarray:
    """MoE layers in each model chunk (stage order): layers ``i`` with ``i % moe_layer_frequency == 0`` among the
    chunk's consecutive layers; zeros for a dense model."""
    chunks = np.asarray(chunk_layers, dtype=np.int64)
    if not model.is_moe:
        return np.zeros_like(chunks)
    ends = np.cumsum(chunks)
    starts = ends - chunks
    f = model.moe_layer_frequency
    return -(-ends // f) - -(-starts // f)


def local_experts(model: Transformer, expert_parallel: Any) -> Any:
    """Experts each expert rank holds: ``num_experts / EP``."""
    return model.num_experts // expert_parallel


def expert_parameters_per_gpu(model: Transformer, expert_parallel: Any, expert_tensor_parallel: Any) -> Any:
    """Parameters of one MoE layer's routed experts on one GPU: ``E / EP`` experts, ``1 / ETP`` of each."""
    return local_experts(model, expert_parallel) * model.expert_parameters // expert_tensor_parallel


def moe_dense_parameters(model: Transformer, tensor_parallel: Any) -> Any:
    """Parameters of one MoE layer's MLP part that are not routed experts, on one GPU: the shared experts (split
    over the tensor ranks like a dense MLP) and the router (whole on every rank)."""
    return model.shared_experts * model.expert_parameters // tensor_parallel + model.router_parameters


@functools.lru_cache(maxsize=1024)
def expert_spread(
    tensor_parallel: int, pipeline_parallel: int, sequence_data_parallel: int, data_parallel: int,
    expert_parallel: int, expert_tensor_parallel: int, local_world_size: int, pipeline_first: bool,
) -> dict[str, tuple[int, int]]:  # fmt: skip
    """For each of ``EXPERT_GROUP_DIMS``, ``(nodes, per_node)``: the most nodes one group spans and its members per
    node, read off the ``Layout``'s own expert groups (one numbering: ``fastdist_lab.experts``)."""
    world = tensor_parallel * pipeline_parallel * data_parallel
    layout = Layout(
        world_size=world, local_world_size=min(local_world_size, world), tensor_parallel=tensor_parallel,
        pipeline_parallel=pipeline_parallel, sequence_data_parallel=sequence_data_parallel,
        pipeline_first=pipeline_first, expert_parallel=expert_parallel,
        expert_tensor_parallel=expert_tensor_parallel,
    )  # fmt: skip
    spread = {}
    for dim in EXPERT_GROUP_DIMS:
        groups = layout.groups(dim)
        nodes = nodes_spanned(groups, layout.local_world_size)
        spread[dim] = (nodes, max(groups.shape[1] // nodes, 1))
    return spread


def expert_placement(
    tensor_parallel: Any, pipeline_parallel: int, sequence_data_parallel: Any, data_parallel: Any,
    expert_parallel: Any, expert_tensor_parallel: Any, local_world_size: Any, pipeline_first: Any,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:  # fmt: skip
    """``expert_spread`` for set-ups given as arrays (or numbers): per dim, ``(nodes, per_node)`` arrays."""
    columns = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x)).astype(np.int64) for x in (
        tensor_parallel, sequence_data_parallel, data_parallel, expert_parallel, expert_tensor_parallel,
        local_world_size, pipeline_first,
    )))  # fmt: skip
    unique, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)  # a search repeats them
    found = [
        expert_spread(int(tp), int(pipeline_parallel), int(sdp), int(dp), int(ep), int(etp), int(w), bool(first))
        for tp, sdp, dp, ep, etp, w, first in unique
    ]
    inverse = inverse.reshape(-1)
    return {
        dim: (np.array([f[dim][0] for f in found])[inverse], np.array([f[dim][1] for f in found])[inverse])
        for dim in EXPERT_GROUP_DIMS
    }


def all_to_all_seconds(payload: Any, per_node: Any, nodes: Any, hardware: Hardware, efficiency: Efficiency) -> Any:
    """Seconds of one all-to-all in which each rank sends ``payload`` bytes in all, an equal share to each of the
    ``per_node * nodes`` members (itself included); 0 for a one-member group (module docstring)."""
    g = np.asarray(per_node, dtype=np.float64)
    n = g * np.asarray(nodes, dtype=np.float64)
    payload = np.asarray(payload, dtype=np.float64)
    inside = payload * (g - 1) / n / (hardware.intra_node_GBps * efficiency.nvlink_efficiency * 1e9)
    leaving = payload * (n - g) / n / (hardware.inter_node_GBps * efficiency.network_efficiency * 1e9)
    simple = 2  # NCCL's Simple protocol, which its point-to-point sends use
    latency = (
        BASE_LATENCY_US["ring"][simple]
        + np.where(g > 1, NVLINK_STEP_US["ring"][simple], 0.0)
        + np.where(n > g, NETWORK_STEP_US["ring"][simple], 0.0)
    ) * 1e-6
    if efficiency.collective_latency_s is not None:
        latency = efficiency.collective_latency_s
    return np.where((n > 1) & (payload > 0), np.maximum(inside, leaving) + latency, 0.0)
