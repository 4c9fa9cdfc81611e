"""The ranked set-ups of ``search`` as text: one aligned line per set-up, in units, within 120 characters.

Written once for ``fastdist-lab search`` (its table) and the lab's *Advisor* (its rows): ``ranked_lines(result)`` is
the header and one line per row of ``LayoutSearch.frame``; ``search_summary(result)`` what was searched and found;
``RANKED_LEGEND`` what the short column names mean.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...formatting import format_bytes, plural
from ..evidence.trust import mfu_ceiling, outside_reason

if TYPE_CHECKING:
    from .layout_search import LayoutSearch

RANKED_ROWS = 20
"""Rows shown by default: ``fastdist-lab search --top`` and the lab's Advisor."""


def _seconds(value: float) -> str:
    decimals = 3 if value < 10 else 2 if value < 100 else 1 if value < 1000 else 0
    return f"{value:,.{decimals}f} s"


RANKED_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("tp", "tensor_parallel", str),
    ("pp", "pipeline_parallel", str),
    ("v", "virtual_pipeline_stages", str),
    ("sdp", "sequence_data_parallel", str),
    ("dp", "data_parallel", str),
    ("first", "pipeline_first", lambda v: "pipe" if v else "data"),
    ("mbs", "micro_batch_size", str),
    ("m", "num_microbatches", str),
    ("schedule", "schedule", str),
    ("recompute", "recompute", str),
    ("stp", "sequence_tensor_parallel", lambda v: "on" if v else "off"),
    ("zero", "zero_stage", str),
    ("step", "seconds", _seconds),
    ("tokens/s", "tokens_per_second", lambda v: f"{v:,.0f}"),
    ("MFU", "mfu", lambda v: f"{v:.1%}"),
    ("memory/GPU", "peak_memory_bytes", format_bytes),
)
"""``(title, frame column, how a value reads)`` of each column of ``ranked_lines``, after the row number ``#``.
(TFLOP/s per GPU is left to ``LayoutSearch.frame``: within one search it is MFU times one peak.)"""

EXPERT_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("ep", "expert_parallel", str),
    ("etp", "expert_tensor_parallel", str),
)
"""The columns ``ranked_lines`` adds after ``dp`` for a mixture of experts: expert and expert-tensor parallel."""

EXPERT_LEGEND = "; ep expert parallel, etp expert tensor parallel (the experts' sizes)"
"""What ``ranked_legend`` adds to ``RANKED_LEGEND`` for a mixture of experts."""

_TEXT_COLUMNS = ("first", "schedule", "recompute", "stp")
"""Columns aligned to the left; numbers are aligned to the right."""

_CLOSE = ("pp", "v", "sdp", "dp", "ep", "etp", "m", "band")
"""Columns set one separator (not two) after the one before: the layout's sizes and the batch read as groups."""

RANKED_LEGEND = (
    "tp tensor, pp pipeline, v virtual stages per pipeline rank, sdp sequence-data, dp data parallel (sdp "
    "included); first: the rank order, data-first or pipeline-first; mbs micro-batch size, m micro-batches per "
    "step; stp sequence tensor parallel; zero ZeRO stage; step: the predicted step time; MFU: model FLOPs over the "
    "GPUs' peak; memory/GPU: the most loaded pipeline rank"
)
"""What the short column titles of ``ranked_lines`` mean."""

TRUST_LEGEND = (
    "; band: where the measured step fell around the prediction on the nearest validation runs (? outside every "
    "validated run: same engine, GPU family, kind of parallelism, scale within 2x); =: a tie with the best row (their "
    "bands overlap); ! after the MFU: above every run measured on these GPUs, to doubt before trusting it first"
)
"""What ``ranked_legend`` adds for a frame with ``trust.TRUST_COLUMNS``: the band, the tie and the MFU marks."""


TOKENS_LEGEND = "; tokens/s (with one batch for every row, the inverse of the step) is in the JSON and CSV"
"""What ``ranked_legend`` adds where ``ranked_lines`` leaves tokens/s out to show the band in 120 columns."""


def _without_tokens(frame: Any) -> bool:
    return "band_low" in frame and frame["global_batch_size"].nunique() <= 1


def _band(low: float, high: float, validated: bool) -> str:
    return f"{low * 100:+.0f}/{high * 100:+.0f}%{'' if validated else '?'}"


def ranked_columns(result: LayoutSearch) -> tuple[tuple[str, str, Callable[[Any], str]], ...]:
    """``RANKED_COLUMNS``, with ``EXPERT_COLUMNS`` after ``dp`` when ``result``'s model is a mixture of experts."""
    if not result.model.is_moe:
        return RANKED_COLUMNS
    at = [title for title, _, _ in RANKED_COLUMNS].index("dp") + 1
    return (*RANKED_COLUMNS[:at], *EXPERT_COLUMNS, *RANKED_COLUMNS[at:])


