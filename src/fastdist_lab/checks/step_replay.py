"""The step's collectives replayed on a running cluster's real process groups, and a bandwidth sweep per dim.

``replay(cluster, layout, model, training, scale)`` (``fastdist_lab.checks.replay``; ``cluster.replay`` before, now
deprecated) takes the rows of ``estimate(...).communication`` and
issues each on its real groups: every rank of the row's groups issues its own group's collective in the same
call, as in training (all groups of a dim at once), with the message scaled by ``scale`` to fit this machine.
``bandwidth(cluster, dim, sizes)`` sweeps all-reduce / all-gather / reduce-scatter on a dim's groups like
nccl-tests. Tensors live on ``ctx.device`` (CPU for gloo, the rank's GPU for NCCL): the same code on both.

How a figure is timed (on each rank, no barrier): ``warmup`` untimed calls (they also create any group that is
not a dim's, and line the ranks up, since a collective returns on every member at about the same time), then
``iterations`` calls each timed alone (``perf_counter`` around the call; on a GPU the stream is synchronised
before the clock stops). A call's time is that of the slowest rank of all the row's groups (the slowest rank per
group, then the slowest group); the figure is the median over the iterations. A step's seconds are that time
per call times the row's calls per step. Bandwidths follow nccl-tests (doc/PERFORMANCE.md): ``algbw = size /
time`` where size is the all-reduce buffer, the gathered all-gather output, the reduce-scatter input or the
message sent, and ``busbw = algbw x`` the bus factor (``fastdist_lab.cost.bus_factor``), in GB/s (1e9 bytes/s)
as ``Hardware`` states link speeds. Messages are float32; sizes are rounded to whole elements (and to a multiple
of the group size for all-gather and reduce-scatter).

Only the cluster's public calls are used (``run``, ``layout``, ``world_size``, ``backend``), and on the ranks
``ctx.distributed.group(dim)`` and ``ctx.pool.get_process_group(members, group_rank)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..config import DIM_NAMES
from ..cost import COLLECTIVES, Hardware, bus_factor, estimate, format_bytes
from ..errors import ClusterError, CostError
from ..runtime.progress import finish, resolve_progress
from ..validation import check_int, check_number

if TYPE_CHECKING:
    import pandas as pd

ELEMENT_BYTES = 4
"""Bytes per element of a replayed message (float32)."""

DEFAULT_MAX_MESSAGE = 1 << 20
"""With ``scale=None`` the largest message of the step is scaled to this many bytes per rank."""

MAX_MESSAGE = 1 << 30
"""The largest message (bytes per rank) a replay or sweep allocates; a larger one is refused."""

SWEEP_SIZES: tuple[int, ...] = tuple(1 << k for k in range(10, 21, 2))
"""Default sizes of ``bandwidth`` in bytes: 1 KiB to 1 MiB by factors of 4."""

SWEEP_COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter")
"""Default collectives of ``bandwidth``."""

REPLAY_COLUMNS: tuple[str, ...] = (
    "collectives", "group_size", "inter_node", "calls_per_step", "scaled_bytes_per_step", "replayed_bytes_per_step",
    "bus_bytes_per_step", "seconds", "algbw_GBps", "busbw_GBps", "predicted_seconds", "predicted_busbw_GBps",
    "measured_over_predicted",
)  # fmt: skip
"""Columns of ``replay(...)`` per dim (index ``dim``); every byte count is per rank, seconds are per step."""

REPLAY_ROW_COLUMNS: tuple[str, ...] = (
    "dim", "collective", "group_size", "groups", "inter_node", "calls_per_step", "bytes_per_call",
    "scaled_bytes_per_call", "replayed_bytes_per_call", "seconds_per_call", "seconds", "algbw_GBps", "busbw_GBps",
    "predicted_seconds", "predicted_busbw_GBps", "measured_over_predicted",
)  # fmt: skip
"""Columns of ``replay(..., per="collective")``: one row per row of ``estimate(...).communication``."""

BANDWIDTH_COLUMNS: tuple[str, ...] = (
    "collective", "size", "count", "group_size", "groups", "seconds", "algbw_GBps", "busbw_GBps",
)  # fmt: skip
"""Columns of ``bandwidth(...)``: nccl-tests' size (bytes), count (float32 elements), time and bandwidths."""

