"""The lab in a real browser: JupyterLab + Debian's Chromium, a real kernel and real gloo workers.

Opens ``notebooks/00_quickstart.ipynb`` in a private JupyterLab, runs every cell from the Run menu and drives
the panel ``fastdist_lab.lab()`` shows through its DOM (the ``fdl-*`` CSS classes of the widgets): the grid
picture and the ranks table follow the tensor-parallel control, an impossible combination shows the readable
error, a 4-rank gloo cluster started from the cluster panel verifies every group, and a Megatron-LM launch line
pasted into the panel's *paste a config* box becomes the panel's layout, and a row of the *Advisor*'s search becomes
the layout and cost panels' set-up (a dense model's row, whose engine the cost panel's dropdown then changes, then a
mixture of experts' row with EP > 1: the layout panel's expert controls and the cost panel show its EP and ETP).
Each step is saved as a screenshot in the folder printed at the end of the run.

Run: ``python -m pytest tests/e2e`` (Chromium from ``scripts/install_browser.sh``; skipped without it unless
``CI`` is set).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from fastdist_lab import Layout, LayoutError

from .advisor import choose_an_engine_and_check, search_and_choose_a_row, search_moe_and_choose_an_expert_row
from .conftest import JupyterLab, skip_or_fail
from .paste import paste_config_and_check
from .pointing import check_big_worlds, click_cell_and_check, hover_cell_and_check, read_verdicts

pytestmark = pytest.mark.timeout(900)

CONTROLS = {
    "world_size": "fdl-world-size",
    "local_world_size": "fdl-local-world-size",
    "tensor_parallel": "fdl-tensor-parallel",
    "pipeline_parallel": "fdl-pipeline-parallel",
    "sequence_data_parallel": "fdl-sequence-data-parallel",
}
DEFAULT = {
    "world_size": 8,
    "local_world_size": 8,
    "tensor_parallel": 2,
    "pipeline_parallel": 2,
    "sequence_data_parallel": 2,
}
CLUSTER_TARGET = {
    "world_size": 4,
    "local_world_size": 4,
    "tensor_parallel": 2,
    "pipeline_parallel": 1,
    "sequence_data_parallel": 2,
}
# Short column titles the ranks table may use for Layout.ranks columns.
RANK_HEADERS = {
    "local": "local_rank",
    "tensor": "tensor_rank",
    "data": "data_rank",
    "pipeline": "pipeline_rank",
    "seq. data": "sequence_data_rank",
    "sequence data": "sequence_data_rank",
    "batch data": "batch_data_rank",
}
RUNNING = re.compile(r"(?<!not )\b(running|ready)\b", re.IGNORECASE)

# JavaScript run in the page -------------------------------------------------------------------------------

READ_CONTROL = """(el) => {
  const c = el.matches('select, input') ? el : el.querySelector('select, input');
  if (!c) return null;
  const out = {tag: c.tagName.toLowerCase(), type: c.type, disabled: c.disabled, value: c.value,
               checked: c.checked, options: [], label: null};
  if (out.tag === 'select') {
    out.options = Array.from(c.options).map(o => o.textContent.trim());
    out.label = c.selectedIndex >= 0 ? c.options[c.selectedIndex].textContent.trim() : null;
  }
  return out;
}"""

READ_TABLE = """(el) => {
  const table = el.tagName === 'TABLE' ? el : el.querySelector('table');
  if (!table) return null;
  const text = c => c.textContent.trim();
  let header = [];
  for (const r of table.querySelectorAll('thead tr')) {
    const cells = Array.from(r.children).map(text);
    if (cells.filter(Boolean).length > header.filter(Boolean).length) header = cells;
  }
  const rows = Array.from(table.querySelectorAll('tbody tr')).map(r => Array.from(r.children).map(text));
  return {header: header, rows: rows};
}"""

# A digest of the pixels, so "the picture changed" means the drawing changed, not just its URL.
PICTURE_DIGEST = """(img) => {
  if (!img.complete || !img.naturalWidth) return null;
  const canvas = document.createElement('canvas');
  canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
  const ctx = canvas.getContext('2d');
  ctx.drawImage(img, 0, 0);
  const data = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
  let h1 = 0x811c9dc5, h2 = 0;
  for (let i = 0; i < data.length; i += 1) {
    h1 = Math.imul(h1 ^ data[i], 16777619) >>> 0;
    h2 = (h2 + data[i] * (i % 251 + 1)) >>> 0;
  }
  return canvas.width + 'x' + canvas.height + ':' + h1.toString(16) + ':' + h2.toString(16);
}"""

# Marks the tab or accordion header that shows the outermost hidden ancestor of an element.
MARK_OPENER = """(el) => {
  const hidden = [];
  for (let n = el; n && n !== document.body; n = n.parentElement) {
    if (n.classList.contains('lm-mod-hidden') || getComputedStyle(n).display === 'none') hidden.push(n);
  }
  if (!hidden.length) return 'visible';
  const node = hidden[hidden.length - 1];
  const parent = node.parentElement;
  let opener = null;
  const stacked = ['lm-StackedPanel', 'widget-tab-contents', 'jupyter-widget-TabPanel-tabContents'];
  if (parent && stacked.some(c => parent.classList.contains(c))) {
    const index = Array.from(parent.children).indexOf(node);
    const bar = parent.parentElement && parent.parentElement.querySelector(':scope > .lm-TabBar');
    if (bar) opener = bar.querySelectorAll('.lm-TabBar-tab')[index] || null;
  }
  if (!opener) {
    const collapse = node.closest('.jupyter-widget-Collapse');
    if (collapse) opener = collapse.querySelector(':scope > .jupyter-widget-Collapse-header');
  }
  if (!opener) return 'no opener';
  opener.setAttribute('data-fdl-e2e-opener', '1');
  return 'marked';
}"""


ANCESTRY = """(el) => {
  const out = [];
  for (let n = el; n && n !== document.body && out.length < 8; n = n.parentElement) {
    const classes = Array.from(n.classList).join('.');
    out.push(n.tagName.toLowerCase() + '.' + classes + ' display=' + getComputedStyle(n).display);
  }
  return out.join(' < ');
}"""


# Helpers ----------------------------------------------------------------------------------------------------


def wait_until(page: Any, check: Callable[[], Any], timeout: float, what: Callable[[], str] | str) -> Any:
    """Poll ``check`` (letting the page run in between) until it returns something truthy; else fail."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {detail}")
        page.wait_for_timeout(250)


