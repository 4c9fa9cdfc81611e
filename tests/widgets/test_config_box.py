"""The *paste a config* box of LayoutPanel: a pasted config or launch line becomes the panel's layout in one update,
a config no Layout reproduces is said plainly with the framework's groups, and a malformed input is one error line
that leaves every control as it was."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import fastdist_lab  # noqa: E402
from fastdist_lab import Layout
from fastdist_lab.conventions import load_config  # noqa: E402
from fastdist_lab.seeds import generator_seeds  # noqa: E402
from fastdist_lab.widgets import ConfigLoad, LayoutPanel  # noqa: E402
from fastdist_lab.widgets.config_box import CONFIG_BOX_TITLE, groups_table_html  # noqa: E402

MEGATRON_LINE = (
    "torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 4 "
    "--pipeline-model-parallel-size 2 --use-tp-pp-dp-mapping --seed 1234"
)
NO_LAYOUT_LINE = (
    "torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
    "--context-parallel-size 2 --pipeline-model-parallel-size 2 --use-tp-pp-dp-mapping "
    "--expert-model-parallel-size 4 --expert-tensor-parallel-size 1"
)
FASTLLM_YAML = """\
model:
  distributed:
    tensor_parallel: 2
    pipeline_parallel: 2
    sequence_tensor_parallel: true
    tp_seed_shift: 77
    seed: 984059
