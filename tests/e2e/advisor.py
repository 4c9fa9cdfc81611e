"""Browser step for the lab's *Advisor*: open it, search a small set-up, choose a ranked row, and see the layout panel
(controls and ranks table) and the cost panel (its step view) take that row's layout and training set-up; the engine
dropdowns are there, and another engine in the cost panel changes its headline."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fastdist_lab import Layout
from fastdist_lab.cost import ENGINES

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
    ranked rows (with a band column and the ties said), choose row ``ROW`` as a click does; then the layout controls,
    the pipeline-first box and the ranks table show its layout, and the cost panel its schedule and step time with its
    error band. Returns the row's sizes."""
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
    assert "the best (=)" in said or "no row ties the best" in said, said  # issue 27, item 5: ties are said
    header = page.locator(".fdl-advisor-header").first.inner_text()
    assert "band" in header.split(), header  # each row's error band is a column
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
    stepped = re.compile(r"Step time on dgx-h100: [\d.]+ s.*(validated runs nearby|outside validated runs)", re.S)
    wait_until(
        page,
        lambda: schedule.input_value() == row["schedule"] and stepped.search(headline.inner_text()),
        60,
        lambda: f"the cost panel to run {row['schedule']}: {schedule.input_value()!r}, {headline.inner_text()!r}",
    )
    return row


ENGINE = "fsdp2"
"""The engine chosen in the cost panel after the Advisor's row: its step time and error band differ from Megatron's."""


def choose_an_engine_and_check(
    page: Any,
    act: Callable[[Callable[[], None], str], None],
    wait_until: Callable[..., Any],
    reveal: Callable[..., Any],
) -> str:
    """After ``search_and_choose_a_row``: the Advisor's and the cost panel's engine dropdowns are visible, both on
    Megatron (the row's engine); choosing ``ENGINE`` in the cost panel changes its headline (the step time and the
    error band follow the engine). Returns the new headline."""
    from playwright.sync_api import expect

    advisor_engine = page.locator(".fdl-advisor-engine select").first
    cost_engine = page.locator(".fdl-cost-engine select").first
    for dropdown in (advisor_engine, cost_engine):
        reveal(page, dropdown)
        expect(dropdown).to_be_visible()
        assert dropdown.input_value() == "megatron", dropdown.input_value()
        offered = [option.inner_text() for option in dropdown.locator("option").all()]
        assert offered == list(ENGINES), offered
    headline = page.locator(".fdl-step-headline").first
    before = headline.inner_text()
    act(lambda: cost_engine.select_option(ENGINE), f"cost engine {ENGINE}")
    stepped = re.compile(r"Step time on dgx-h100: [\d.]+ s")
    wait_until(
        page,
        lambda: headline.inner_text() != before and stepped.search(headline.inner_text()),
        60,
        lambda: f"the cost panel's headline to follow engine {ENGINE}: {headline.inner_text()!r} (was {before!r})",
    )
    status = page.locator(".fdl-cost-status").first.inner_text()
    assert "Error" not in status and "Traceback" not in status, status
    return headline.inner_text()


MOE_MODEL = "mixtral-8x7b"
"""The mixture-of-experts preset the MoE step searches (16 GPUs, batch 64: every row has experts; about 5 s here)."""

MOE_WANTED = f"{MOE_MODEL}, global batch 64 on 16 x dgx-h100"
"""What the status says once the MoE preset's search has run (the GPUs and batch typed by the step before)."""

SELECTED_LABEL = """(el) => {
  const s = el.matches('select') ? el : el.querySelector('select');
  return s && s.selectedIndex >= 0 ? s.options[s.selectedIndex].textContent.trim() : null;
}"""
"""JavaScript: the label of the option a dropdown shows (null when none)."""

EXPERT_CONTROLS = ("fdl-expert-parallel", "fdl-expert-tensor-parallel")
"""The CSS classes of the layout panel's expert and expert-tensor controls."""


def fields_by_header(header: str, line: str) -> dict[str, str]:
    """A ranked row's words by column title, up to the schedule (``cost.ranked_lines``' header, the expert columns
    ``ep`` / ``etp`` included for a mixture of experts; the step time's unit, later, would shift the words)."""
    titles = header.split()
    upto = titles.index("schedule") + 1
    return dict(zip(titles[:upto], line.split()[:upto]))


