"""Experts in the lab's panels: the rank card's experts and expert groups, the layout panel's expert controls and
dim chooser, the topology table's expert rows."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fastdist_lab import Layout, LayoutError  # noqa: E402
from fastdist_lab.config import DIM_NAMES  # noqa: E402
from fastdist_lab.experts import EXPERT_DIM_NAMES, held_experts  # noqa: E402
from fastdist_lab.formatting import members_text  # noqa: E402
from fastdist_lab.widgets import LayoutPanel  # noqa: E402
from fastdist_lab.widgets.layout_panel import ETP_DEFAULT, topology_html  # noqa: E402
from fastdist_lab.widgets.rank_card import expert_card_html, hover_text, rank_card_html  # noqa: E402

MOE = Layout(world_size=16, local_world_size=8, tensor_parallel=2, expert_parallel=4)  # EP 4 x ETP 2 x EDP 2


def card_groups(card: str) -> dict[str, str]:
    """dim -> members text of the card's groups table."""
    table = re.search(r"fdl-card-groups'>(.*?)</table>", card, re.S).group(1)
    return {
        dim: members
        for dim, _, members in re.findall(r"<td>([a-z_]+)</td><td>(\d+)</td><td>(\[.*?\][^<]*)</td>", table)
    }


def card_experts(card: str) -> list[str]:
    table = re.search(r"fdl-card-experts'>(.*?)</table>", card, re.S).group(1)
    return re.findall(r"<td>([^<]*)</td>", table)