class Shots:
    """Numbered screenshots of the page, the element of interest scrolled into view."""

    def __init__(self, page: Any, folder: Path) -> None:
        self.page, self.folder, self.count = page, folder, 0

    def __call__(self, name: str, focus: Any = None) -> Path:
        self.count += 1
        if focus is not None:
            reveal(self.page, focus)
            focus.scroll_into_view_if_needed()
        self.page.wait_for_timeout(300)  # let the last redraw paint
        path = self.folder / f"{self.count:02d}_{name}.png"
        self.page.screenshot(path=str(path))
        return path


def reveal(page: Any, locator: Any) -> None:
    """Make ``locator`` visible by selecting the widget tabs / opening the accordions that hide it."""
    state = "not tried"
    for _ in range(4):
        if locator.is_visible():
            return
        state = locator.evaluate(MARK_OPENER)
        if state != "marked":
            break
        opener = page.locator("[data-fdl-e2e-opener]")
        opener.click()
        opener.evaluate("el => el.removeAttribute('data-fdl-e2e-opener')")
        page.wait_for_timeout(200)
    assert locator.is_visible(), f"cannot make {locator} visible ({state}); ancestors: " + locator.evaluate(ANCESTRY)


def control(page: Any, field: str) -> Any:
    """The widget element of a layout control (exactly one in the page)."""
    locator = page.locator(f".{CONTROLS[field]}")
    assert locator.count() == 1, f"expected one .{CONTROLS[field]} in the page, found {locator.count()}"
    return locator


