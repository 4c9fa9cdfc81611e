"""Benchmark: the three performance targets of issue 12 (what a layout costs).

1. ``estimate`` for a sweep of 1,000 layouts of a 70B model: < 1 s in all (build each ``Layout``, ``estimate``
   it, read the peak memory and the bus bytes). Baseline, measured in the same run on every 20th layout: the
   per-rank way, building each rank's ``DistributedConfig`` and reading its dims' ``global_ranks`` to find group
   sizes and the nodes each group spans (what a tool without the whole-world ``Layout`` does), then the formulas.
2. The Cost panel at 256 ranks: a changed setting to a new picture and table < 200 ms (the time of the
   control's change, which estimates, draws and fills the tables synchronously outside a kernel). Baseline in
   the same run: the layout panel's own redraw of the same 256-rank layout (a changed colour-by dim).
3. ``replay`` on 8 gloo ranks (two emulated nodes of 4) with its progress bar: < 10 s. Baseline in the same
   run: the same calls (every row's warm-up and timed calls, same bytes) issued as plain all-reduces on the same
   dims' real groups in one cluster call: what the replay adds is its per-row cluster calls, the group check,
   the per-call timing and the bar.

Run: python benchmarks/bench_cost.py [--repeat N] [--only sweep|panel|replay]
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections.abc import Callable

from fastdist_lab import Layout
from fastdist_lab.cost import Training, Transformer, estimate

MODEL = Transformer.preset("llama2-70b")
TRAINING = Training(num_microbatches=32, distributed_optimizer=True, sequence_tensor_parallel=True,
                    recompute="selective")  # fmt: skip
SWEEP = 1000


def sweep_layouts(count: int = SWEEP, seed: int = 0) -> list[dict]:
    """``count`` layout field sets for the 70B model: tp 1-8, pp 1-20, sdp 1-8, bdp 1-32, both orders, 8 per node."""
    combos = [
        dict(world_size=tp * pp * sdp * bdp, local_world_size=8 if tp * pp * sdp * bdp >= 8 else tp * pp * sdp * bdp,
             tensor_parallel=tp, pipeline_parallel=pp, sequence_data_parallel=sdp, pipeline_first=first)
        for tp, pp, sdp, bdp, first in itertools.product(
            (1, 2, 4, 8), (1, 2, 4, 5, 8, 10, 16, 20), (1, 2, 4, 8), (1, 2, 4, 8, 16, 32), (False, True)
        )
        if (tp * pp * sdp * bdp) % 8 == 0 or tp * pp * sdp * bdp < 8
    ]  # fmt: skip
    random.Random(seed).shuffle(combos)
    return combos[:count]


def ours(fields: list[dict]) -> tuple[float, list[tuple[int, float]]]:
    """Seconds to build each Layout, estimate it and read its peak bytes and total bus bytes."""
    start = time.perf_counter()
    out = []
    for f in fields:
        report = estimate(Layout(**f), MODEL, TRAINING)
        out.append((report.peak_bytes, sum(r.calls_per_step * r.bytes_per_call for r in report.rows)))
    return time.perf_counter() - start, out


def with_tables(fields: list[dict]) -> float:
    """Seconds for the same sweep when every report also builds its pandas tables and time per dim."""
    start = time.perf_counter()
    for f in fields:
        report = estimate(Layout(**f), MODEL, TRAINING)
        _ = report.most_loaded, report.communication, report.communication_time("dgx-h100")
    return time.perf_counter() - start


def per_rank(fields: list[dict]) -> float:
    """Seconds for the baseline: each rank's DistributedConfig gives its groups and their node spans."""
    start = time.perf_counter()
    for f in fields:
        layout = Layout(**f)
        spans: dict[str, int] = {}
        for rank in range(layout.world_size):
            dims = layout.config(rank).distributed_dims
            for name in ("tensor", "sequence_data", "pipeline", "data"):
                nodes = {member // layout.local_world_size for member in dims[name].global_ranks}
                spans[name] = max(spans.get(name, 1), len(nodes))
        report = estimate(layout, MODEL, TRAINING)
        for row in report.communication.itertuples(index=False):  # the same answer, checked
            if row.collective != "all_reduce" or row.dim != "pipeline":
                assert spans[row.dim] == row.nodes_spanned, (f, row)
    return time.perf_counter() - start


def sweep_figure(repeat: int) -> None:
    """The 1,000-layout sweep against the per-rank baseline."""
    fields = sweep_layouts()
    ours(fields[:50])  # warm-up (imports, caches)
    runs = [ours(fields)[0] for _ in range(repeat)]
    tables = [with_tables(fields) for _ in range(max(1, repeat // 2))]
    sample = fields[::20]
    sample_ours = statistics.median(ours(sample)[0] for _ in range(repeat))
    sample_base = per_rank(sample)
    ranks = sum(f["world_size"] for f in fields)
    median = statistics.median(runs)
    print(
        f"estimate, {len(fields)} layouts of llama2-70b ({ranks} ranks in all, up to "
        f"{max(f['world_size'] for f in fields)} per layout): median {median * 1e3:.0f} ms "
        f"(min {min(runs) * 1e3:.0f}, max {max(runs) * 1e3:.0f}); target < 1000 ms: "
        f"{'OK' if median < 1 else 'MISSED'}"
    )
    print(f"  with pandas tables and time per dim for every layout: median {statistics.median(tables) * 1e3:.0f} ms")
    print(
        f"baseline (per-rank DistributedConfig dims, then the same formulas) on {len(sample)} of those layouts: "
        f"{sample_base * 1e3:.0f} ms vs ours {sample_ours * 1e3:.1f} ms: ratio {sample_base / sample_ours:.0f}x "
        f"(the whole sweep would take ~{sample_base / len(sample) * len(fields):.0f} s)"
    )


def _timed_change(control, values: list, panel) -> list[float]:
    """Seconds of each ``control.value = v`` (the panel estimates, draws and fills its tables at once)."""
    seconds = []
    for value in values:
        start = time.perf_counter()
        control.value = value
        panel.flush()
        seconds.append(time.perf_counter() - start)
    return seconds


def panel_figure(repeat: int) -> None:
    """The Cost panel's redraw after a changed setting at 256 ranks, against the layout panel's redraw."""
    import matplotlib

    matplotlib.use("Agg")
    from fastdist_lab.widgets import CostPanel, LayoutPanel

    fields = dict(world_size=256, local_world_size=8, tensor_parallel=4, pipeline_parallel=8)
    panel = CostPanel(Layout(**fields), model="llama2-70b")
    changes = [2, 1] * max(2, repeat)
    single = _timed_change(panel.micro_batch_size, changes, panel)
    zero = _timed_change(panel.zero_stage, [1, 0] * max(2, repeat), panel)
    panel.view.value = "compare"
    both = _timed_change(panel.micro_batch_size, changes, panel)
    panel.view.value = "single"
    # a new layout: the traffic grid is drawn afresh (settings reuse the grid drawn for the layout)
    layouts = [Layout(**fields, seed=1000 + i) for i in range(2 * max(2, repeat))]
    fresh = []
    for layout in layouts:
        start = time.perf_counter()
        panel.layout = layout
        panel.flush()
        fresh.append(time.perf_counter() - start)
    base_panel = LayoutPanel(**fields)
    base = _timed_change(base_panel.dim, ["data", "tensor"] * max(2, repeat), base_panel)
    median, base_median = statistics.median(single), statistics.median(base)
    print(
        f"Cost panel, 256 ranks (llama2-70b): a changed micro-batch to new picture and tables: median "
        f"{median * 1e3:.0f} ms (max {max(single) * 1e3:.0f}); ZeRO stage {statistics.median(zero) * 1e3:.0f} ms; "
        f"target < 200 ms: {'OK' if median < 0.2 else 'MISSED'}"
    )
    print(
        f"  side by side (data-first vs pipeline-first): {statistics.median(both) * 1e3:.0f} ms; a new layout "
        f"(traffic grid drawn afresh): {statistics.median(fresh) * 1e3:.0f} ms"
    )
    print(
        f"baseline (the layout panel's redraw of the same layout, colour-by dim changed): "
        f"{base_median * 1e3:.0f} ms; ratio cost panel / layout panel {median / base_median:.2f}"
    )


def replay_figure(repeat: int) -> None:
    """``replay`` on 8 gloo ranks with its progress bar, against the same calls as world all-reduces."""
    from fastdist_lab import LocalCluster
    from fastdist_lab.checks import replay

    layout = Layout(world_size=8, local_world_size=4, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
    training = Training(num_microbatches=8, distributed_optimizer=True, sequence_tensor_parallel=True)
    start = time.perf_counter()
    with LocalCluster(8, backend="gloo", local_world_size=4, progress=False) as cluster:
        assert cluster.apply(layout).ok
        ready = time.perf_counter() - start
        rows = replay(cluster, layout, "llama2-7b", training, per="collective", progress=False)  # warm-up
        runs = []
        for _ in range(max(1, repeat)):
            begin = time.perf_counter()
            replay(cluster, layout, "llama2-7b", training, progress=True)  # tqdm's bar on stderr
            runs.append(time.perf_counter() - begin)
        calls = 1 + rows.attrs["iterations"]  # the warm-up call and the timed ones, per row
        issued = [(dim, int(b)) for dim, b in zip(rows["dim"], rows["replayed_bytes_per_call"]) for _ in range(calls)]

        def plain_all_reduces(ctx, issued):
            import torch

            for dim, size in issued:
                ctx.distributed.group(dim).allreduce([torch.ones(size // 4)]).wait()

        bases = []
        for _ in range(max(1, repeat)):
            begin = time.perf_counter()
            assert cluster.run(plain_all_reduces, issued).ok
            bases.append(time.perf_counter() - begin)
    median, base = statistics.median(runs), statistics.median(bases)
    print(
        f"replay of one llama2-7b step ({len(rows)} rows, {sum(b for _, b in issued) / 2**20:.1f} MiB issued per "
        "rank) on 8 gloo "
        f"ranks: median {median:.2f} s (max {max(runs):.2f}; cluster start and apply {ready:.1f} s, not counted); "
        f"target < 10 s: {'OK' if median < 10 else 'MISSED'}"
    )
    print(
        f"baseline (the same {len(issued)} calls as plain all-reduces on the same dims' groups, in one cluster "
        f"call): {base:.2f} s; "
        f"ratio replay / baseline {median / base:.1f}"
    )


FIGURES: dict[str, Callable[[int], None]] = {"sweep": sweep_figure, "panel": panel_figure, "replay": replay_figure}
"""One function per performance target of issue 12."""


def main() -> None:
    """Print every figure and its ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", choices=tuple(FIGURES), default=None, help="one figure only")
    args = parser.parse_args()
    for name, figure in FIGURES.items():
        if args.only in (None, name):
            figure(args.repeat)


if __name__ == "__main__":
    main()
