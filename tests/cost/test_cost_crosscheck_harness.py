"""The Megatron-LM cross-check script reports a mismatch when an input is broken.

Megatron-LM is not a dependency, so a stand-in with hand-derived figures for one set-up plays its estimator
(``compute_weight_and_optimizer_memory`` and ``compute_activation_memory_without_sp``); the real comparison
is run by hand (see the script's docstring).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("crosscheck_megatron_memory.py")

# h 64, 2 layers, 4 heads, vocabulary 256, seq 32, micro-batch 1, tp 2, pp 1, dp 2, untied, ZeRO 0.
CONFIG = {
    "model": dict(hidden_size=64, num_layers=2, num_attention_heads=4, vocab_size=256, seq_length=32,
                  tied_embeddings=False),
    "training": dict(micro_batch_size=1, num_microbatches=None, distributed_optimizer=False,
                     sequence_tensor_parallel=False, recompute="none"),
    "layout": dict(tensor_parallel=2, pipeline_parallel=1, world_size=4),
}  # fmt: skip

# Megatron-LM's most loaded shard: (2 * (16384 + 32768) + 64 * 256) / 2 split + 2 * 256 + 128 norms
# + 64 * 256 / 2 untied output at pp 1 = 66176 parameters, 18 bytes each.
STATES = 66176 * 18
# Without sequence parallel: s b h = 32 * 64 = 2048; 2 layers * 2048 * (10 + 24 / 2) + 8 * 32 + 2048
# + 2 * (32 * 256 / 2 + 2048), all * 1.05.
ACTIVATIONS = (2 * 2048 * 22 + 8 * 32 + 2048 + 2 * (32 * 256 / 2 + 2048)) * 1.05


@pytest.fixture(scope="module")
def crosscheck():
    spec = importlib.util.spec_from_file_location("crosscheck_megatron_memory", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def stand_in(states: float, activations: float) -> types.SimpleNamespace:
    def never(args, num_microbatches):
        raise AssertionError("the sequence-parallel formula is not the one for this set-up")

    return types.SimpleNamespace(
        compute_weight_and_optimizer_memory=lambda args: states,
        compute_activation_memory=never,
        compute_activation_memory_without_sp=lambda args, num_microbatches: activations,
    )


def test_agreement_is_reported_as_such(crosscheck):
    problems, worst = crosscheck.compare(stand_in(STATES, ACTIVATIONS), CONFIG, 0.005)
    assert problems == [] and worst < 1e-5


def test_a_broken_input_is_reported(crosscheck):
    broken = {**CONFIG, "model": {**CONFIG["model"], "vocab_size": 300}}  # padded to 512: more parameters
    problems, worst = crosscheck.compare(stand_in(STATES, ACTIVATIONS), broken, 0.005)
    assert len(problems) == 2 and worst > 0.005
    assert problems[0].startswith("weights+gradients+optimizer: ours") and "Megatron-LM" in problems[0]
    assert problems[1].startswith("activations: ours")


def test_a_wrong_estimate_is_reported(crosscheck):
    problems, _ = crosscheck.compare(stand_in(STATES * 1.01, ACTIVATIONS), CONFIG, 0.005)
    assert len(problems) == 1 and "(-0.990%)" in problems[0]


def test_megatron_arguments_follow_its_rules(crosscheck):
    from fastdist_lab import Layout
    from fastdist_lab.cost import Training, Transformer

    model = Transformer(**{**CONFIG["model"], "vocab_size": 300, "num_query_groups": 2})
    args = crosscheck.megatron_args(model, Training(sequence_tensor_parallel=True), Layout(world_size=1))
    assert args.padded_vocab_size == 384 and args.group_query_attention and not args.sequence_parallel
