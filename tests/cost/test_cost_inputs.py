"""Presets, resolved defaults, and every bad input reported as ``CostError`` naming the field and value."""

from __future__ import annotations

import pytest

from fastdist_lab import Layout
from fastdist_lab.cost import Hardware, Training, Transformer, estimate
from fastdist_lab.errors import CostError

SMALL = dict(hidden_size=64, num_layers=4, num_attention_heads=4, vocab_size=256, seq_length=32)


@pytest.mark.parametrize(
    ("name", "parameters", "published"),
    [
        ("gpt3-1.3b", 1_311_182_848, 1.3e9),
        ("gpt3-175b", 174_569_054_208, 175.0e9),
        ("llama2-7b", 6_738_415_616, 6.74e9),
        ("llama2-70b", 68_976_648_192, 68.98e9),
        ("mistral-7b", 7_241_732_096, 7.24e9),
        ("llama3-8b", 8_030_261_248, 8.03e9),
    ],
)
def test_presets_match_published_sizes(name, parameters, published):
    model = Transformer.preset(name)
    assert model.parameters() == parameters
    assert abs(parameters / published - 1) < 0.01  # biases and position embeddings are not counted


def test_defaults_are_resolved():
    model = Transformer(**SMALL)
    assert (model.ffn_hidden_size, model.num_query_groups, model.kv_channels) == (256, 4, 16)
    assert model.replace(seq_length=64).seq_length == 64
    assert Transformer.preset("llama2-7b", seq_length=1024).seq_length == 1024
    assert Training(distributed_optimizer=True).zero_stage == 1
    assert Training(zero_stage=3).distributed_optimizer is True
    assert Training().zero_stage == 0 and Training().microbatches(4) == 4
    assert Training(zero_stage=2).replace(distributed_optimizer=True).zero_stage == 1
    assert Hardware.preset("dgx-h100").inter_node_GBps == 50


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(hidden_size=0), "hidden_size=0"),
        (dict(num_layers=2.5), "num_layers=2.5"),
        (dict(num_attention_heads=True), "num_attention_heads=True"),
        (dict(hidden_size=66), "hidden_size=66 is not a multiple of num_attention_heads=4"),
        (dict(num_query_groups=3), "num_query_groups=3 must divide num_attention_heads=4"),
        (dict(ffn_hidden_size=-1), "ffn_hidden_size=-1"),
        (dict(swiglu="yes"), "swiglu='yes'"),
        (dict(normalization="BatchNorm"), "normalization='BatchNorm'"),
    ],
)
def test_bad_model_fields_are_named(kwargs, message):
    with pytest.raises(CostError, match=message):
        Transformer(**{**SMALL, **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(micro_batch_size=0), "micro_batch_size=0"),
        (dict(num_microbatches=0), "num_microbatches=0"),
        (dict(zero_stage=4), "zero_stage=4"),
        (dict(zero_stage=0, distributed_optimizer=True), "zero_stage=0 contradicts distributed_optimizer=True"),
        (dict(recompute="some"), "recompute='some'"),
        (dict(sequence_tensor_parallel=1), "sequence_tensor_parallel=1"),
        (dict(engine="jax"), "engine='jax'"),
        (dict(bytes_per_weight=0), "bytes_per_weight=0"),
    ],
)
def test_bad_training_fields_are_named(kwargs, message):
    with pytest.raises(CostError, match=message):
        Training(**kwargs)


def test_bad_hardware_and_presets_are_named():
    with pytest.raises(CostError, match="intra_node_GBps=0"):
        Hardware(0, 10)
    with pytest.raises(CostError, match="hardware='tpu'"):
        Hardware.preset("tpu")
    with pytest.raises(CostError, match="model='gpt5'"):
        Transformer.preset("gpt5")
    assert issubclass(CostError, ValueError)


@pytest.mark.parametrize(
    ("layout", "model", "training", "message"),
    [
        (dict(tensor_parallel=8), dict(), dict(), "num_attention_heads=4 must be a multiple of tensor_parallel=8"),
        (dict(tensor_parallel=4), dict(num_query_groups=2), dict(), "num_query_groups=2 must be a multiple"),
        (dict(tensor_parallel=2), dict(ffn_hidden_size=255), dict(), "ffn_hidden_size=255"),
        (dict(pipeline_parallel=8), dict(), dict(), "pipeline_parallel=8 is more than num_layers=4"),
        (dict(sequence_data_parallel=2), dict(seq_length=33), dict(), "seq_length=33 must be a multiple of 2"),
        (dict(tensor_parallel=4), dict(seq_length=34), dict(sequence_tensor_parallel=True), "seq_length=34 .* of 4"),
    ],
)
def test_model_that_does_not_split_over_the_layout(layout, model, training, message):
    world = Layout(world_size=16, local_world_size=16, **layout)
    with pytest.raises(CostError, match=message):
        estimate(world, Transformer(**{**SMALL, **model}), Training(**training))


def test_estimate_rejects_wrong_types():
    layout = Layout(world_size=2, local_world_size=2)
    with pytest.raises(CostError, match="model=3"):
        estimate(layout, 3)  # type: ignore[arg-type]
    with pytest.raises(CostError, match="training='x'"):
        estimate(layout, Transformer(**SMALL), "x")  # type: ignore[arg-type]
    with pytest.raises(CostError, match="layout=None"):
        estimate(None, Transformer(**SMALL))
    report = estimate(layout, Transformer(**SMALL))
    with pytest.raises(CostError, match="no communication row dim='tensor'"):
        report.groups("tensor", "all_reduce")