def leading_int(text: str | None) -> int | None:
    """The integer a control label starts with ("4", "4 ranks" -> 4)."""
    match = re.match(r"\s*(\d+)", text or "")
    return int(match.group(1)) if match else None


def read_control(page: Any, field: str) -> dict:
    """Current value and offered values of a layout control."""
    info = control(page, field).evaluate(READ_CONTROL)
    assert info is not None, f".{CONTROLS[field]} holds no select or input"
    if info["tag"] == "select":
        info["int"] = leading_int(info["label"])
        info["choices"] = [leading_int(o) for o in info["options"]]
    else:
        info["int"] = leading_int(info["value"])
        info["choices"] = None  # free text: any integer
    return info


def read_values(page: Any) -> dict[str, int]:
    """The layout the controls currently show."""
    return {field: read_control(page, field)["int"] for field in CONTROLS}


def set_control(page: Any, lab: JupyterLab, field: str, value: int) -> None:
    """Choose ``value`` in a layout control the way a user does (select an option / type and press Enter),
    and wait until the kernel has handled the change."""
    since = quiet_kernel(page, lab)
    info = read_control(page, field)
    element = control(page, field)
    if info["tag"] == "select":
        assert value in info["choices"], f"{field}: {value} is not offered ({info['options']})"
        box = element if element.evaluate("el => el.matches('select')") else element.locator("select").first
        box.select_option(index=info["choices"].index(value))
    else:
        box = element if element.evaluate("el => el.matches('input')") else element.locator("input").first
        box.fill(str(value))
        box.press("Enter")
        box.evaluate("el => el.blur()")
    kernel_handled(page, lab, since, f"{field}={value}")


def quiet_kernel(page: Any, lab: JupyterLab, quiet: float = 1.0, timeout: float = 120) -> str:
    """Wait until the kernel is idle and has sent nothing for ``quiet`` seconds (debounced redraws done);
    return its ``last_activity``, the mark from which the next action's handling is recognised."""
    deadline = time.monotonic() + timeout
    kernel = lab.kernel()
    since, mark = kernel["last_activity"], time.monotonic()
    while time.monotonic() < deadline:
        page.wait_for_timeout(200)
        kernel = lab.kernel()
        if kernel["last_activity"] != since or kernel["execution_state"] != "idle":
            since, mark = kernel["last_activity"], time.monotonic()
        elif time.monotonic() - mark >= quiet:
            return since
    raise AssertionError(f"the kernel never went quiet within {timeout:.0f} s: {kernel}")


def kernel_handled(page: Any, lab: JupyterLab, since: str, what: str, timeout: float = 120) -> None:
    """Wait until the kernel has handled what the page just sent: active after ``since``, idle again now."""

    def done() -> bool:
        kernel = lab.kernel()
        return kernel["last_activity"] != since and kernel["execution_state"] == "idle"

    wait_until(page, done, timeout, lambda: f"the kernel to handle {what}: {lab.kernel()}")
    page.wait_for_timeout(300)  # the widget updates sent before "idle" reach the page


def read_table(locator: Any) -> dict | None:
    """``{"header": [...], "rows": [[...], ...]}`` of the first table inside ``locator`` (None if none)."""
    if locator.count() == 0:
        return None
    return locator.first.evaluate(READ_TABLE)


def valid_layout(values: dict[str, int]) -> Layout | None:
    """The Layout of these control values, or None when it is impossible."""
    try:
        return Layout(**values)
    except LayoutError:
        return None


