"""Benchmark: the lab's Advisor (issue 21's panel target), on this machine.

A clicked row to a new picture: < 300 ms. ``lab()``'s Advisor searches Llama 2 70B on 512 H100 for 1,024 sequences
(the README's example), then rows are chosen one after the other as a click on the list does
(``AdvisorPanel.select``). Each time is the choice until every picture of the lab shows it: the scatter ringing the
row, the layout panel's grid of the row's layout, the cost panel's memory and traffic pictures and its step view
(breakdown and pipeline schedule); ``Lab.flush`` draws what a kernel would draw after its debounce. Baseline in the
same run: the same panel searching again (what a click would cost if the panel re-ran the search).

Run: python benchmarks/bench_advisor.py [--rows N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import matplotlib

matplotlib.use("Agg")

import fastdist_lab as fdl  # noqa: E402

INPUTS = {"model": "llama2-70b", "gpus": 512, "global_batch_size": 1024, "hardware": "h100-sxm-80gb", "top": 20}


def main() -> None:
    """Print the click-to-picture times with the re-search baseline and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20, help="rows chosen, one after the other")
    args = parser.parse_args()
    lab = fdl.lab()
    advisor = lab.advisor_panel
    for name, value in INPUTS.items():  # outside a kernel each change searches at once: set the GPUs last
        if name != "gpus":
            getattr(advisor, name).value = value
    start = time.perf_counter()
    advisor.gpus.value = INPUTS["gpus"]
    first = time.perf_counter() - start
    assert advisor.error == "" and len(advisor.result) == INPUTS["top"], advisor.status.value
    start = time.perf_counter()
    advisor.search()
    again = time.perf_counter() - start
    clicks, scatter = [], []
    rows = [(i * 7) % len(advisor.result) for i in range(args.rows)]
    for row in rows:
        start = time.perf_counter()
        advisor.select(row)
        lab.flush()
        clicks.append(time.perf_counter() - start)
        scatter.append(advisor.render_seconds)
        assert lab.layout_panel.layout.tensor_parallel == advisor.result.frame.loc[row, "tensor_parallel"]
        assert lab.cost_panel.step_view.step is not None, lab.cost_panel.error
    median, worst = statistics.median(clicks), max(clicks)
    print(
        f"Advisor, {INPUTS['model']} on {INPUTS['gpus']} x {INPUTS['hardware']}, batch {INPUTS['global_batch_size']}: "
        f"search {first:.2f} s first, {again:.2f} s again (baseline)"
    )
    print(
        f"clicked row -> every picture of the lab (target < 300 ms): median {median * 1e3:.0f} ms, worst "
        f"{worst * 1e3:.0f} ms over {len(clicks)} rows (the scatter alone: median "
        f"{statistics.median(scatter) * 1e3:.0f} ms); ratio search again / click {again / median:.0f}x"
    )


if __name__ == "__main__":
    main()