Progress = Callable[[int, int, str], None]
"""``progress(done, total, message)``."""


# --------------------------------------------------------------------------- on each rank
def _verify_group(ctx: Any, dim: str, members: tuple[int, ...], whole_dim: bool) -> None:
    """Raise ``ClusterError`` unless ``members`` is this rank's real ``dim`` group (``whole_dim``) or inside it."""
    if ctx.distributed is None:
        raise ClusterError(f"rank {ctx.rank}: no layout is applied; call cluster.apply(layout) first")
    real = tuple(int(rank) for rank in ctx.config.distributed_dims[dim].global_ranks)
    if real == members if whole_dim else set(members) <= set(real):
        return
    what = "is not this rank's real" if whole_dim else "is not inside this rank's real"
    raise ClusterError(
        f"rank {ctx.rank}: the {dim} group to replay {list(members)} {what} {dim} group {list(real)}; "
        "apply the layout that was estimated (cluster.apply(layout))"
    )


def _real_group(ctx: Any, dim: str, members: tuple[int, ...], position: int, whole_dim: bool) -> Any:
    """The real group of ``members`` on this rank: the dim's own group, or a pool group inside it."""
    _verify_group(ctx, dim, members, whole_dim)
    if whole_dim:
        return ctx.distributed.group(dim)
    return ctx.pool.get_process_group(members, position)


def _own_group(ctx: Any, plan: dict[str, Any]) -> tuple[int, int, tuple[int, ...]] | None:
    """(group index, position, members) of this rank in the plan's groups, or None when it is in none."""
    hit = np.argwhere(plan["groups"] == ctx.rank)
    if not len(hit):
        return None
    index, position = (int(v) for v in hit[0])
    return index, position, tuple(int(rank) for rank in plan["groups"][index])


def _collective(group: Any, collective: str, elements: int, position: int, size: int, device: Any) -> Any:
    """A callable issuing one ``collective`` of ``elements`` float32 values (nccl-tests' size) on ``group``."""
    part = elements // size
    if collective == "all_reduce":
        buffer = torch.ones(elements, device=device)
        return lambda: group.allreduce([buffer]).wait()
    if collective == "all_gather":
        mine = torch.ones(part, device=device)
        gathered = [torch.empty(part, device=device) for _ in range(size)]
        return lambda: group.allgather([gathered], [mine]).wait()
    if collective == "reduce_scatter":
        inputs = [torch.ones(part, device=device) for _ in range(size)]
        out = torch.empty(part, device=device)
        return lambda: group.reduce_scatter([out], [inputs]).wait()
    # send_recv: a chain, as pipeline stages pass activations on (each sends to the next, receives from the last)
    message, received = torch.ones(elements, device=device), torch.empty(elements, device=device)

    def send_recv() -> None:
        works = []
        if position + 1 < size:
            works.append(group.send([message], position + 1, 0))
        if position > 0:
            works.append(group.recv([received], position - 1, 0))
        for work in works:
            work.wait()

    return send_recv


def check_groups_on_rank(ctx: Any, plans: list[dict[str, Any]]) -> int:
    """Check every plan's group of this rank against its real groups (no collective); returns how many."""
    checked = 0
    for plan in plans:
        own = _own_group(ctx, plan)
        if own is not None:
            _verify_group(ctx, plan["dim"], own[2], plan["whole_dim"])
            checked += 1
    return checked