"""
TORCHTITAN_LINE = (
    "NGPU=8 CONFIG_FILE=./llama3_8b.toml ./run_train.sh --parallelism.tensor_parallel_degree 2 "
    "--parallelism.data_parallel_shard_degree -1 --parallelism.context_parallel_degree 2"
)


def panel_state(panel: LayoutPanel) -> tuple:
    """Everything a half-applied load could leave changed: controls, other fields, layout, error, picture."""
    return (panel.values(), dict(panel.other_fields), panel.layout, panel.error, panel.png, panel.renders)


def counting_layout_changes(panel: LayoutPanel) -> list:
    changes: list = []
    panel.observe(lambda change: changes.append(change["new"]), names="layout")
    return changes


def test_the_box_is_a_collapsed_accordion_in_the_panel_with_its_css_classes():
    panel = LayoutPanel()
    box = panel.config_box
    assert box.widget in panel.widget.children and box.widget.selected_index is None
    assert box.widget.titles == (CONFIG_BOX_TITLE,)
    for name, widget in {
        "fdl-config-box": box.widget,
        "fdl-config-text": box.text,
        "fdl-config-load": box.load_button,
        "fdl-config-version": box.version,
        "fdl-config-status": box.status,
        "fdl-config-groups": box.groups,
    }.items():
        assert name in widget._dom_classes, name


def test_a_megatron_launch_line_sets_every_control_in_one_update_and_one_redraw():
    panel = LayoutPanel(world_size=8, local_world_size=8, rank=5)
    renders, changes = panel.renders, counting_layout_changes(panel)
    result = panel.load_config(MEGATRON_LINE)
    expected = Layout(world_size=16, local_world_size=8, tensor_parallel=4, pipeline_parallel=2,
                      sequence_data_parallel=1, pipeline_first=True, backend="gloo")  # fmt: skip
    assert isinstance(result, ConfigLoad) and result.applied and result.status == "applied"
    assert panel.layout == expected and result.layout == expected
    assert panel.values() == {"world_size": 16, "local_world_size": 8, "tensor_parallel": 4, "pipeline_parallel": 2,
                              "sequence_data_parallel": 1, "pipeline_first": True, "seed": 1234,
                              "expert_parallel": 1,  # ETP as the loader spells it (None or tensor size)
                              "expert_tensor_parallel": result.layout.expert_tensor_parallel}  # fmt: skip
    assert changes == [expected] and panel.renders == renders + 1
    assert panel.error == "" and panel.rank.value == 5  # rank 5 still exists: the highlight stays
    assert "Megatron-LM command line" in panel.config_box.status.value and "tp-cp-ep-pp-dp" in result.message
    assert "fdl-config-error" not in panel.config_box.status.value and panel.config_box.groups.value == ""
    assert panel.config_box.text.value == MEGATRON_LINE and "pipeline-first" in panel.summary.value


def test_a_fastllm_yaml_without_a_world_size_takes_the_panels_and_keeps_fields_without_a_control():
    panel = LayoutPanel(world_size=16, local_world_size=8, tensor_parallel=1, pipeline_parallel=1)
    result = panel.load_config(FASTLLM_YAML)
    assert result.applied and result.world_from_panel
    loaded = load_config(FASTLLM_YAML, world_size=16, local_world_size=8)
    assert panel.layout == loaded.layout.replace(backend="gloo")
    assert panel.layout.tp_seed_shift == 77 and panel.layout.sequence_tensor_parallel and panel.seed.value == 984059
    assert "world size 16 (8 per node) from the panel" in result.message
    assert "tp_seed_shift=77" in result.message and "sequence_tensor_parallel=True" in result.message
    panel.rank.value = 3  # the card shows the seeds of the loaded seed and shifts
    assert all(str(seed) in panel.card.value for seed in generator_seeds(panel.layout.config(3)).values())
    panel.tensor_parallel.value = 4  # a control change keeps the fields the config set
    assert panel.layout.tp_seed_shift == 77 and panel.layout.tensor_parallel == 4


def test_a_torchtitan_launch_line_and_the_version_choice():
    panel = LayoutPanel()
    result = panel.load_config(TORCHTITAN_LINE)
    assert result.applied and panel.layout == Layout(world_size=8, local_world_size=8, tensor_parallel=2,
                                                     sequence_data_parallel=2, backend="gloo")  # fmt: skip
    assert "(2026-08)" in result.message and panel.config_box.version.value == "auto"  # today's meshes by default
    panel.config_box.version.value = "2025-12"
    again = panel.config_box.load()  # what Load does: the text area's text, the box's version
    assert again.applied and "(2025-12)" in again.message


def test_the_load_button_does_what_load_config_does():
    panel = LayoutPanel()
    panel.config_box.text.value = MEGATRON_LINE
    panel.config_box.load_button.click()
    assert panel.config_box.last is not None and panel.config_box.last.applied
    assert panel.layout.world_size == 16 and panel.layout.pipeline_first


def test_no_layout_is_said_plainly_with_the_frameworks_groups_and_the_panel_keeps_its_layout():
    panel = LayoutPanel()
    panel.load_config(FASTLLM_YAML)
    before = panel_state(panel)
    result = panel.load_config(NO_LAYOUT_LINE)
    assert result.status == "no layout" and not result.applied and result.layout is None
    assert "No Layout reproduces it" in result.message and "tp-cp-ep-pp-dp" in result.message
    assert "The panel keeps its layout" in panel.config_box.status.value
    table = panel.config_box.groups.value
    assert "EXPERT_MODEL_PARALLEL_GROUP" in table and "<td>[0, 1, 2, 3] | [4, 5, 6, 7] | ... (2 more)</td>" in table
    assert "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP" in table
    assert panel_state(panel) == before
    panel.load_config(MEGATRON_LINE)  # a later good load clears the groups table
    assert panel.config_box.groups.value == ""


@pytest.mark.parametrize(
    "text, named",
    [
        ("model:\n  distributed:\n    tensor_paralel: 4\n", "tensor_paralel (line 3)"),
        ("model:\n  distributed:\n    world_size: 8\n    tensor_parallel: 3\n", "tensor_parallel=3"),
        ("model: [1, 2\n", "line 2"),
        ("[parallelism]\ntensor_parallel_degree = 'x'\n", "line 2: parallelism.tensor_parallel_degree='x'"),
        ("torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size x", "--tensor-model-parallel-size"),
        ("torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 3", "not divisible"),
        ("torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 2 'oops", "line 1"),
        ("NGPU=8 ./run_train.sh --parallelism.tensor_parallel_degree 3", "tp(3)"),
        ("hello world", "cannot tell which framework"),
        ("   ", "nothing to load"),
    ],
)
def test_a_malformed_input_is_one_error_line_and_changes_nothing(text: str, named: str):
    panel = LayoutPanel()
    panel.load_config(FASTLLM_YAML)  # fields without a control set: they must survive too
    before = panel_state(panel)
    result = panel.load_config(text)
    assert result.status == "error" and not result.applied and result.loaded is None
    assert named in result.error and "\n" not in result.error and "Traceback" not in result.error
    assert "fdl-config-error" in panel.config_box.status.value and panel.config_box.groups.value == ""
    assert panel_state(panel) == before


def test_a_config_whose_world_the_panel_cannot_show_changes_nothing():
    panel = LayoutPanel()
    before = panel_state(panel)
    result = panel.load_config(
        "torchrun --nnodes 1024 --nproc-per-node 128 pretrain_gpt.py --tensor-model-parallel-size 8"
    )
    assert result.status == "error" and result.loaded is not None and result.loaded.layout.world_size == 131072
    assert "world size 131,072 is more than the panel shows (at most 65,536)" in result.error
    assert panel_state(panel) == before


def test_a_failure_while_applying_restores_every_control():
    panel = LayoutPanel()
    before = panel_state(panel)
    failures = []

    def refuse_once(change: dict) -> None:  # a control that refuses its new value, once, half-way through
        if not failures:
            failures.append(change["new"])
            raise RuntimeError("the front end refused pipeline_first")

    panel.pipeline_first.observe(refuse_once, names="value")
    result = panel.load_config(MEGATRON_LINE)  # world, node size and tensor are set before pipeline_first
    assert failures == [True]
    assert result.status == "error" and "could not apply" in result.error and "the panel is as it was" in result.error
    assert "the front end refused pipeline_first" in result.error
    assert panel_state(panel)[:4] == before[:4]


def test_the_panels_world_is_used_only_when_the_config_gives_none():
    panel = LayoutPanel(world_size=32, local_world_size=8, tensor_parallel=1, pipeline_parallel=1)
    megatron = panel.load_config("torchrun --nproc-per-node 4 pretrain_gpt.py --tensor-model-parallel-size 2")
    assert megatron.applied and not megatron.world_from_panel and panel.layout.world_size == 4
    bare = panel.load_config("--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2")
    assert bare.applied and bare.world_from_panel and panel.layout.world_size == 4
    too_small = LayoutPanel(world_size=2, local_world_size=2, tensor_parallel=1, pipeline_parallel=1,
                            sequence_data_parallel=1).load_config("--tensor-model-parallel-size 4")  # fmt: skip
    assert too_small.status == "error" and "the panel's 2 was used" in too_small.error


def test_loading_in_the_lab_moves_the_cluster_and_streams_panels_along():
    app = fastdist_lab.lab()
    try:
        result = app.layout_panel.load_config(MEGATRON_LINE)
        assert app.cluster_panel.layout == result.layout and app.streams_panel.layout == result.layout
    finally:
        app.close()


def test_the_groups_table_of_a_huge_world_says_so_instead_of_building_it():
    loaded = load_config(NO_LAYOUT_LINE)
    assert "EXPERT_DATA_PARALLEL_GROUP" in groups_table_html(loaded)
    huge = load_config(NO_LAYOUT_LINE.replace("--nnodes 2", "--nnodes 16384"))
    assert huge.layout is None and "too many to list" in groups_table_html(huge)
