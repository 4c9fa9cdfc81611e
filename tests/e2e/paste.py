"""Browser step for the layout panel's *paste a config* box: paste a Megatron-LM launch line, click *Load*, read the
new layout off the panel's own controls, ranks table and the box's description."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastdist_lab import Layout

MEGATRON_LAUNCH_LINE = (
    "torchrun --nnodes 2 --nproc-per-node 4 pretrain_gpt.py --tensor-model-parallel-size 2 "
    "--pipeline-model-parallel-size 2 --context-parallel-size 2 --seed 1234"
)
"""Two nodes of four GPUs, tensor 2, pipeline 2, context 2 in Megatron's default order: a data-first layout with
sequence-data parallel 2 (context parallel is this project's sequence-data parallel)."""

PASTED_LAYOUT = {
    "world_size": 8,
    "local_world_size": 4,
    "tensor_parallel": 2,
    "pipeline_parallel": 2,
    "sequence_data_parallel": 2,
}
"""What the controls show after *Load* (pipeline-first not ticked)."""


def paste_config_and_check(
    page: Any,
    act: Callable[[Callable[[], None], str], None],
    wait_until: Callable[..., Any],
    reveal: Callable[[Any, Any], None],
    read_values: Callable[[Any], dict[str, int]],
    wait_table_shows: Callable[[Any, Layout], None],
) -> None:
    """Open the box, type the Megatron-LM launch line, click *Load*; then the controls, the pipeline-first box, the
    ranks table and the box's description show the loaded layout, and no error is shown. The layout's order is
    data-first, as the big-world step after it expects."""
    text = page.locator(".fdl-config-text textarea").first
    reveal(page, text)  # opens the collapsed accordion
    act(lambda: text.fill(MEGATRON_LAUNCH_LINE), "the pasted launch line")
    load = page.locator(".fdl-config-load").first
    act(lambda: load.click(), "Load")
    wait_until(
        page,
        lambda: read_values(page) == PASTED_LAYOUT,
        60,
        lambda: f"the controls to show {PASTED_LAYOUT}: {read_values(page)}; box says {status_text(page)!r}",
    )
    pipeline_first = page.locator(".fdl-pipeline-first input").first
    assert not pipeline_first.is_checked(), "Megatron's default order is data-first, yet pipeline-first is ticked"
    wait_table_shows(page, Layout(**PASTED_LAYOUT))
    said = status_text(page)
    assert "Megatron-LM command line" in said and "torchrun: 2 node(s) x 4 process(es)" in said, said
    assert "context 2" in said and "data-first" in said and "Traceback" not in said, said
    assert page.locator(".fdl-config-error").count() == 0, f"the box shows an error: {said!r}"


def status_text(page: Any) -> str:
    """What the box says after *Load* ("" before)."""
    status = page.locator(".fdl-config-status")
    return status.first.inner_text().strip() if status.count() else ""