def time_on_rank(ctx: Any, plan: dict[str, Any]) -> dict[str, Any] | None:
    """Issue the plan's collective on this rank's group: warm-up calls, then each timed call's seconds.

    Returns ``None`` when this rank is in none of the plan's groups, else ``group`` (index), ``bytes`` (the
    size of one call, nccl-tests' definition) and ``seconds`` (one per timed call).
    """
    own = _own_group(ctx, plan)
    if own is None:
        return None
    index, position, members = own
    group = _real_group(ctx, plan["dim"], members, position, plan["whole_dim"])
    call = _collective(group, plan["collective"], plan["elements"], position, len(members), ctx.device)
    sync = torch.cuda.synchronize if ctx.device.type == "cuda" else (lambda: None)
    for _ in range(plan["warmup"]):
        call()
    sync()
    seconds = []
    for _ in range(plan["iterations"]):
        begin = time.perf_counter()
        call()
        sync()
        seconds.append(time.perf_counter() - begin)
    return {"group": index, "bytes": plan["elements"] * ELEMENT_BYTES, "seconds": seconds}


# --------------------------------------------------------------------------- on the controller
def _progress_bar(progress: Progress | bool | None, what: str) -> tuple[Progress, Callable[[], None]]:
    """``progress(done, total, message)`` and a closer: the rule of ``progress.resolve_progress`` (a bar only where
    someone watches: a terminal or a notebook, never a redirected stream; ``True`` always; ``False`` none; a
    callable itself)."""
    if progress not in (None, True, False) and not callable(progress):
        raise CostError(f"progress={progress!r} must be None, True, False or a callable(done, total, message)")
    reporter = resolve_progress(progress, what, leave=True)
    if reporter is None:
        return (lambda done, total, message: None), (lambda: None)
    return reporter, (lambda: finish(reporter))


def _check_cluster(cluster: Any, layout: Any) -> Any:
    """The layout to replay (``cluster.layout`` when None); ``ClusterError`` when it cannot run on ``cluster``."""
    applied = cluster.layout
    if applied is None:
        raise ClusterError("the cluster has no layout applied; call cluster.apply(layout) first")
    layout = applied if layout is None else layout
    if layout.world_size != cluster.world_size:
        raise ClusterError(
            f"layout world_size={layout.world_size} does not match the cluster's {cluster.world_size} ranks"
        )
    return layout


def _elements(nbytes: float, multiple: int) -> int:
    """``nbytes`` as whole float32 elements, a multiple of ``multiple`` (at least one of each)."""
    count = int(round(nbytes / ELEMENT_BYTES / multiple)) * multiple
    return max(multiple, count)


def _run(cluster: Any, fn: Callable[..., Any], arg: Any, timeout: float | None, what: str) -> list[Any]:
    """``cluster.run(fn, arg)``'s values; ``ClusterError`` naming the ranks and their first error otherwise."""
    results = cluster.run(fn, arg, timeout=timeout)
    if not results.ok:
        ranks, error = results.error_groups()[0]
        raise ClusterError(
            f"{what} failed on rank(s) {', '.join(map(str, ranks))}: {error.message}",
            results=results,
            ranks=results.failed_ranks,
        )
    return results.values


def _measure(cluster: Any, plan: dict[str, Any], timeout: float | None) -> tuple[int, float]:
    """(bytes per call, seconds per call) of one plan: the slowest rank per timed call, median over calls."""
    what = f"{plan['dim']} {plan['collective']}"
    values = [value for value in _run(cluster, time_on_rank, plan, timeout, what) if value is not None]
    if not values:
        raise ClusterError(f"{what}: no rank of the cluster is in the groups {plan['groups'].tolist()}")
    sizes = {value["bytes"] for value in values}
    if len(sizes) != 1:
        raise ClusterError(f"{what}: ranks issued different sizes {sorted(sizes)}")
    seconds = np.array([value["seconds"] for value in values], dtype=np.float64)
    return sizes.pop(), float(np.median(seconds.max(axis=0)))


