"""Browser step for the lab's *Advisor*: open it, search a small set-up, choose a ranked row, and see the layout panel
(controls and ranks table) and the cost panel (its step view) take that row's layout and training set-up."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fastdist_lab import Layout

SEARCH = {"gpus": "16", "batch": "64"}
"""Llama 2 7B (the Advisor's default model) on 16 GPUs of 8 per node for 64 sequences: a search of about a second."""

WANTED = "llama2-7b, global batch 64 on 16 x dgx-h100"
"""What the status says once the search of both typed values has run (each value searches on its own: the status
names 16 GPUs with the default batch before it names the typed batch)."""

ROW = 1
"""The row chosen (the second best)."""


def row_fields(line: str) -> dict[str, Any]:
    """The sizes a ranked row's line shows (``cost.ranked_lines``: ``#  tp pp v sdp dp  first ...``)."""
    words = line.split()  # no-break spaces separate the columns: str.split() splits on them too
    return {
        "tensor_parallel": int(words[1]),
        "pipeline_parallel": int(words[2]),
        "sequence_data_parallel": int(words[4]),
        "pipeline_first": words[6] == "pipe",
        "schedule": words[9],
    }


def search_and_choose_a_row(
    page: Any,
    act: Callable[[Callable[[], None], str], None],
    wait_until: Callable[..., Any],
    reveal: Callable[[Any, Any], None],
    read_values: Callable[[Any], dict[str, int]],
    wait_table_shows: Callable[[Any, Layout], None],
) -> dict[str, Any]:
    """Unfold the Advisor, type the GPUs and the batch (each change searches again once the inputs rest), wait for the
    ranked rows, choose row ``ROW`` as a click does; then the layout controls, the pipeline-first box and the ranks
    table show its layout, and the cost panel its schedule and step time. Returns the row's sizes."""
    gpus = page.locator(".fdl-advisor-gpus input").first
    reveal(page, gpus)  # opens the folded Advisor
    batch = page.locator(".fdl-advisor-batch input").first
    for box, value in ((gpus, SEARCH["gpus"]), (batch, SEARCH["batch"])):
        act(lambda box=box, value=value: (box.fill(value), box.press("Enter")), f"advisor input {value}")
    options = page.locator(".fdl-advisor-rows select option")
    status = page.locator(".fdl-advisor-status").first
    wait_until(
        page,
        lambda: options.count() > ROW and WANTED in status.inner_text(),
        180,
        lambda: f"the ranked rows of 16 GPUs: {options.count()} rows; status {status.inner_text()!r}",
    )
    said = status.inner_text()
    assert "Traceback" not in said, said
    line = options.nth(ROW).inner_text()
    row = row_fields(line)
    rows = page.locator(".fdl-advisor-rows select").first
    act(lambda: rows.select_option(index=ROW), f"advisor row {ROW}")
    layout = Layout(world_size=16, local_world_size=8, tensor_parallel=row["tensor_parallel"],
                    pipeline_parallel=row["pipeline_parallel"], sequence_data_parallel=row["sequence_data_parallel"],
                    pipeline_first=row["pipeline_first"])  # fmt: skip
    expected = {name: getattr(layout, name) for name in read_values(page)}
    wait_until(page, lambda: read_values(page) == expected, 60,
               lambda: f"the layout controls to show row {ROW} ({line!r}): {read_values(page)}")  # fmt: skip
    assert page.locator(".fdl-pipeline-first input").first.is_checked() == row["pipeline_first"]
    wait_table_shows(page, layout)
    schedule = page.locator(".fdl-cost-schedule select").first
    headline = page.locator(".fdl-step-headline").first
    stepped = re.compile(r"Step time on dgx-h100: [\d.]+ s")
    wait_until(
        page,
        lambda: schedule.input_value() == row["schedule"] and stepped.search(headline.inner_text()),
        60,
        lambda: f"the cost panel to run {row['schedule']}: {schedule.input_value()!r}, {headline.inner_text()!r}",
    )
    return row