def table_mismatch(table: dict | None, layout: Layout) -> str:
    """Why the ranks table does not show ``layout`` ("" when it does)."""
    if table is None:
        return "no table"
    header, rows = table["header"], table["rows"]
    if len(rows) != layout.world_size:
        return f"{len(rows)} rows, expected {layout.world_size}"
    columns = {h: RANK_HEADERS.get(h, h) for h in header if RANK_HEADERS.get(h, h) in layout.ranks.columns}
    if "tensor_rank" not in columns.values():
        return f"no tensor column in {header}"
    for position, row in enumerate(rows):
        rank = int(row[0]) if row and row[0].isdigit() else position
        for shown_name, column in columns.items():
            shown, expected = row[header.index(shown_name)], str(int(layout.ranks.loc[rank, column]))
            if shown != expected:
                return f"rank {rank} {column}: shows {shown}, expected {expected}"
    return ""


def tensor_column(table: dict) -> list[str]:
    """The tensor-rank column of a ranks table."""
    header = [RANK_HEADERS.get(h, h) for h in table["header"]]
    index = header.index("tensor_rank")
    return [row[index] for row in table["rows"]]


def check_verified_groups(table: dict, layout: Layout) -> None:
    """When the verification lists ``dim`` and ``members``: exactly the layout's groups of the dims it shows,
    and at least the tensor, pipeline and data dims."""
    header = table["header"]
    if "dim" not in header or "members" not in header:
        return
    dim, members = header.index("dim"), header.index("members")
    shown = {(row[dim], tuple(int(m) for m in re.findall(r"\d+", row[members]))) for row in table["rows"]}
    dims = {name for name, _ in shown}
    assert {"tensor", "pipeline", "data"} <= dims, f"the verification shows only the dims {sorted(dims)}"
    expected = {(name, tuple(group)) for name in dims for group in layout.groups(name).tolist()}
    assert shown == expected, f"verified groups differ from the layout's: {sorted(shown ^ expected)}"


def picture(page: Any) -> Any:
    """The grid picture: an ``img`` inside ``.fdl-grid`` (or the ``img.fdl-grid`` itself)."""
    return page.locator(".fdl-grid img, img.fdl-grid").first


def picture_digest(page: Any) -> tuple[str, str] | None:
    """(src, pixel digest) of the grid picture, None while it is missing or not loaded."""
    img = picture(page)
    if img.count() == 0:
        return None
    digest = img.evaluate(PICTURE_DIGEST)
    return (img.get_attribute("src") or "", digest) if digest else None


def error_text(page: Any) -> str:
    """The text the panel shows in ``.fdl-error`` ("" when valid)."""
    return control_text(page.locator(".fdl-error"))


def control_text(locator: Any) -> str:
    """Visible text of the first match ("" if none)."""
    return locator.first.inner_text().strip() if locator.count() else ""


def outputs_text(page: Any) -> str:
    """All output text of the notebook, to explain a failure."""
    return "\n".join(page.locator(".jp-OutputArea-output").all_inner_texts())[-3000:]


def run_menu_command(page: Any, menu: str, command: str) -> None:
    """Click a JupyterLab main-menu entry (menu title, Lumino data-command)."""
    page.locator(".lm-MenuBar-item", has_text=re.compile(rf"^\s*{menu}\s*$")).first.click()
    page.locator(f'.lm-Menu-item[data-command="{command}"]').first.click()


def prompts(page: Any) -> list[str]:
    """The input prompts of every code cell ("[ ]:", "[*]:", "[3]:")."""
    return page.locator(".jp-NotebookPanel .jp-CodeCell .jp-InputArea-prompt").all_inner_texts()


def wait_table_shows(page: Any, layout: Layout, timeout: float = 90) -> None:
    """Wait until the ranks table shows ``layout`` and the panel shows no error."""
    table = page.locator(".fdl-ranks-table")
    wait_until(
        page,
        lambda: not table_mismatch(read_table(table), layout) and not error_text(page),
        timeout,
        lambda: (
            f"the ranks table to show {layout!r}: {table_mismatch(read_table(table), layout)}; "
            f"error: {error_text(page)!r}"
        ),
    )