def _plans(report: Any, scale: float | None, max_message: int, warmup: int, iterations: int) -> tuple[list, float]:
    rows = report.rows
    largest = max(row.bytes_per_call for row in rows)
    if scale is None:
        scale = min(1.0, max_message / largest)
    scale = check_number("scale", scale, error=CostError)
    if scale > 1:
        raise CostError(f"scale={scale!r} must be in (0, 1]: the replay scales messages down")
    if largest * scale > MAX_MESSAGE:
        raise CostError(
            f"scale={scale!r} makes a message of {format_bytes(largest * scale)} per rank; use scale <= "
            f"{MAX_MESSAGE / largest:.3g} (at most {format_bytes(MAX_MESSAGE)} per message)"
        )
    plans = []
    for row in rows:
        size = row.groups.shape[1]
        dim_groups = report.layout.groups(row.dim)
        whole = row.groups.shape == dim_groups.shape and bool(np.array_equal(row.groups, dim_groups))
        multiple = size if row.collective in ("all_gather", "reduce_scatter") else 1
        plans.append(
            {
                "dim": row.dim,
                "collective": row.collective,
                "groups": np.asarray(row.groups),
                "whole_dim": whole,
                "elements": _elements(row.bytes_per_call * scale, multiple),
                "warmup": warmup,
                "iterations": iterations,
            }
        )
    return plans, scale


def replay(
    cluster: Any,
    layout: Any,
    model: Any,
    training: Any = None,
    scale: float | None = None,
    *,
    hardware: Hardware | str | None = None,
    per: str = "dim",
    iterations: int = 5,
    warmup: int = 1,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE,
    progress: Progress | bool | None = None,
    timeout: float | None = None,
) -> pd.DataFrame:
    """Replay one training step's collectives on ``cluster``'s real groups and set them beside the prediction.

    Args:
        cluster: a running cluster (``LocalCluster``) with ``layout`` applied.
        layout: the layout estimated (``None``: the applied one); every rank checks that the groups it is asked
            to replay are its real groups, before any collective runs.
        model, training: as for ``fastdist_lab.cost.estimate``.
        scale: messages are ``bytes_per_call x scale`` (in (0, 1]); ``None`` scales the largest message to
            ``max_message_bytes``.
        hardware: the link speeds of the prediction (``Hardware`` or preset name; default ``dgx-h100``).
        per: ``"dim"`` (one row per dim, ``REPLAY_COLUMNS``) or ``"collective"`` (one row per communication
            row, ``REPLAY_ROW_COLUMNS``).
        iterations, warmup: timed and untimed calls per row (see the module docstring for the timing).
        progress: ``None`` a ``tqdm.auto`` bar where someone watches (a terminal, a notebook), ``True`` always,
            ``False`` none, or ``progress(done, total, message)``.
        timeout: seconds per cluster call (default: the cluster's).

    Returns:
        A DataFrame: measured seconds per step, algorithm and bus bandwidth (GB/s), and for the same replayed
        bytes the prediction of ``Hardware.seconds`` (the model of ``CostReport.time``). ``attrs`` holds
        ``scale``, ``hardware``, ``backend`` and ``iterations``.
    """
    if per not in ("dim", "collective"):
        raise CostError(f"per={per!r} must be 'dim' or 'collective'")
    iterations = check_int("iterations", iterations, minimum=1, error=CostError)
    warmup = check_int("warmup", warmup, minimum=1, error=CostError)
    max_message = check_int("max_message_bytes", max_message_bytes, minimum=1, error=CostError)
    hw = Hardware.coerce(hardware)
    layout = _check_cluster(cluster, layout)
    report = estimate(layout, model, training)
    if not report.rows:
        raise CostError(f"{layout!r} moves no bytes in a step (one rank per group everywhere): nothing to replay")
    plans, scale = _plans(report, scale, max_message, warmup, iterations)
    update, close = _progress_bar(progress, "replay")
    measured = []
    try:
        update(0, len(plans) + 1, "checking groups")
        _run(cluster, check_groups_on_rank, plans, timeout, "checking the groups to replay")
        for done, plan in enumerate(plans, 1):
            update(done, len(plans) + 1, f"{plan['dim']} {plan['collective']}")
            measured.append(_measure(cluster, plan, timeout))
        update(len(plans) + 1, len(plans) + 1, "done")
    finally:
        close()
    frame = _row_frame(report, plans, measured, scale, hw)
    if per == "dim":
        frame = _per_dim(frame)
    frame.attrs.update(scale=scale, hardware=hw, backend=cluster.backend, iterations=iterations)
    return frame


