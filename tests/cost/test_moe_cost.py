"""Mixture of experts in the cost model: parameters, memory per rank, the all-to-all, the step and the search."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdist_lab import Layout
from fastdist_lab.cost import Hardware, Training, Transformer, estimate, model_flops, search
from fastdist_lab.cost.formulas.moe import all_to_all_seconds, chunk_moe_layers, expert_spread
from fastdist_lab.errors import CostError
from fastdist_lab.layout import nodes_spanned
from fastdist_lab.setup.efficiency import DEFAULT_EFFICIENCY

H100 = Hardware.preset("h100-sxm-80gb")


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [  # the model cards: Mixtral 46.7B / 12.9B, Qwen3-30B-A3B 30.5B / 3.3B, Qwen3-235B-A22B 235B / 22B
        ("mixtral-8x7b", 46.7e9, 12.9e9),
        ("qwen3-30b-a3b", 30.5e9, 3.3e9),
        ("qwen3-235b-a22b", 235e9, 22e9),
    ],
)
def test_presets_have_their_published_total_and_active_parameters(name, total, active):
    model = Transformer.preset(name)
    assert model.is_moe and model.moe_layers == model.num_layers
    assert model.parameters() == pytest.approx(total, rel=0.01)
    assert model.active_parameters() == pytest.approx(active, rel=0.02)


def test_moe_layer_frequency_places_experts_on_every_fth_layer_from_the_first():
    model = Transformer.preset("mixtral-8x7b", num_layers=10, moe_layer_frequency=3)
    assert model.moe_layers == 4  # layers 0, 3, 6, 9
    assert chunk_moe_layers(model, np.array([4, 3, 3])).tolist() == [2, 1, 1]
    assert chunk_moe_layers(Transformer.preset("llama2-7b"), np.array([16, 16])).tolist() == [0, 0]


def test_a_one_expert_moe_costs_the_dense_model_plus_its_router():
    dense = Transformer.preset("llama2-7b")
    moe = dense.replace(num_experts=1, experts_per_token=1)
    assert moe.parameters() - dense.parameters() == dense.num_layers * dense.hidden_size
    layout = Layout(world_size=8, local_world_size=8, pipeline_parallel=2)
    training = Training(num_microbatches=4, zero_stage=1)
    dense_report, moe_report = estimate(layout, dense, training), estimate(layout, moe, training)
    extra = moe_report.memory["parameters"].to_numpy() - dense_report.memory["parameters"].to_numpy()
    assert extra.tolist() == [16 * dense.hidden_size, 16 * dense.hidden_size]
    dense_step, moe_step = dense_report.step(H100), moe_report.step(H100)
    assert dense_step.seconds < moe_step.seconds < 1.05 * dense_step.seconds  # router and permutation only
    assert moe_step.parts["expert_comm_seconds"] == 0  # one expert rank: no all-to-all


def test_routed_experts_are_split_over_ep_x_etp_and_sharded_over_the_expert_data_group():
    model = Transformer.preset("mixtral-8x7b")
    layout = Layout(world_size=64, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, expert_parallel=4,
                    expert_tensor_parallel=1)  # fmt: skip
    report = estimate(layout, model, Training(zero_stage=1, sequence_tensor_parallel=True, num_microbatches=4))
    layers = 16
    experts = layers * (8 // 4) * model.expert_parameters  # 2 whole experts per layer on each rank
    dense = layers * (model.attention_parameters // 2 + model.layer_norm_parameters + model.router_parameters)
    embedding = model.hidden_size * model.padded_vocab_size(2) // 2
    assert report.memory["parameters"].tolist() == [experts + dense + embedding,
                                                     experts + dense + embedding + model.hidden_size]  # fmt: skip
    edp = 2 * 16 // (4 * 1)  # stage ranks / (EP x ETP)
    optimizer = report.memory["optimizer_bytes"].iloc[0]
    assert optimizer == -(-experts * 12 // edp) + -(-(dense + embedding) * 12 // 16)


def test_bad_expert_sizes_are_named():
    layout = Layout(world_size=16, local_world_size=8, expert_parallel=16)
    with pytest.raises(CostError, match="num_experts=8 must be a multiple of expert_parallel=16"):
        estimate(layout, "mixtral-8x7b")
    with pytest.raises(CostError, match="expert_parallel=16 needs a model with experts"):
        estimate(layout, "llama2-7b")
    with pytest.raises(CostError, match="experts_per_token=9 is more than num_experts=8"):
        Transformer.preset("mixtral-8x7b", experts_per_token=9)
    with pytest.raises(CostError, match="expert_load_imbalance=0.9"):
        Training(expert_load_imbalance=0.9)


@settings(max_examples=60, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 4]), dp=st.sampled_from([1, 2, 4, 8]),
    ep=st.sampled_from([1, 2, 4, 8]), etp_is_tp=st.booleans(), local=st.sampled_from([2, 4, 8]),
    first=st.booleans(),
)  # fmt: skip
def test_the_expert_spread_is_that_of_the_layouts_own_expert_groups(tp, pp, dp, ep, etp_is_tp, local, first):
    etp = tp if etp_is_tp else 1
    world = tp * pp * dp
    if (tp * dp) % (ep * etp) or world % local and world > local or min(local, world) % tp:
        return
    layout = Layout(world_size=world, local_world_size=min(local, world), tensor_parallel=tp, pipeline_parallel=pp,
                    pipeline_first=first, expert_parallel=ep, expert_tensor_parallel=etp)  # fmt: skip
    spread = expert_spread(tp, pp, 1, dp, ep, etp, local, first)
    for dim in ("expert", "expert_tensor", "expert_data"):
        groups = layout.groups(dim)
        assert spread[dim][0] == nodes_spanned(groups, layout.local_world_size), dim


def test_an_all_to_all_inside_a_node_runs_on_nvlink_and_across_nodes_on_the_network():
    eff, payload = DEFAULT_EFFICIENCY, 64e6
    assert all_to_all_seconds(payload, 1, 1, H100, eff) == 0
    inside = all_to_all_seconds(payload, 8, 1, H100, eff)
    across = all_to_all_seconds(payload, 8, 4, H100, eff)
    latency = (8.4 + 3.4) * 1e-6  # NCCL's Simple base latency and one NVLink step (nccl_tuning)
    bandwidth = H100.intra_node_GBps * eff.nvlink_efficiency * 1e9
    assert inside == pytest.approx(payload * 7 / 8 / bandwidth + latency, rel=1e-9)
    assert across > 4 * inside  # 3/4 of the bytes leave the node at a ninth of NVLink's rate


def test_the_step_pays_the_all_to_all_and_grows_with_imbalance_and_with_the_experts_leaving_the_node():
    model = Transformer.preset("mixtral-8x7b")
    training = Training(zero_stage=1, sequence_tensor_parallel=True, num_microbatches=8, recompute="full")

    def step(local: int, imbalance: float = 1.0):
        layout = Layout(world_size=64, local_world_size=local, tensor_parallel=2, pipeline_parallel=2,
                        expert_parallel=8, expert_tensor_parallel=1)  # fmt: skip
        return estimate(layout, model, training.replace(expert_load_imbalance=imbalance)).step(H100)

    inside, across, skewed = step(8), step(2), step(8, 1.5)
    assert 0 < inside.parts["expert_comm_seconds"] < across.parts["expert_comm_seconds"]
    assert skewed.seconds > inside.seconds
    assert skewed.memory["activations_bytes"].iloc[0] > inside.memory["activations_bytes"].iloc[0]


def test_communication_rows_name_the_expert_groups_and_their_calls():
    model = Transformer.preset("mixtral-8x7b")
    layout = Layout(world_size=32, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, expert_parallel=4,
                    expert_tensor_parallel=2)  # fmt: skip
    report = estimate(layout, model, Training(num_microbatches=4, sequence_tensor_parallel=True))
    assert np.array_equal(report.groups("expert", "all_to_all"), layout.groups("expert"))
    assert np.array_equal(report.groups("expert_tensor", "all_gather"), layout.groups("expert_tensor"))
    frame = report.communication.set_index(["dim", "collective"])
    assert frame.loc[("expert", "all_to_all"), "calls_per_step"] == 4 * 16 * 4  # m x MoE layers x 4
    tokens = model.seq_length // 2  # split over the tensor ranks
    assert frame.loc[("expert", "all_to_all"), "bytes_per_call"] == 2 * tokens * 2 * model.hidden_size  # bf16, k=2
    dense = estimate(Layout(world_size=32, local_world_size=8, tensor_parallel=2, pipeline_parallel=2), model,
                     Training(num_microbatches=4, sequence_tensor_parallel=True))  # fmt: skip
    assert "expert" not in dense.communication["dim"].tolist()  # EP 1: no all-to-all


def test_model_flops_of_a_moe_count_the_active_parameters():
    model = Transformer.preset("qwen3-30b-a3b")
    flops = model_flops(model, 1)
    tokens = model.seq_length
    dense_part = 6 * tokens * model.active_parameters()  # 6 N per token, plus the attention's own
    assert dense_part < flops < 1.6 * dense_part


def test_search_ranks_expert_layouts_and_each_row_is_its_estimate():
    result = search("mixtral-8x7b", 32, hardware="h100-sxm-80gb", global_batch_size=64, pipeline_parallel=(1, 2),
                    micro_batch_size=1, sequence_data_parallel=1, recompute="full", top=5)  # fmt: skip
    assert len(result) == 5 and set(result.frame["expert_parallel"]) <= {1, 2, 4, 8}
    for i in (0, 4):
        layout = result.layout(i)
        assert layout.expert_parallel == result.frame.loc[i, "expert_parallel"]
        step = result.estimate(i).step("h100-sxm-80gb")
        assert step.seconds == pytest.approx(result.frame.loc[i, "seconds"], rel=1e-9)
    dense = search("llama2-7b", 16, hardware="h100-sxm-80gb", global_batch_size=32, top=3)
    assert set(dense.frame["expert_parallel"]) == {1}
    assert (dense.frame["expert_tensor_parallel"] == dense.frame["tensor_parallel"]).all()