def set_layout(page: Any, lab: JupyterLab, target: dict[str, int]) -> None:
    """Bring every layout control to ``target``, in whatever order the offered choices allow."""
    for _ in range(5):
        changed = False
        for field in CONTROLS:
            info = read_control(page, field)
            if info["int"] == target[field]:
                continue
            if info["choices"] is None or target[field] in info["choices"]:
                set_control(page, lab, field, target[field])
                changed = True
        if read_values(page) == target:
            return
        if not changed:
            break
    raise AssertionError(f"cannot set the controls to {target}; they show {read_values(page)}")


def impossible_choice(page: Any) -> tuple[str, int, str]:
    """A control change the panel offers that makes the layout impossible: (field, value, LayoutError text)."""
    current = read_values(page)
    for field in ("tensor_parallel", "pipeline_parallel", "sequence_data_parallel", "local_world_size", "world_size"):
        info = read_control(page, field)
        choices = info["choices"] or [current[field] + step for step in (1, 2, 3)]
        for value in choices:
            if value is None or value == current[field]:
                continue
            try:
                Layout(**{**current, field: value})
            except LayoutError as exc:
                return field, value, str(exc)
    raise AssertionError(f"the controls offer no impossible combination from {current}")


# The test ---------------------------------------------------------------------------------------------------