def _row_frame(report: Any, plans: list, measured: list, scale: float, hw: Hardware) -> pd.DataFrame:
    from ..unit_frame import UnitFrame

    comm = report.communication
    rows = []
    for (_, row), plan, (nbytes, per_call) in zip(comm.iterrows(), plans, measured):
        factor = float(bus_factor(row["collective"], int(row["group_size"])))
        predicted = float(hw.seconds(nbytes * factor, bool(row["inter_node"])))
        rows.append(
            {
                "dim": row["dim"],
                "collective": row["collective"],
                "group_size": int(row["group_size"]),
                "groups": len(plan["groups"]),
                "inter_node": bool(row["inter_node"]),
                "calls_per_step": int(row["calls_per_step"]),
                "bytes_per_call": int(row["bytes_per_call"]),
                "scaled_bytes_per_call": plan["elements"] * ELEMENT_BYTES,
                "replayed_bytes_per_call": nbytes,
                "seconds_per_call": per_call,
                "seconds": per_call * int(row["calls_per_step"]),
                "algbw_GBps": nbytes / per_call / 1e9,
                "busbw_GBps": nbytes * factor / per_call / 1e9,
                "predicted_seconds": predicted * int(row["calls_per_step"]),
                "predicted_busbw_GBps": float(hw.link_GBps(bool(row["inter_node"]))),
                "measured_over_predicted": per_call / predicted,
            }
        )
    frame = UnitFrame(rows, columns=list(REPLAY_ROW_COLUMNS))
    frame.attrs["scale"] = scale
    return frame


def _per_dim(rows: pd.DataFrame) -> pd.DataFrame:
    """Sum the rows of each dim (seconds, bytes); bandwidths are the dim's bytes over its seconds."""
    from ..unit_frame import UnitFrame

    factor = rows["busbw_GBps"] / rows["algbw_GBps"]
    rows = rows.assign(
        scaled_bytes_per_step=rows["scaled_bytes_per_call"] * rows["calls_per_step"],
        replayed_bytes_per_step=rows["replayed_bytes_per_call"] * rows["calls_per_step"],
        bus_bytes_per_step=rows["replayed_bytes_per_call"] * rows["calls_per_step"] * factor,
    )
    out = []
    for dim, part in rows.groupby("dim", sort=False):
        seconds, predicted = float(part["seconds"].sum()), float(part["predicted_seconds"].sum())
        bus = float(part["bus_bytes_per_step"].sum())
        out.append(
            {
                "dim": dim,
                "collectives": "+".join(part["collective"]),
                "group_size": int(part["group_size"].max()),
                "inter_node": bool(part["inter_node"].any()),
                "calls_per_step": int(part["calls_per_step"].sum()),
                "scaled_bytes_per_step": int(part["scaled_bytes_per_step"].sum()),
                "replayed_bytes_per_step": int(part["replayed_bytes_per_step"].sum()),
                "bus_bytes_per_step": bus,
                "seconds": seconds,
                "algbw_GBps": float(part["replayed_bytes_per_step"].sum()) / seconds / 1e9,
                "busbw_GBps": bus / seconds / 1e9,
                "predicted_seconds": predicted,
                "predicted_busbw_GBps": bus / predicted / 1e9,
                "measured_over_predicted": seconds / predicted,
            }
        )
    return UnitFrame(out, columns=["dim", *REPLAY_COLUMNS]).set_index("dim")


