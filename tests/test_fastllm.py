"""``Layout.from_fastllm``: both Fast-LLM field-name vintages, where the world comes from, and named bad keys."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdist_lab import Layout, LayoutError
from fastdist_lab.config import DEFAULT_SEED_SHIFTS
from fastdist_lab.fastllm import FASTLLM_FIELDS, read_fastllm
from fastdist_lab.layout import EXPERT_FIELDS


def test_experiment_yaml_model_distributed_section():
    text = "model:\n  base_model:\n    hidden_size: 64\n  distributed:\n    tensor_parallel: 2\n    seed: 7\n"
    layout = Layout.from_fastllm(text, world_size=8, local_world_size=4)
    assert layout == Layout(world_size=8, local_world_size=4, tensor_parallel=2, seed=7)


def test_bare_distributed_mapping_and_bare_fields():
    assert Layout.from_fastllm({"distributed": {"world_size": 4, "pipeline_parallel": 2}}) == Layout(
        world_size=4, local_world_size=4, pipeline_parallel=2
    )
    assert Layout.from_fastllm({"world_size": 4, "tensor_parallel": 4}).tensor_parallel == 4


def test_model_without_distributed_section_takes_the_defaults():
    layout = Layout.from_fastllm({"model": {"base_model": {}}}, world_size=2)
    assert layout == Layout(world_size=2, local_world_size=2)


def test_current_vintage_inference_shift_is_our_test_shift():
    settings = read_fastllm({"model": {"distributed": {"inference_seed_shift": 5, "use_cuda": False}}}, world_size=1)
    assert settings.fields["test_seed_shift"] == 5
    assert settings.vintage == "current"
    assert "use_cuda" in settings.ignored
    old = read_fastllm({"distributed": {"test_seed_shift": 5}}, world_size=1)
    assert old.vintage == "91b28fab" and old.fields["test_seed_shift"] == 5


def test_older_timeout_name_and_arguments_win_over_the_file():
    settings = read_fastllm({"world_size": 16, "local_world_size": 8, "distributed_timeout": 90}, world_size=32)
    assert settings.fields["timeout"] == 90 and settings.fields["world_size"] == 32
    assert any("world_size=32 from the argument" in note for note in settings.notes)


def test_every_field_is_mapped_explicitly():
    layout_fields = set(Layout(world_size=1, local_world_size=1).fields()) - set(EXPERT_FIELDS)  # not Fast-LLM's
    targets = {target for kind, target, _ in FASTLLM_FIELDS.values() if kind == "layout"}
    assert targets == layout_fields  # every Layout field is reachable, and nothing else
    assert {"inference_seed_shift", "test_seed_shift", "use_cuda", "force_cpu_initialization"} <= set(FASTLLM_FIELDS)


def test_reads_a_file_and_names_it(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("model:\n  distributed:\n    tensor_parallel: 4\n")
    assert Layout.from_fastllm(path, world_size=8).tensor_parallel == 4
    with pytest.raises(LayoutError, match=r"exp\.yaml: model\.distributed: tensor_parallel=4 must divide"):
        Layout.from_fastllm(str(path), world_size=8, local_world_size=2)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "model:\n  distributed:\n    tensr_parallel: 2\n",
            r"model\.distributed\.tensr_parallel \(line 3\).*'tensor_parallel'",
        ),
        ("model:\n  distributed:\n    data_parallel: 2\n", r"data_parallel \(line 3\): computed by Fast-LLM"),
        ("distributed:\n  seed: 1\n  seed: 2\n", r"distributed\.seed is given twice \(lines 2 and 3\)"),
        ("model:\n  distributed:\n    tensor_parallel: [2\n", r"line 4, column 1\): not valid YAML"),
        ("distributed:\n  test_seed_shift: 1\n  inference_seed_shift: 1\n", r"inference_seed_shift \(line 3\)"),
        ("distributed:\n  use_cuda: true\n  test_seed_shift: 1\n", r"mixes keys of several Fast-LLM vintages"),
        ("distributed:\n  seed: null\n", r"distributed\.seed \(line 2\): null"),
        ("distributed: 3\n", r"distributed \(line 1\) must be a mapping"),
        ("model: [1]\n", r"model \(line 1\) must be a mapping"),
        ("training:\n  train_iters: 3\n", r"no 'model: distributed:' section.*training"),
        ("- 1\n- 2\n", r"expected a mapping"),
        ("distributed:\n  rank: -1\n", r"rank=-1 must be >= 0"),
    ],
)
def test_malformed_configs_name_the_key_and_line(text, message):
    with pytest.raises(LayoutError, match=message):
        Layout.from_fastllm(text, world_size=8)


def test_world_size_is_required_somewhere():
    with pytest.raises(LayoutError, match="sets no world_size"):
        Layout.from_fastllm({"model": {"distributed": {"tensor_parallel": 2}}})
    with pytest.raises(LayoutError, match="cannot read Fast-LLM config"):
        Layout.from_fastllm("no/such/file.yaml")


fields = st.fixed_dictionaries(
    {
        "tensor_parallel": st.sampled_from([1, 2, 4]),
        "pipeline_parallel": st.sampled_from([1, 2, 3]),
        "sequence_data_parallel": st.sampled_from([1, 2]),
        "pipeline_first": st.booleans(),
        "sequence_tensor_parallel": st.booleans(),
        "seed": st.integers(0, 2**70),
        "reproducible_init": st.booleans(),
        "backend": st.sampled_from(["nccl", "gloo"]),
        "timeout": st.floats(1, 1e4),
    },
    optional={name: st.integers(-(2**80), 2**80) for name in DEFAULT_SEED_SHIFTS},
)


@settings(max_examples=80, deadline=None)
@given(fields, st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.booleans())
def test_yaml_round_trip_gives_the_same_layout(values, data, nodes, current):
    values = dict(values)
    world = values["tensor_parallel"] * values["pipeline_parallel"] * values["sequence_data_parallel"] * data * nodes
    local = world // nodes
    if local % values["tensor_parallel"]:
        return
    expected = Layout(world_size=world, local_world_size=local, **values)
    if current and "test_seed_shift" in values:
        values["inference_seed_shift"] = values.pop("test_seed_shift")
    text = yaml.safe_dump({"training": {"train_iters": 1}, "model": {"distributed": values}})
    assert Layout.from_fastllm(text, world_size=world, local_world_size=local) == expected
