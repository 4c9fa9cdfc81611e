"""Hypothesis properties of ``estimate``: stages partition the model, 1/tp scaling, ZeRO monotone, bus bytes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastdist_lab import Layout
from fastdist_lab.cost import Hardware, Training, Transformer, estimate


@st.composite
def setups(draw, fixed_vocab: bool = False):
    """A random (layout, model, training) that splits evenly."""
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.integers(1, 4))
    sdp = draw(st.sampled_from([1, 2]))
    bdp = draw(st.integers(1, 3))
    world = tp * pp * sdp * bdp
    local = draw(st.sampled_from([d for d in range(tp, world + 1, tp) if world % d == 0]))
    layout = Layout(world_size=world, local_world_size=local, tensor_parallel=tp, pipeline_parallel=pp,
                    sequence_data_parallel=sdp, pipeline_first=draw(st.booleans()))  # fmt: skip
    heads = tp * draw(st.integers(1, 3))
    groups = draw(st.sampled_from([g for g in range(tp, heads + 1, tp) if heads % g == 0]))
    model = Transformer(
        hidden_size=heads * draw(st.sampled_from([8, 16])),
        num_layers=draw(st.integers(pp, 3 * pp)),
        num_attention_heads=heads,
        num_query_groups=groups,
        vocab_size=2048 if fixed_vocab else draw(st.integers(1, 3000)),
        seq_length=sdp * tp * draw(st.integers(1, 8)),
        swiglu=draw(st.booleans()),
        tied_embeddings=draw(st.booleans()),
        normalization=draw(st.sampled_from(["LayerNorm", "RMSNorm"])),
    )
    training = Training(
        micro_batch_size=draw(st.integers(1, 4)),
        num_microbatches=draw(st.one_of(st.none(), st.integers(1, 6))),
        zero_stage=draw(st.integers(0, 3)),
        sequence_tensor_parallel=draw(st.booleans()),
        recompute=draw(st.sampled_from(["none", "selective", "full"])),
    )
    return layout, model, training


def replicated(model: Transformer, layers: np.ndarray) -> np.ndarray:
    """Norm parameters per stage (not split by tensor parallel)."""
    norms = layers * model.layer_norm_parameters
    norms[-1] += model.final_norm_parameters
    return norms


@given(setups())
def test_stages_partition_the_model(setup):
    layout, model, training = setup
    report = estimate(layout, model, training)
    memory = report.memory
    tp, pp = layout.tensor_parallel, layout.pipeline_parallel
    layers = np.full(pp, model.num_layers // pp) + (np.arange(pp) < model.num_layers % pp)
    copies = 1 + (not model.tied_embeddings or pp > 1)
    sharded = model.num_layers * (model.attention_parameters + model.mlp_parameters)
    sharded += copies * model.embedding_parameters(tp)
    assert memory["parameters"].sum() == sharded // tp + replicated(model, layers).sum()
    parts = memory[["weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "temporaries_bytes"]]
    parts = parts.sum(axis=1)
    assert (parts == memory["total_bytes"]).all()
    assert report.most_loaded.name == int(memory["total_bytes"].to_numpy().argmax())
    assert report.peak_bytes == memory["total_bytes"].max()
    assert (memory["activations_bytes"] > 0).all()


@given(setups(fixed_vocab=True), st.sampled_from([2, 4]))
def test_sharded_parameters_scale_with_one_over_tp(setup, factor):
    layout, model, training = setup
    if model.num_attention_heads % (layout.tensor_parallel * factor) or model.num_query_groups % (
        layout.tensor_parallel * factor
    ):
        model = model.replace(num_attention_heads=8 * factor, num_query_groups=4 * factor, kv_channels=8)
    fields = {**layout.fields(), "tensor_parallel": 1, "world_size": layout.world_size // layout.tensor_parallel}
    fields["local_world_size"] = fields["world_size"]
    base = estimate(Layout(**fields), model, training.replace(sequence_tensor_parallel=False))
    fields.update(tensor_parallel=factor, world_size=fields["world_size"] * factor)
    fields["local_world_size"] = fields["world_size"]
    split = estimate(Layout(**fields), model, training.replace(sequence_tensor_parallel=False))
    norms = replicated(model, split.sizes.layers_per_stage(model.num_layers))
    one = base.memory["parameters"].to_numpy() - norms
    many = split.memory["parameters"].to_numpy() - norms
    np.testing.assert_array_equal(many * factor, one)


@given(setups())
def test_zero_stages_never_add_memory(setup):
    layout, model, training = setup
    states = []
    for stage in range(4):
        memory = estimate(layout, model, training.replace(zero_stage=stage)).memory
        states.append(memory[["weights_bytes", "gradients_bytes", "optimizer_bytes"]].sum(axis=1).to_numpy())
    for before, after in zip(states, states[1:]):
        assert (after <= before).all()
    if layout.data_parallel == 1:
        assert all((s == states[0]).all() for s in states)
    else:
        assert (states[3] < states[0]).all()


BUS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}


@given(setups())
def test_communication_rows_follow_the_layout(setup):
    layout, model, training = setup
    report = estimate(layout, model, training)
    comm = report.communication
    topology = layout.topology()
    for row in comm.itertuples(index=False):
        assert row.bytes_per_step == row.calls_per_step * row.bytes_per_call > 0
        assert row.bus_bytes_per_step == pytest.approx(row.bytes_per_step * BUS[row.collective](row.group_size))
        groups = report.groups(row.dim, row.collective)
        assert groups.shape[1] == row.group_size
        assert bool(row.inter_node) == (row.nodes_spanned > 1)
        if (row.dim, row.collective) != ("pipeline", "all_reduce"):
            assert row.group_size == topology.loc[row.dim, "group_size"]
            assert row.nodes_spanned == topology.loc[row.dim, "nodes_spanned"]
            np.testing.assert_array_equal(groups, layout.groups(row.dim))
    listed = [(r.dim, r.collective, r.calls_per_step, r.bytes_per_call) for r in report.rows]
    assert listed == list(comm[["dim", "collective", "calls_per_step", "bytes_per_call"]].itertuples(index=False))
    dims = set(comm["dim"])
    assert ("tensor" in dims) == (layout.tensor_parallel > 1)
    assert ("sequence_data" in dims) == (layout.sequence_data_parallel > 1)
    assert ("pipeline" in dims) == (layout.pipeline_parallel > 1)
    assert ("data" in dims) == (layout.data_parallel > 1)
    assert not comm.duplicated(["dim", "collective"]).any()


@given(setups(), st.floats(1, 1000), st.floats(1, 1000))
def test_time_is_bus_bytes_over_bandwidth(setup, intra, inter):
    layout, model, training = setup
    report = estimate(layout, model, training)
    time = report.communication_time(Hardware(intra, inter))
    comm = report.communication
    rate = np.where(comm["inter_node"], inter, intra) * 1e9
    assert time["seconds"].sum() == pytest.approx((comm["bus_bytes_per_step"] / rate).sum())
    assert time["dominant"].sum() == (1 if len(comm) else 0)
    if len(comm):
        assert time.loc[time["dominant"], "seconds"].iloc[0] == time["seconds"].max()


@given(setups())
def test_activation_traffic_grows_with_microbatches(setup):
    layout, model, training = setup
    m = training.microbatches(layout.pipeline_parallel)
    once = estimate(layout, model, training.replace(num_microbatches=m))
    twice = estimate(layout, model, training.replace(num_microbatches=2 * m)).communication
    activations = {("tensor", "all_gather"), ("tensor", "reduce_scatter"), ("pipeline", "send_recv")}
    activations |= {("sequence_data", "all_gather"), ("sequence_data", "reduce_scatter")}
    if not once.sizes.sequence_parallel:
        activations.add(("tensor", "all_reduce"))
    rows = once.communication
    chosen = [(dim, collective) in activations for dim, collective in zip(rows["dim"], rows["collective"])]
    assert (twice.loc[chosen, "calls_per_step"].to_numpy() == 2 * rows.loc[chosen, "calls_per_step"]).all()
    assert (twice.loc[chosen, "bytes_per_call"].to_numpy() == rows.loc[chosen, "bytes_per_call"]).all()


def test_one_rank_has_no_communication():
    report = estimate(Layout(world_size=1, local_world_size=1), Transformer.preset("gpt3-1.3b"))
    assert report.communication.empty and report.communication_time().empty
    assert "dominant: none" in report.to_text()
    assert report.memory.shape == (1, 7)


def test_layout_sequence_tensor_parallel_counts_as_training_flag():
    model = Transformer.preset("llama2-7b")
    via_layout = estimate(Layout(world_size=8, local_world_size=8, tensor_parallel=2, sequence_tensor_parallel=True),
                          model)  # fmt: skip
    via_training = estimate(Layout(world_size=8, local_world_size=8, tensor_parallel=2), model,
                            Training(sequence_tensor_parallel=True))  # fmt: skip
    assert via_layout.sizes.sequence_parallel and via_training.sizes.sequence_parallel
    assert via_layout.memory.equals(via_training.memory)
    assert via_layout.communication.equals(via_training.communication)
