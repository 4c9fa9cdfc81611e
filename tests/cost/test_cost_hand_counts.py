"""Byte counts derived by hand (in the comments) for two small set-ups: every memory cell, every row."""

from __future__ import annotations

import numpy as np
import pytest

from fastdist_lab import Layout
from fastdist_lab.cost import Training, Transformer, estimate

# h=64, 4 heads of 16 channels: attention 2*64*16*(4+g), MLP 2*64*256 = 32768.


def first_case():
    """tp 2, pp 2, sdp 2, bdp 2 on 4 nodes of 4; untied LayerNorm; ZeRO 1, no sequence parallel, recompute none."""
    model = Transformer(hidden_size=64, num_layers=4, num_attention_heads=4, vocab_size=250, seq_length=32,
                        tied_embeddings=False)  # fmt: skip
    layout = Layout(world_size=16, local_world_size=4, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    training = Training(micro_batch_size=2, num_microbatches=4, distributed_optimizer=True)
    return estimate(layout, model, training)


def second_case():
    """tp 2, pp 3 (7 layers: 3, 2, 2), dp 2 on 2 nodes of 6; tied RMSNorm, g=2; ZeRO 3, sequence parallel, full."""
    model = Transformer(hidden_size=64, num_layers=7, num_attention_heads=4, num_query_groups=2, vocab_size=500,
                        seq_length=64, normalization="RMSNorm")  # fmt: skip
    layout = Layout(world_size=12, local_world_size=6, tensor_parallel=2, pipeline_parallel=3)
    training = Training(zero_stage=3, sequence_tensor_parallel=True, recompute="full")
    return estimate(layout, model, training)


def test_first_case_memory():
    report = first_case()
    # Per layer per rank: (16384 + 32768) / 2 = 24576 split + 2 LayerNorms * 2 * 64 = 256 replicated.
    # Vocabulary 250 padded to 128 * tp = 256: embedding 64 * 256 / 2 = 8192 per rank; final norm 128.
    # Stage 0: 2 * 24832 + 8192 = 57856. Stage 1: 2 * 24832 + 128 + 8192 (untied output) = 57984.
    assert report.memory["parameters"].tolist() == [57856, 57984]
    # ZeRO 1 over data = sdp * bdp = 4: 2 bytes weights, 4 gradients, 12 / 4 = 3 optimizer per parameter.
    assert report.memory["weights_bytes"].tolist() == [115712, 115968]
    assert report.memory["gradients_bytes"].tolist() == [231424, 231936]
    assert report.memory["optimizer_bytes"].tolist() == [173568, 173952]
    # Activations, no sequence parallel: s' = 32 / sdp = 16 tokens, b 2, h 64: sbh = 2048.
    # Per layer 2048 * (10 + 24 / 2) = 45056, plus gathered K/V 2 bytes * 2 * (32 - 16) * 2 * 4 * 16 / 2 = 4096.
    # In flight: min(4, 2 - i) = [2, 1]. Embedding 8 * 16 * 2 + 2048 = 2304 per micro-batch.
    # Output 2 * (16 * 2 * 256 / 2 + 2048) = 12288. Megatron-LM's 5% for temporaries on top, a column of its own.
    # Stage 0: 2 * 2 * 49152 + 2 * 2304 = 201216, * 1.05 = 211276.8; stage 1: 2 * 49152 + 12288 = 110592, 116121.6.
    assert report.memory["activations_bytes"].tolist() == [201216, 110592]
    assert report.memory["temporaries_bytes"].tolist() == [211277 - 201216, 116122 - 110592]
    assert report.memory["total_bytes"].tolist() == [731981, 637978]
    assert report.most_loaded_stage == 0 and report.most_loaded.name == 0
    assert report.peak_bytes == 731981


def test_first_case_communication():
    report = first_case()
    rows = report.communication.set_index(["dim", "collective"])
    assert list(rows.index) == [
        ("tensor", "all_reduce"),
        ("sequence_data", "all_gather"),
        ("sequence_data", "reduce_scatter"),
        ("pipeline", "send_recv"),
        ("data", "reduce_scatter"),
        ("data", "all_gather"),
    ]
    expected = {
        # 4 micro-batches * (2 layers * 4 + 1 embedding or output) of 2 * 16 * 2 * 64 = 4096 bytes;
        # tensor groups (0 1), (2 3), ... stay in a node of 4; bus 2 (n - 1) / n = 1.
        ("tensor", "all_reduce"): (36, 4096, 2, 1, False, 36 * 4096 * 1.0),
        # K and V of the whole sequence: 2 bytes * 2 * 32 * 2 * 4 groups * 16 / tp 2 = 8192; 4 * 2 layers;
        # sequence_data groups (0 2), (1 3), ...: one node; bus (n - 1) / n = 1 / 2.
        ("sequence_data", "all_gather"): (8, 8192, 2, 1, False, 8 * 8192 / 2),
        ("sequence_data", "reduce_scatter"): (8, 8192, 2, 1, False, 8 * 8192 / 2),
        # 4096-byte activations, one message per micro-batch (pp = 2); pipeline groups (0 8): nodes 0 and 2.
        ("pipeline", "send_recv"): (4, 4096, 2, 2, True, 4 * 4096),
        # Stage 1's 57984 parameters: fp32 gradients reduce-scattered, bf16 weights all-gathered, once;
        # data groups (0 2 4 6): nodes 0, 0, 1, 1; bus 3 / 4.
        ("data", "reduce_scatter"): (1, 57984 * 4, 4, 2, True, 57984 * 4 * 3 / 4),
        ("data", "all_gather"): (1, 57984 * 2, 4, 2, True, 57984 * 2 * 3 / 4),
    }
    for key, (calls, size, group_size, spanned, inter, bus) in expected.items():
        row = rows.loc[key]
        assert (row.calls_per_step, row.bytes_per_call, row.bytes_per_step) == (calls, size, calls * size), key
        assert (row.group_size, row.nodes_spanned, bool(row.inter_node)) == (group_size, spanned, inter), key
        assert row.bus_bytes_per_step == pytest.approx(bus), key
    assert report.groups("data", "all_gather").tolist()[0] == [0, 2, 4, 6]


def test_second_case_memory():
    report = second_case()
    # Attention 2*64*16*(4+2) = 12288; per layer per rank (12288 + 32768) / 2 = 22528 + 2 RMSNorms 128.
    # Vocabulary 500 padded to 512: 64 * 512 / 2 = 16384 per rank. Layers 3, 2, 2.
    # Stage 0: 3 * 22656 + 16384 = 84352; stage 1: 2 * 22656 = 45312; stage 2: 45312 + 64 + 16384 (tied copy).
    assert report.memory["parameters"].tolist() == [84352, 45312, 61760]
    # ZeRO 3 over dp 2: weights 2 / 2, gradients 4 / 2, optimizer 12 / 2 bytes per parameter.
    assert report.memory["weights_bytes"].tolist() == [84352, 45312, 61760]
    assert report.memory["gradients_bytes"].tolist() == [168704, 90624, 123520]
    assert report.memory["optimizer_bytes"].tolist() == [506112, 271872, 370560]
    # Sequence parallel, t 2, s 64, b 1: sbh = 4096; layer 4096 * (18 + 4 * 256 / 64) / 2 = 69632;
    # full recompute keeps 2 * 4096 / 2 = 4096 per layer and micro-batch plus one layer's 69632.
    # m = pp = 3, in flight [3, 2, 1]; embedding (8 * 64 + 4096) / 2 = 2304; output 4 * 4096 * (1 + 512/64) / 2.
    # Stage 0: 3*3*4096 + 69632 + 3*2304 = 113408; stage 1: 2*2*4096 + 69632; stage 2: 2*4096 + 69632 + 73728.
    assert report.memory["activations_bytes"].tolist() == [113408, 86016, 151552]
    # Temporaries: none of Megatron-LM's 5% (sequence parallel); ZeRO 3 holds one layer gathered, the next one
    # prefetched and one layer's unsharded gradients: 22656 * (2 * 2 + 4) = 181248 on every stage.
    assert report.memory["temporaries_bytes"].tolist() == [181248, 181248, 181248]
    assert report.memory["total_bytes"].tolist() == [872576 + 181248, 493824 + 181248, 707392 + 181248]
    assert report.most_loaded_stage == 0


def test_second_case_communication():
    report = second_case()
    rows = report.communication.set_index(["dim", "collective"])
    expected = {
        # Busiest stage 0: 3 * (3 layers * (4 + 2 recomputed) + 1 embedding) = 57 of 2 * 64 * 64 = 8192 bytes.
        ("tensor", "all_gather"): (57, 8192, 2, 1, False, 57 * 8192 / 2),
        ("tensor", "reduce_scatter"): (57, 8192, 2, 1, False, 57 * 8192 / 2),
        # Norm gradients of stage 0 (3 * 128 = 384, fp32), every micro-batch under ZeRO 3.
        ("tensor", "all_reduce"): (3, 1536, 2, 1, False, 3 * 1536),
        # 8192 / tp = 4096 bytes, a middle stage sends 2 per micro-batch; groups (0 4 8): nodes 0, 0, 1.
        ("pipeline", "send_recv"): (6, 4096, 3, 2, True, 6 * 4096),
        # Tied embedding gradient (16384 fp32) between the ends (0 8), every micro-batch under ZeRO 3.
        ("pipeline", "all_reduce"): (3, 65536, 2, 2, True, 3 * 65536),
        # Stage 0's 84352 parameters: reduce-scatter per micro-batch, all-gather twice per micro-batch;
        # data groups (0 2), (1 3), (4 6), ...: (4 6) has ranks on nodes 0 and 1.
        ("data", "reduce_scatter"): (3, 84352 * 4, 2, 2, True, 3 * 84352 * 4 / 2),
        ("data", "all_gather"): (6, 84352 * 2, 2, 2, True, 6 * 84352 * 2 / 2),
    }
    assert list(rows.index) == list(expected)
    for key, (calls, size, group_size, spanned, inter, bus) in expected.items():
        row = rows.loc[key]
        assert (row.calls_per_step, row.bytes_per_call, row.bytes_per_step) == (calls, size, calls * size), key
        assert (row.group_size, row.nodes_spanned, bool(row.inter_node)) == (group_size, spanned, inter), key
        assert row.bus_bytes_per_step == pytest.approx(bus), key
    np.testing.assert_array_equal(report.groups("pipeline", "all_reduce"), [[0, 8], [1, 9], [2, 10], [3, 11]])


def test_time_on_hardware():
    from fastdist_lab.cost import Hardware

    report = first_case()
    hardware = Hardware(intra_node_GBps=100, inter_node_GBps=10)
    time = report.communication_time(hardware)
    assert list(time.index) == ["tensor", "sequence_data", "pipeline", "data"]
    assert time.loc["tensor", "seconds"] == pytest.approx(36 * 4096 / 100e9)
    assert time.loc["sequence_data", "seconds"] == pytest.approx(2 * 8 * 8192 / 2 / 100e9)
    assert time.loc["pipeline", "seconds"] == pytest.approx(4 * 4096 / 10e9)
    assert time.loc["data", "seconds"] == pytest.approx(57984 * 6 * 3 / 4 / 10e9)
    assert time["dominant"].tolist() == [False, False, False, True]
    # The same bytes all inside fast links: tensor dominates (its calls are the most bytes per link).
    fast = report.communication_time(Hardware(100, 100))
    assert time.loc["data", "seconds"] > fast.loc["data", "seconds"]
    assert fast["dominant"].sum() == 1