def test_lab_in_chromium(page: Any, jupyter_lab: JupyterLab, screenshots: Path) -> None:
    """Open the quickstart, run it, drive the layout and cluster panels, screenshot every step."""
    from playwright.sync_api import expect

    lab = jupyter_lab
    shot = Shots(page, screenshots)

    # 1. open the notebook; the kernel is the one of this Python environment
    page.goto(f"{lab.url}/lab/tree/00_quickstart.ipynb?reset")
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for(timeout=120_000)
    lab.wait_kernel_idle(timeout=120)
    kernels = lab.tracker.kernels()
    assert len(kernels) == 1, f"expected one kernel process, found {[k.cmdline() for k in kernels]}"
    kernel = kernels[0]
    interpreter = Path(kernel.cmdline()[0])
    assert interpreter.parent == Path(sys.executable).parent and os.path.samefile(interpreter, sys.executable), (
        f"the kernel runs {interpreter}, not this environment's {sys.executable}"
    )
    current_left_tab = page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current")
    if current_left_tab.count():  # fold the file browser away: wider screenshots
        current_left_tab.first.click()
    shot("notebook_opened")

    # 2. run every cell from the menus (outputs stored in the file cleared first, so all we see is new)
    run_menu_command(page, "Edit", "editmenu:clear-all")
    wait_until(page, lambda: page.locator(".jp-NotebookPanel .jp-OutputArea-output").count() == 0, 30, "cleared")
    run_menu_command(page, "Run", "runmenu:run-all")
    ran = lambda: all(re.fullmatch(r"\[\d+\]:", p.strip()) for p in prompts(page))  # noqa: E731
    running = lambda: any("*" in p for p in prompts(page))  # noqa: E731
    wait_until(page, lambda: running() or ran(), 60, lambda: f"the cells to start: prompts {prompts(page)}")
    wait_until(page, lambda: not running(), 240, lambda: f"every cell to run: {outputs_text(page)}")
    assert ran(), f"not every cell ran (a cell failed?): prompts {prompts(page)}\n{outputs_text(page)}"
    panel = page.locator(".fdl-layout-panel")
    wait_until(page, lambda: panel.count() == 1, 60, lambda: f"one .fdl-layout-panel:\n{outputs_text(page)}")
    wait_until(page, lambda: picture_digest(page), 90, "the grid picture to load")
    reveal(page, picture(page))
    expect(picture(page)).to_be_visible()
    values = read_values(page)
    assert values == DEFAULT, f"the quickstart shows {values}, expected the default layout {DEFAULT}"
    wait_table_shows(page, Layout(**values))
    assert len(read_table(page.locator(".fdl-ranks-table"))["rows"]) == 8
    shot("panel_grid", picture(page))

    def act(do: Callable[[], None], what: str) -> None:
        since = quiet_kernel(page, lab)
        do()
        kernel_handled(page, lab, since, what)

    # 2b. point at the grid: a click outlines the rank and its group and shows its card; hovering names a cell
    click_cell_and_check(page, picture(page), Layout(**values), "tensor", 6, act, wait_until)
    shot("grid_clicked_rank_6", page.locator(".fdl-rank-card").first)
    hover_cell_and_check(page, picture(page), Layout(**values), "tensor", 3, wait_until)
    reveal(page, page.locator(".fdl-ranks-table"))
    shot("panel_ranks_table", page.locator(".fdl-ranks-table"))

    # 3. another tensor-parallel value: the picture and the table follow
    before_picture = picture_digest(page)
    before_table = read_table(page.locator(".fdl-ranks-table"))
    offered = read_control(page, "tensor_parallel")["choices"] or [1, 2, 4, 8]
    choices = [
        tp for tp in offered if tp != values["tensor_parallel"] and valid_layout({**values, "tensor_parallel": tp})
    ]
    assert choices, f"the tensor-parallel control offers no other valid value ({offered}) at {values}"
    values = {**values, "tensor_parallel": choices[0]}
    set_control(page, lab, "tensor_parallel", values["tensor_parallel"])
    wait_table_shows(page, Layout(**values))
    after_table = read_table(page.locator(".fdl-ranks-table"))
    assert tensor_column(after_table) != tensor_column(before_table)
    assert len(after_table["rows"]) == values["world_size"]
    shot("tensor_parallel_changed_table", page.locator(".fdl-ranks-table"))
    reveal(page, picture(page))
    wait_until(
        page,
        lambda: (now := picture_digest(page)) and now[0] != before_picture[0] and now[1] != before_picture[1],
        60,
        "the grid picture to change",
    )
    shot("tensor_parallel_changed_grid", picture(page))

    # 4. an impossible combination: the panel says why, in words, naming the field
    field, value, expected = impossible_choice(page)
    set_control(page, lab, field, value)
    wait_until(page, lambda: error_text(page), 60, f"an error after {field}={value}")
    shown = error_text(page)
    named = set(re.findall(r"([a-z_]+)=\d", expected))
    assert any(f"{name}=" in shown or name in shown for name in named), (
        f"error {shown!r} names none of {sorted(named)} (LayoutError says {expected!r})"
    )
    assert "Traceback" not in shown
    expect(page.locator(".fdl-error").first).to_be_visible()
    shot("impossible_layout_error", page.locator(".fdl-error").first)

    # 5. a valid 4-rank layout, a real gloo cluster from the cluster panel, every group ok
    set_layout(page, lab, CLUSTER_TARGET)
    wait_table_shows(page, Layout(**CLUSTER_TARGET))
    assert error_text(page) == ""
    shot("layout_world4", page.locator(".fdl-ranks-table"))

    cluster = page.locator(".fdl-cluster-panel")
    assert cluster.count() == 1, "expected one .fdl-cluster-panel"
    status = page.locator(".fdl-cluster-status").first
    start = page.locator(".fdl-cluster-start").first
    reveal(page, start)
    since = quiet_kernel(page, lab)
    start.click()
    kernel_handled(page, lab, since, "Start", timeout=300)
    apply = page.locator(".fdl-cluster-apply").first
    wait_until(
        page,
        lambda: RUNNING.search(control_text(status)) and apply.is_enabled(),
        240,
        lambda: f"the cluster to run: {control_text(cluster)}",
    )
    lab.tracker.scan()
    workers = lab.tracker.descendants(kernel.pid)
    assert len(workers) >= CLUSTER_TARGET["world_size"], f"expected 4 worker processes under the kernel: {workers}"
    shot("cluster_running", cluster)

    reveal(page, apply)
    since = quiet_kernel(page, lab)
    apply.click()
    kernel_handled(page, lab, since, "Apply", timeout=300)
    verification = page.locator(".fdl-verification")
    table = wait_until(
        page,
        lambda: apply.is_enabled() and (t := read_table(verification)) and t["rows"] and t,
        180,
        lambda: f"a verification table: {control_text(cluster)}",
    )
    assert RUNNING.search(control_text(status)), f"the cluster does not run: {control_text(cluster)}"
    reveal(page, verification.first)
    assert "ok" in table["header"], f"no ok column in {table['header']}"
    ok = table["header"].index("ok")
    assert [row[ok] for row in table["rows"]] == ["True"] * len(table["rows"]), table
    check_verified_groups(table, Layout(**CLUSTER_TARGET))
    shot("cluster_verified", verification.first)

    # 5b. the verdicts are on the grid: every cell of the 4-rank layout reads "✓ ok" in green
    reveal(page, picture(page))
    verdicts = wait_until(
        page,
        lambda: (v := read_verdicts(picture(page), Layout(**CLUSTER_TARGET), "tensor")) and all(v.values()) and v,
        60,
        lambda: f"a green verdict on every cell: {read_verdicts(picture(page), Layout(**CLUSTER_TARGET), 'tensor')}",
    )
    assert sorted(verdicts) == list(range(CLUSTER_TARGET["world_size"]))
    shot("grid_verdicts", picture(page))

    stop = page.locator(".fdl-cluster-stop").first
    reveal(page, stop)
    since = quiet_kernel(page, lab)
    stop.click()
    kernel_handled(page, lab, since, "Stop")
    wait_until(
        page,
        lambda: not RUNNING.search(control_text(status)) and start.is_enabled(),
        60,
        lambda: f"the cluster to stop: {control_text(status)!r}",
    )
    _, alive = psutil.wait_procs(workers, timeout=30)
    assert not [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], (
        f"workers still running after stop: {alive}"
    )
    shot("cluster_stopped", cluster)

    # 5c. paste a Megatron-LM launch line into the layout panel's box, Load: the controls take its layout
    paste_config_and_check(page, act, wait_until, reveal, read_values, wait_table_shows)
    shot("pasted_megatron_launch_line", page.locator(".fdl-config-box").first)

    # 6. big worlds: 256, 4,096 and 16,384 ranks stay within 1,000 pixels; a double-click zooms into nodes
    check_big_worlds(page, lambda: picture(page), lambda t: set_layout(page, lab, t), shot, act, wait_until)

    # 7. the Advisor: a small search, a row chosen; the layout panel and the cost panel take its set-up
    search_and_choose_a_row(page, act, wait_until, reveal, read_values, wait_table_shows)
    shot("advisor_row_chosen", page.locator(".fdl-advisor-rows").first)
    shot("advisor_row_in_the_cost_panel", page.locator(".fdl-step-headline").first)

    # 7b. the engine dropdowns: visible in the Advisor and the cost panel; fsdp2 changes the cost panel's headline
    choose_an_engine_and_check(page, act, wait_until, reveal)
    shot("cost_panel_engine_fsdp2", page.locator(".fdl-step-headline").first)

    # 8. the Advisor with a MoE preset: a row with EP > 1; the layout panel's expert controls and the cost panel show it
    search_moe_and_choose_an_expert_row(page, act, wait_until, read_values, wait_table_shows)
    shot("advisor_moe_row_chosen", page.locator(".fdl-advisor-rows").first)
    shot("advisor_moe_row_expert_controls", page.locator(".fdl-expert-parallel").first)
    shot("advisor_moe_row_in_the_cost_panel", page.locator(".fdl-cost-status").first)


@pytest.mark.parametrize("ci", ["", "0", "false", "true", "1", "yes"])
def test_missing_browser_skips_outside_ci_fails_in_ci(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    """Without Chromium the browser test is skipped with the reason, except in CI, where it fails."""
    monkeypatch.setenv("CI", ci)
    in_ci = ci.lower() in ("true", "1", "yes")
    with pytest.raises(pytest.fail.Exception if in_ci else pytest.skip.Exception) as raised:
        skip_or_fail("Chromium is not installed at /usr/bin/chromium")
    assert "Chromium is not installed" in str(raised.value)