def bandwidth(
    cluster: Any,
    dim: str,
    sizes: Sequence[int] | None = None,
    collectives: Sequence[str] = SWEEP_COLLECTIVES,
    *,
    iterations: int = 5,
    warmup: int = 1,
    progress: Progress | bool | None = None,
    timeout: float | None = None,
) -> pd.DataFrame:
    """Sweep ``collectives`` over message ``sizes`` (bytes) on every group of ``dim`` at once, like nccl-tests.

    Uses the applied layout's real ``dim`` groups; ``sizes`` defaults to ``SWEEP_SIZES``. One row per (collective,
    size): ``BANDWIDTH_COLUMNS``
    (size rounded to whole float32 elements, a multiple of the group size for all-gather / reduce-scatter;
    seconds per call timed as in ``replay``; bandwidths in GB/s), raw numbers displayed in units (a ``UnitFrame``).
    """
    from ..unit_frame import UnitFrame

    if dim not in DIM_NAMES:
        raise CostError(f"dim={dim!r} is not a dim; use one of {', '.join(DIM_NAMES)}")
    collectives = tuple(collectives)
    for collective in collectives:
        if collective not in COLLECTIVES:
            raise CostError(f"collective={collective!r} is not a collective; use one of {', '.join(COLLECTIVES)}")
    sizes = SWEEP_SIZES if sizes is None else tuple(sizes)
    if not sizes or not collectives:
        raise CostError(f"sizes={sizes!r} and collectives={collectives!r} must not be empty")
    for size in sizes:
        check_int("size", size, minimum=1, error=CostError)
        if size > MAX_MESSAGE:
            raise CostError(f"size={size!r} is over {format_bytes(MAX_MESSAGE)} per message")
    iterations = check_int("iterations", iterations, minimum=1, error=CostError)
    warmup = check_int("warmup", warmup, minimum=1, error=CostError)
    layout = _check_cluster(cluster, None)
    groups = layout.groups(dim)
    if groups.shape[1] == 1:
        raise CostError(f"dim={dim!r} has groups of one rank in the applied layout {layout!r}: nothing to measure")
    n = groups.shape[1]
    plans = [
        {
            "dim": dim,
            "collective": collective,
            "groups": groups,
            "whole_dim": True,
            "elements": _elements(size, n if collective in ("all_gather", "reduce_scatter") else 1),
            "warmup": warmup,
            "iterations": iterations,
        }
        for collective in collectives
        for size in sizes
    ]
    update, close = _progress_bar(progress, f"bandwidth {dim}")
    rows = []
    try:
        update(0, len(plans) + 1, "checking groups")
        _run(cluster, check_groups_on_rank, plans[:1], timeout, f"checking the {dim} groups")
        for done, plan in enumerate(plans, 1):
            update(done, len(plans) + 1, f"{plan['collective']} {format_bytes(plan['elements'] * ELEMENT_BYTES)}")
            nbytes, seconds = _measure(cluster, plan, timeout)
            algbw = nbytes / seconds / 1e9
            rows.append(
                {
                    "collective": plan["collective"],
                    "size": nbytes,
                    "count": plan["elements"],
                    "group_size": n,
                    "groups": groups.shape[0],
                    "seconds": seconds,
                    "algbw_GBps": algbw,
                    "busbw_GBps": algbw * float(bus_factor(plan["collective"], n)),
                }
            )
        update(len(plans) + 1, len(plans) + 1, "done")
    finally:
        close()
    frame = UnitFrame(rows, columns=list(BANDWIDTH_COLUMNS))
    frame.attrs.update(dim=dim, backend=cluster.backend, iterations=iterations)
    return frame