def ranked_legend(result: LayoutSearch) -> str:
    """What the column titles of ``ranked_lines(result)`` mean (``RANKED_LEGEND``, and ``EXPERT_LEGEND`` for a
    mixture of experts)."""
    trust = TRUST_LEGEND if "band_low" in result.frame else ""
    trust += TOKENS_LEGEND if _without_tokens(result.frame) else ""
    return RANKED_LEGEND + (EXPERT_LEGEND if result.model.is_moe else "") + trust


def ranked_lines(result: LayoutSearch, rows: int | None = None, separator: str = " ") -> list[str]:
    """The header, then one line per set-up of ``result.frame`` (the first ``rows``, all by default): the row
    number and ``ranked_columns(result)``, aligned (numbers to the right), two ``separator`` between columns (one
    inside the layout's sizes and the batch). The lab passes a no-break space: its list would collapse ordinary
    spaces."""
    frame = result.frame if rows is None else result.frame.head(rows)
    columns = ranked_columns(result)
    if _without_tokens(frame):  # room for the band
        columns = tuple(column for column in columns if column[0] != "tokens/s")
    titles = ["#", *(title for title, _, _ in columns)]
    values = [frame[name].tolist() for _, name, _ in columns]
    cells = [titles]
    for index in range(len(frame)):
        cells.append([str(index), *(shown(column[index]) for (_, _, shown), column in zip(columns, values))])
    if "band_low" in frame:  # trust.TRUST_COLUMNS: the band after the step, the tie and MFU marks
        at, mfu = titles.index("step") + 1, titles.index("MFU")
        titles.insert(at, "band")
        bands = zip(frame["band_low"], frame["band_high"], frame["validated"], frame["tie"], frame["mfu_flag"])
        for row, (low, high, validated, tie, flag) in zip(cells[1:], bands):
            row[0] = ("=" if tie else "") + row[0]
            row[mfu] += "!" if flag else ""
            row.insert(at, _band(low, high, validated))
    widths = [max(len(row[i]) for row in cells) for i in range(len(titles))]
    lines = []
    for row in cells:
        line = ""
        for i, (text, width, title) in enumerate(zip(row, widths, titles)):
            if i:
                line += " " if title in _CLOSE else "  "
            line += text.ljust(width) if title in _TEXT_COLUMNS else text.rjust(width)
        lines.append(line.rstrip().replace(" ", separator))
    return lines


def search_summary(result: LayoutSearch) -> str:
    """One line: the GPUs and hardware searched, the rows shown of the set-ups that fit, and how many did not fit;
    then (``trust.TRUST_COLUMNS``) how many tie the best and whose MFU is above every measured run."""
    return _found(result) + _trusted(result)


def _trusted(result: LayoutSearch) -> str:
    frame = result.frame
    if not len(frame) or "tie" not in frame:
        return ""
    ties, flagged, outside = int(frame["tie"].sum()), int(frame["mfu_flag"].sum()), int((~frame["validated"]).sum())
    verb = "ties" if ties == 1 else "tie"
    text = f"; {plural(ties, 'row')} {verb} the best (=)" if ties else "; no row ties the best"
    if flagged:
        ceiling = mfu_ceiling(result.hardware.family)
        text += (f"; {plural(flagged, 'row')} with an MFU above every run measured on {result.hardware.family} "
                 f"({ceiling:.1%}), marked ! and kept in step order")  # fmt: skip
    if outside:
        reason = outside_reason(frame, result.fixed["engine"], result.hardware.family, result.gpus,
                                int(result.model.seq_length))  # fmt: skip
        text += f"; {plural(outside, 'row')} outside every validated run (?): the first, {reason}"
    return text


def _found(result: LayoutSearch) -> str:
    pruned = result.pruned
    fit = result.searched - result.dropped - pruned
    nodes = -(-result.gpus // result.gpus_per_node)
    where = f"{result.gpus:,} x {result.hardware.name} ({plural(nodes, 'node')} of {result.gpus_per_node})"
    if not len(result):
        return f"{where}: none of the {result.searched:,} set-ups searched fits the memory"
    if pruned:
        return (
            f"{where}: the best {len(result):,} of {result.searched:,} set-ups searched, ranked by step time "
            f"({result.dropped:,} do not fit the memory, {pruned:,} cannot rank: a floor of their step is above "
            f"the {ordinal(len(result))} best)"
        )
    return (
        f"{where}: the best {len(result):,} of {fit:,} set-ups that fit, ranked by step time ({result.searched:,} "
        f"searched, {result.dropped:,} do not fit the memory)"
    )


def ordinal(n: int) -> str:
    """``n`` as an English ordinal: 1st, 2nd, 3rd, 4th, 11th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