def expert_labels(page: Any) -> tuple[str, str]:
    """What the layout panel's expert and expert-tensor controls show (``"4"``, ``"= tensor"``; the browser's
    no-break spaces read as spaces)."""
    labels = (page.locator(f".{css}").first.evaluate(SELECTED_LABEL) for css in EXPERT_CONTROLS)
    ep, etp = ((label or "").replace("\u00a0", " ") for label in labels)
    return ep, etp


def search_moe_and_choose_an_expert_row(
    page: Any,
    act: Callable[[Callable[[], None], str], None],
    wait_until: Callable[..., Any],
    read_values: Callable[[Any], dict[str, int]],
    wait_table_shows: Callable[[Any, Layout], None],
) -> dict[str, Any]:
    """After ``search_and_choose_a_row``: choose the MoE preset ``MOE_MODEL`` in the Advisor (it searches again, the
    GPUs and batch kept), wait for its rows (with ``ep`` / ``etp`` columns), choose the first row whose EP > 1; then
    the layout panel's controls, its expert and expert-tensor controls and the ranks table show that row, and the cost
    panel its model, its layout's name with ``ep<EP> etp<ETP>`` and a step time. Returns the row's words by title."""
    model = page.locator(".fdl-advisor-model select").first
    act(lambda: model.select_option(MOE_MODEL), f"advisor model {MOE_MODEL}")
    options = page.locator(".fdl-advisor-rows select option")
    status = page.locator(".fdl-advisor-status").first
    header = page.locator(".fdl-advisor-header pre").first
    wait_until(
        page,
        lambda: options.count() and MOE_WANTED in status.inner_text() and "etp" in header.inner_text().split(),
        120,
        lambda: f"the ranked rows of {MOE_MODEL}: {options.count()} rows; status {status.inner_text()!r}",
    )
    assert "Traceback" not in status.inner_text()
    titles = header.inner_text()
    rows = [fields_by_header(titles, options.nth(i).inner_text()) for i in range(options.count())]
    index = next((i for i, row in enumerate(rows) if int(row["ep"]) > 1), None)
    assert index is not None, f"no row of {MOE_MODEL} has EP > 1: {rows}"
    row = rows[index]
    chooser = page.locator(".fdl-advisor-rows select").first
    act(lambda: chooser.select_option(index=index), f"advisor MoE row {index}")
    tp, ep, etp = int(row["tp"]), int(row["ep"]), int(row["etp"])
    layout = Layout(world_size=16, local_world_size=8, tensor_parallel=tp, pipeline_parallel=int(row["pp"]),
                    sequence_data_parallel=int(row["sdp"]), pipeline_first=row["first"] == "pipe",
                    expert_parallel=ep, expert_tensor_parallel=etp)  # fmt: skip
    expected = {name: getattr(layout, name) for name in read_values(page)}

    def shows_the_experts() -> bool:
        ep_label, etp_label = expert_labels(page)
        return ep_label == str(ep) and (etp_label == str(etp) or (etp_label == "= tensor" and etp == tp))

    wait_until(
        page,
        lambda: read_values(page) == expected and shows_the_experts(),
        60,
        lambda: f"the layout controls to show MoE row {index}: {read_values(page)}, {expert_labels(page)}",
    )
    assert page.locator(".fdl-pipeline-first input").first.is_checked() == (row["first"] == "pipe")
    wait_table_shows(page, layout)
    cost_status = page.locator(".fdl-cost-status").first
    cost_model = page.locator(".fdl-cost-model select").first
    headline = page.locator(".fdl-step-headline").first
    named = f"dp{layout.data_parallel}"
    named += f" (sdp{layout.sequence_data_parallel})" if layout.sequence_data_parallel > 1 else ""
    named += f" ep{ep} etp{etp}"
    wait_until(
        page,
        lambda: (
            cost_model.input_value() == MOE_MODEL
            and named in cost_status.inner_text()
            and re.search(r"Step time on dgx-h100: [\d.]+ s", headline.inner_text())
        ),
        60,
        lambda: f"the cost panel to price {named}: {cost_model.input_value()!r}, {cost_status.inner_text()!r}",
    )
    return row
