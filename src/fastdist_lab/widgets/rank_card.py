"""What the panels show about the rank (or cell) you point at: the side card and the hover line.

Everything comes from the numbering core (``layout.coordinates``, ``layout.group_index`` / ``group_of``) and the
seed formulas (``generator_seeds(layout.config(rank))``); nothing is recomputed here.
"""

from __future__ import annotations

import html
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from ..experts import held_experts
from ..formatting import members_text, plural
from ..layout import Layout
from ..seeds import generator_seeds
from ..viz.aggregate import unit_label
from ..viz.grid import cell_label
from .panel_parts import TABLE_STYLE, html_table

CARD_HINT = (
    "<div style='color:#555;font-size:12px;line-height:1.4;max-width:360px'>Click a cell (or type a rank in "
    "<i>highlight rank</i>) to see that rank's coordinates, its groups in every dim and its seeds. Hover a cell to "
    "identify it; double-click a node of a big world to zoom in.</div>"
)
"""What the card says while no rank is selected."""

_COORDINATES = (
    ("tensor", "tensor_rank"),
    ("data", "data_rank"),
    ("pipeline", "pipeline_rank"),
    ("seq. data", "sequence_data_rank"),
    ("batch data", "batch_data_rank"),
)


def coordinates_text(layout: Layout, rank: int) -> str:
    """``t1 d0 p1 s0 b1`` (``s b`` only when sequence-data > 1; then ``e et ed``, the expert, expert-tensor and
    expert-data ranks, when the layout has experts): the grid cell's text (``viz.grid.cell_label``) on one line,
    without the rank."""
    return cell_label(layout, rank).partition("\n")[2].replace("\n", " ")


def expert_card_html(layout: Layout, rank: int, num_experts: int | None = None) -> str:
    """The experts part of ``rank``'s card ("" for a layout without experts): its expert, expert-tensor and
    expert-data ranks and which experts it holds (``held_experts``: the experts themselves when ``num_experts``
    is given, else its expert slot)."""
    if not layout.has_experts:
        return ""
    e = layout.expert_grid.coordinates_of(rank)
    holds = held_experts(e["expert"], layout.expert_parallel, num_experts)
    row = [e["expert"], e["expert_tensor"], e["expert_data"], holds]
    sizes = layout.expert_sizes
    title = (
        f"<div style='margin-top:6px'><b>experts</b> (EP {sizes['expert']} x ETP {sizes['expert_tensor']} "
        f"x EDP {sizes['expert_data']} per pipeline stage)</div>"
    )
    return title + html_table(["expert", "expert tensor", "expert data", "holds"], [row], "fdl-table fdl-card-experts")


def hover_text(layout: Layout, ranks: range, dim: str) -> str:
    """One line about the cell under the mouse: a rank and its coordinates, or a node and its groups of ``dim``."""
    c = layout.coordinates
    index = layout.group_index(dim)
    if len(ranks) == 1:
        rank = ranks.start
        return (
            f"rank {rank} · node {c['node'][rank]}, GPU {c['local_rank'][rank]} · {coordinates_text(layout, rank)}"
            f" · {dim} group {index[rank]}"
        )
    groups = np.unique(index[ranks.start : ranks.stop])
    where = unit_label(layout, ranks.start, len(ranks))
    listed = ", ".join(map(str, groups[:6])) + (", ..." if len(groups) > 6 else "")
    return f"{where}: ranks {ranks.start}-{ranks.stop - 1} · {plural(len(groups), dim + ' group')}: {listed}"


def card_html(layout: Layout, rank: int | None, dim: str, verification: Any = None) -> str:
    """The card of ``rank`` (``CARD_HINT`` for None) with what a ``Verification`` says of it, when one is given: what
    failed on it (``rank_failures``), and the dims whose groups were checked at all (a dim the check did not cover,
    such as an expert dim of a pool without expert groups, is "not checked" on the card rather than "ok")."""
    if rank is None:
        return CARD_HINT
    if verification is None:
        return rank_card_html(layout, rank, dim)
    checked = {row["dim"] for row in verification.rows}
    return rank_card_html(layout, rank, dim, verification.rank_failures()[rank], checked=checked)


def rank_card_html(
    layout: Layout,
    rank: int,
    dim: str,
    failures: Sequence[str] | None = None,
    step: int = 0,
    phase: str = "training",
    num_experts: int | None = None,
    checked: Collection[str] | None = None,
) -> str:
    """The card of ``rank``: where it is, its coordinates, its group of every dim (``layout.group_dims``: the
    expert dims too when the layout has experts; ``dim``'s row in bold; with the verdict of each when
    ``failures``, what failed on this rank, is given: "not checked" for a dim outside ``checked``, the dims the
    check covered, when that is given), its experts (``expert_card_html``) and its seeds."""
    c = layout.coordinates
    head = f"<div style='font-size:13px'><b>rank {rank}</b> · node {c['node'][rank]}, GPU {c['local_rank'][rank]}</div>"
    coordinates = html_table(
        [name for name, _ in _COORDINATES], [[int(c[column][rank]) for _, column in _COORDINATES]], "fdl-table"
    )
    verdicts = failures is not None
    rows = []
    for name in layout.group_dims:
        members = layout.group_of(name, rank)
        row = [name, int(layout.group_index(name)[rank]), members_text(members)]
        if verdicts:
            row.append("FAILED" if name in failures else "ok" if checked is None or name in checked else "not checked")
        rows.append(row)
    columns = ["dim", "group", "members"] + (["verdict"] if verdicts else [])
    groups = html_table(columns, rows, "fdl-table fdl-card-groups")
    bold = f"<tr><td>{html.escape(dim)}</td>"
    groups = groups.replace(bold, f"<tr style='font-weight:bold'><td>{html.escape(dim)}</td>", 1)
    seeds = generator_seeds(layout.config(rank), step, phase)
    seed_table = html_table(["generator", "seed"], [[name, str(value)] for name, value in seeds.items()], "fdl-table")
    extra = ""
    if verdicts:
        state = "every check of this rank passed" if not failures else f"failed: {', '.join(failures)}"
        color = "#1b7f3b" if not failures else "#b00020"
        extra = f"<div style='color:{color};margin:2px 0'>{html.escape(state)}</div>"
    return (
        TABLE_STYLE
        + "<div class='fdl-card' style='font-size:12px;line-height:1.4'>"
        + head
        + extra
        + coordinates
        + expert_card_html(layout, rank, num_experts)
        + f"<div style='margin-top:6px'><b>groups</b> (the {html.escape(dim)} group is outlined on the grid)</div>"
        + groups
        + f"<div style='margin-top:6px'><b>seeds</b> (step {step}, {html.escape(phase)})</div>"
        + seed_table
        + "</div>"
    )
