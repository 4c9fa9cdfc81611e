"""The small GPT of the training check, in one process: the vocabulary-parallel cross-entropy against torch's, the
reference step, the split rules and the layer split over stages."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from hypothesis import given
from hypothesis import strategies as st

from fastdist_lab import LayoutError
from fastdist_lab.checks import TinyGPT
from fastdist_lab.checks.parallel_ops import vocab_parallel_cross_entropy
from fastdist_lab.checks.tiny_gpt import Parallel, StageModule, reference_step, shard_of, split_dim
from fastdist_lab.checks.train_rank import stage_layers


def test_the_cross_entropy_of_one_rank_is_torchs():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=generator, requires_grad=True)
    targets = torch.randint(11, (3, 5), generator=generator)
    mine = vocab_parallel_cross_entropy(logits, targets, None, 0)
    theirs = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), reduction="none").view(3, 5)
    torch.testing.assert_close(mine, theirs)
    (grad,) = torch.autograd.grad(mine.sum(), logits)
    (expected,) = torch.autograd.grad(theirs.sum(), logits)
    torch.testing.assert_close(grad, expected)


def test_the_reference_step_is_mean_cross_entropy_then_sgd():
    model = TinyGPT(layers=2)
    weights = model.initial_weights(3)
    tokens = torch.randint(model.vocab_size, (2, model.sequence_length + 1), generator=torch.Generator().manual_seed(4))
    step = reference_step(model, weights, tokens, learning_rate=0.5)
    module = StageModule(model, range(2), True, True, Parallel())
    module.load(weights, 0, 1)
    logits = module(tokens[:, :-1])
    expected = F.cross_entropy(logits.reshape(-1, model.vocab_size), tokens[:, 1:].reshape(-1))
    assert step["loss"] == pytest.approx(float(expected.detach()), rel=1e-6)
    for name, weight in weights.items():
        torch.testing.assert_close(step["updated"][name], weight - 0.5 * step["grads"][name])
    assert reference_step(model, weights, tokens, 0.5)["loss"] == step["loss"]  # deterministic


def test_what_is_split_and_how():
    module = StageModule(TinyGPT(), range(1), True, True, Parallel(tensor_size=2))
    splits = {name: split_dim(param) for name, param in module.named_parameters()}
    assert splits["embedding.word"] == 0 and splits["embedding.position"] is None
    assert splits["layers.0.attention.query.weight"] == 0 and splits["layers.0.attention.query.bias"] == 0
    assert "layers.0.attention.key.bias" not in splits  # softmax cancels a key bias: no such parameter
    assert splits["layers.0.attention.dense.weight"] == 1 and splits["layers.0.attention.dense.bias"] is None
    assert splits["layers.0.fc1.weight"] == 0 and splits["layers.0.fc2.weight"] == 1
    assert splits["layers.0.norm_1.weight"] is None and splits["head.output"] == 0
    assert module.layers["0"].fc1.weight.shape == (128, 64)
    full = torch.arange(12).view(4, 3)
    assert shard_of(full, 0, 1, 2).tolist() == [[6, 7, 8], [9, 10, 11]]
    assert shard_of(full, None, 1, 2) is full


@pytest.mark.parametrize(
    ("model", "sizes", "message"),
    [
        (TinyGPT(heads=2), (4, 1, False, 1), "tensor_parallel=4 must divide the model's heads=2"),
        (TinyGPT(), (1, 3, False, 1), "sequence_data_parallel=3 must divide the model's sequence_length=16"),
        (
            TinyGPT(sequence_length=4),
            (2, 4, True, 1),
            "sequence_tensor_parallel over tensor_parallel=2 must divide the model's sequence chunk "
            "(sequence_length 4 / sequence_data_parallel 4)=1",
        ),
        (TinyGPT(), (1, 1, False, 5), "5 pipeline stages need at least 5 layers; the model has 4"),
    ],
)
def test_a_layout_the_model_does_not_split_over_is_refused(model, sizes, message):
    with pytest.raises(LayoutError) as caught:
        model.check_layout(*sizes)
    assert str(caught.value) == message


def test_bad_sizes_are_named():
    with pytest.raises(LayoutError, match="TinyGPT layers=0 must be > 0"):
        TinyGPT(layers=0)
    with pytest.raises(LayoutError, match="heads=5 must divide hidden_size=64"):
        TinyGPT(heads=5)
    with pytest.raises(LayoutError, match="TinyGPT layers=10000000000 must be <= 65536"):
        TinyGPT(layers=10**10)
    with pytest.raises(LayoutError, match=r"TinyGPT of 1,611,137,024 parameters is past 268,435,456"):
        TinyGPT(hidden_size=4096, ffn_size=16384, layers=8)
    for model in (TinyGPT(), TinyGPT(num_experts=4), TinyGPT(hidden_size=128, heads=8, layers=2)):
        every = StageModule(model, range(model.layers), True, True, Parallel()).parameters()
        assert 0.97 < model.parameter_count() / sum(p.numel() for p in every) <= 1  # all but biases and norms


@given(st.integers(1, 12), st.data())
def test_the_layers_split_over_stages_in_order(layers, data):
    stages = data.draw(st.integers(1, layers))
    parts = [stage_layers(layers, stage, stages) for stage in range(stages)]
    assert [i for part in parts for i in part] == list(range(layers))
    assert all(len(part) >= 1 for part in parts)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