# ------------------------------------------------------------------------------------------------ rank card
@st.composite
def moe_ranks(draw) -> tuple[Layout, int]:
    local = draw(st.sampled_from([4, 8]))
    world = local * draw(st.sampled_from([1, 2, 4]))
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.sampled_from([d for d in (1, 2) if (world // tp) % d == 0]))
    stage = world // pp
    etp = draw(st.sampled_from([None, 1, 2]))
    ep = draw(st.sampled_from([d for d in (2, 4) if stage % (d * (tp if etp is None else etp)) == 0] or [1]))
    layout = Layout(world_size=world, local_world_size=local, tensor_parallel=tp, pipeline_parallel=pp,
                    expert_parallel=ep, expert_tensor_parallel=etp, pipeline_first=draw(st.booleans()))  # fmt: skip
    return layout, draw(st.integers(0, world - 1))


@settings(max_examples=40, deadline=None)
@given(drawn=moe_ranks())
def test_the_card_lists_the_ranks_expert_groups_coordinates_and_slot(drawn):
    layout, rank = drawn
    card = rank_card_html(layout, rank, "tensor")
    groups = card_groups(card)
    assert list(groups) == list(layout.group_dims)
    for dim in layout.group_dims:
        members = layout.group_of(dim, rank)
        assert rank in members.tolist()
        assert groups[dim] == members_text(members), dim
    if not layout.has_experts:
        assert "fdl-card-experts" not in card and expert_card_html(layout, rank) == ""
        return
    expert, expert_tensor, expert_data, holds = card_experts(card)
    assert int(expert) == layout.dim_rank("expert")[rank]
    assert int(expert_tensor) == layout.dim_rank("expert_tensor")[rank]
    assert int(expert_data) == layout.dim_rank("expert_data")[rank]
    assert holds == f"expert slot {expert} of {layout.expert_parallel}"


def test_the_card_of_a_drawn_layout_names_the_members_and_the_experts_held():
    card = rank_card_html(MOE, 5, "expert", num_experts=16)
    groups = card_groups(card)
    assert groups["expert"] == "[1, 3, 5, 7]"  # same expert-tensor rank, the four expert ranks of stage 0
    assert groups["expert_tensor"] == "[4, 5]"
    assert groups["expert_data"] == "[5, 13]"
    assert groups["expert_tensor_and_expert"] == "[0, 1, 2, 3, 4, 5, 6, 7]"
    assert card_experts(card) == ["2", "1", "0", "experts 8 .. 11 of 16"]
    assert "<tr style='font-weight:bold'><td>expert</td>" in card  # the dim the grid is coloured by
    assert "EP 4 x ETP 2 x EDP 2" in card
    assert card_experts(rank_card_html(MOE, 5, "expert"))[-1] == "expert slot 2 of 4"
    assert "e2 et1 ed0" in hover_text(MOE, range(5, 6), "expert") and "expert group 1" in hover_text(
        MOE, range(5, 6), "expert"
    )


def test_a_big_expert_group_is_abbreviated_as_dense_groups_are():
    big = Layout(world_size=256, local_world_size=8, tensor_parallel=1, expert_parallel=2)
    groups = card_groups(rank_card_html(big, 0, "tensor"))
    assert (
        groups["expert_data"] == members_text(big.group_of("expert_data", 0)) and "(128 ranks)" in groups["expert_data"]
    )


def test_the_held_experts_in_words_and_a_bad_number_of_experts():
    assert held_experts(0, 4, 8) == "experts 0 .. 1 of 8"
    assert held_experts(3, 4, 4) == "expert 3 of 4"
    assert held_experts(1, 2) == "expert slot 1 of 2"
    for bad in (6, 0, True, "8"):
        with pytest.raises(LayoutError, match=f"num_experts={bad!r} must be a positive multiple of expert_parallel=4"):
            held_experts(0, 4, bad)
    with pytest.raises(LayoutError, match="num_experts=6"):
        rank_card_html(MOE, 0, "tensor", num_experts=6)


def test_a_dense_card_is_as_before():
    dense = Layout(world_size=16, local_world_size=8, tensor_parallel=2)
    card = rank_card_html(dense, 5, "tensor")
    assert list(card_groups(card)) == list(DIM_NAMES)
    assert "expert" not in card and "e2" not in hover_text(dense, range(5, 6), "tensor")


# ------------------------------------------------------------------------------------------------ panel
def test_the_panel_has_expert_controls_offering_the_sizes_that_divide_a_stage():
    panel = LayoutPanel(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2,
                        sequence_data_parallel=1)  # fmt: skip
    assert "fdl-expert-parallel" in panel.expert_parallel._dom_classes
    assert "fdl-expert-tensor-parallel" in panel.expert_tensor_parallel._dom_classes
    assert [v for _, v in panel.expert_parallel.options] == [1, 2, 4]  # a stage of 8 ranks / ETP 2
    assert panel.expert_tensor_parallel.options[0] == (ETP_DEFAULT, 0) and panel.expert_tensor_parallel.value == 0
    assert [v for _, v in panel.expert_tensor_parallel.options] == [0, 1, 2, 4, 8]
    assert panel.values()["expert_parallel"] == 1 and panel.values()["expert_tensor_parallel"] is None
    assert list(panel.dim.options) == list(DIM_NAMES)  # no expert dims while EP is 1


def test_choosing_ep_makes_an_expert_layout_offers_the_expert_dims_and_draws_them():
    panel = LayoutPanel(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=1,
                        sequence_data_parallel=1)  # fmt: skip
    dense_png = panel.png
    panel.expert_parallel.value = 4
    assert panel.layout == MOE.replace(backend="gloo")
    assert list(panel.dim.options) == [*DIM_NAMES, *EXPERT_DIM_NAMES]
    assert panel.dim.value == "tensor" and panel.png != dense_png  # the cells now show expert coordinates too
    tensor_png = panel.png
    panel.dim.value = "expert"
    panel.select_rank(5)
    assert panel.png != tensor_png and panel.layout.group_of("expert", 5).tolist() == [1, 3, 5, 7]
    assert card_experts(panel.card.value)[:3] == ["2", "1", "0"]
    assert card_groups(panel.card.value)["expert"] == "[1, 3, 5, 7]"
    assert "<b>expert</b>: 4 groups of 4 ranks" in panel.groups_table.value
    panel.expert_parallel.value = 1  # back to dense: the expert dims go, the grid is coloured by tensor
    assert list(panel.dim.options) == list(DIM_NAMES) and panel.dim.value == "tensor"
    assert "fdl-card-experts" not in panel.card.value


def test_the_panel_refuses_a_bad_ep_or_etp_with_one_line_naming_the_value():
    panel = LayoutPanel(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2,
                        sequence_data_parallel=1)  # fmt: skip
    good_png = panel.png
    panel.expert_parallel.value = 3  # not offered: set from Python, explained
    assert panel.layout is None and panel.png == good_png
    assert panel.error == (
        "expert_tensor_parallel=2 * expert_parallel=3 = 6 must divide the ranks of one pipeline stage, "
        "tensor_parallel * data_parallel = 8"
    )
    assert panel.error in panel.message.value and "\n" not in panel.error
    panel.set(expert_parallel=4, expert_tensor_parallel=4)
    assert panel.layout is None and "expert_tensor_parallel=4 * expert_parallel=4 = 16" in panel.error
    panel.set(expert_tensor_parallel=None)
    assert panel.error == "" and panel.layout.expert_sizes == {"expert_tensor": 2, "expert": 4, "expert_data": 1}
    with pytest.raises(Exception, match="must be > 0"):
        panel.expert_parallel.value = -2


def test_panel_state_round_trips_with_the_expert_fields():
    layout = Layout(world_size=32, local_world_size=8, tensor_parallel=2, pipeline_parallel=2,
                    expert_parallel=4, expert_tensor_parallel=1, tp_seed_shift=7)  # fmt: skip
    panel = LayoutPanel.from_layout(layout)
    assert panel.layout == layout.replace(backend="gloo")
    values = panel.values()
    assert values["expert_parallel"] == 4 and values["expert_tensor_parallel"] == 1
    again = LayoutPanel()
    again.other_fields = dict(panel.other_fields)
    again.set(**values)
    assert again.layout == panel.layout and again.values() == values
    loaded = LayoutPanel().load_config(
        "torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
        "--pipeline-model-parallel-size 2 --expert-model-parallel-size 4"
    )
    assert loaded.applied and loaded.layout.expert_parallel == 4


# ------------------------------------------------------------------------------------------------ topology
def test_the_topology_says_which_expert_groups_leave_a_node():
    layout = Layout(world_size=32, local_world_size=8, tensor_parallel=2, expert_parallel=4)  # EDP 4: across nodes
    frame = layout.topology()
    assert list(frame.index) == [*DIM_NAMES, *EXPERT_DIM_NAMES]
    assert frame.loc["expert"].tolist() == [4, 8, 1, True]  # [0, 2, 4, 6]: one node
    assert frame.loc["expert_tensor"].tolist() == [2, 16, 1, True]
    assert frame.loc["expert_data"].tolist() == [4, 8, 4, False]  # [0, 8, 16, 24]: four nodes
    assert frame.loc["expert_tensor_and_expert"].tolist() == [8, 4, 1, True]
    for dim in EXPERT_DIM_NAMES:  # the columns are what the groups say, not a constant
        groups = layout.groups(dim)
        nodes = {int(m) // 8 for m in groups[0]}
        assert frame.loc[dim, "nodes_spanned"] >= len(nodes)
    markup = topology_html(layout)
    assert "<td>expert_data</td><td>4</td><td>8</td><td>4</td><td>False</td>" in markup
    dense = Layout(world_size=32, local_world_size=8, tensor_parallel=2)
    assert list(dense.topology().index) == list(DIM_NAMES) and "expert" not in topology_html(dense)


# ------------------------------------------------------------------------------------------------ verdicts
def moe_verification(layout: Layout, rank: int):
    """``layout``'s verification as its ranks' real checks report it, ``rank``'s tensor all-gather wrong."""
    from fastdist_lab.checks.group_check import group_problems
    from fastdist_lab.runtime import RankResult, RankResults, Verification
    from fastdist_lab.runtime.verification import expected_groups

    records = []
    for r in range(layout.world_size):
        dims = []
        for name, dim in layout.config(r).distributed_dims.items():
            members = list(dim.global_ranks)
            gathered = members[::-1] if r == rank and name == "tensor" else members
            dims.append({"dim": name, "members": members, "gathered": gathered, "sum": sum(members)})
        records.append(RankResult(r, "ok", {"rank": r, "dims": dims, "seeds_ok": True}))
    expected = {dim: groups for dim, groups in expected_groups(layout).items() if dim in DIM_NAMES}
    return Verification.from_rank_rows(expected, RankResults(records), layout.fields(), "gloo", judge=group_problems)


def card_verdicts(card: str) -> dict[str, str]:
    table = re.search(r"fdl-card-groups'>(.*?)</table>", card, re.S).group(1)
    return dict(re.findall(r"<td>([a-z_]+)</td><td>\d+</td><td>[^<]*</td><td>([^<]*)</td>", table))


def test_a_card_says_not_checked_for_the_dims_a_check_did_not_cover():
    verdicts = card_verdicts(rank_card_html(MOE, 5, "tensor", ["tensor"], checked={"tensor", "data"}))
    assert verdicts["tensor"] == "FAILED" and verdicts["data"] == "ok" and verdicts["pipeline"] == "not checked"
    assert {verdicts[dim] for dim in EXPERT_DIM_NAMES} == {"not checked"}
    assert set(card_verdicts(rank_card_html(MOE, 5, "tensor", [])).values()) == {"ok"}  # nothing said: as before


def test_the_panel_card_of_a_verified_expert_layout_does_not_call_unchecked_expert_groups_ok():
    panel = LayoutPanel.from_layout(MOE)
    verification = moe_verification(panel.layout, rank=5)
    panel.show_verification(verification)
    panel.select_rank(5)
    verdicts = card_verdicts(panel.card.value)
    checked = {row["dim"] for row in verification.rows}
    assert verdicts["tensor"] == "FAILED"
    for dim in panel.layout.group_dims:
        if dim not in checked:
            assert verdicts[dim] == "not checked", dim
        elif dim != "tensor":
            assert verdicts[dim] in ("ok", "FAILED"), dim
    assert {verdicts[dim] for dim in EXPERT_DIM_NAMES} == {"not checked"}  # the verification covers dense dims only


def test_an_advisor_row_sets_the_expert_controls_too():
    """A dense row chosen in the Advisor clears the experts a user had set (no stale EP on the chosen layout)."""
    import fastdist_lab

    app = fastdist_lab.lab()
    app.layout_panel.set(expert_parallel=2)
    assert app.layout_panel.layout.has_experts
    advisor = app.advisor_panel
    for name, value in {"hardware": "h100-sxm-80gb", "top": 4, "global_batch_size": 64, "gpus": 16}.items():
        getattr(advisor, name).value = value
    advisor.select(0)
    app.flush()
    shown, chosen = app.layout_panel.layout, advisor.choice.layout
    assert shown.expert_sizes == chosen.expert_sizes  # ETP equal to the tensor size shows as "= tensor" (None)
    same = {name: value for name, value in chosen.fields().items() if name != "expert_tensor_parallel"}
    assert {k: v for k, v in shown.fields().items() if k != "expert_tensor_parallel"} == {**same, "backend": "gloo"}
    assert app.layout_panel.values()["expert_parallel"] == 1 and not app.layout_panel.layout.has_experts
