"""The main job: every group of a layout verified with real collectives, and every rank's real generator streams
compared with the prediction, on a running cluster (``fastdist-lab check``, the cluster panel).

The cluster may be real processes (``LocalCluster``), a simulated world (``SimulatedCluster``: threads or fake
groups) or a launched job (``runtime.torchrun.LaunchedCluster``); what was proven depends on it and is said in the
text (``WHAT_IS_CHECKED``). A fake world cannot run collectives, so its check adds torch's ``DeviceMesh`` built
with fake groups for ``"cpu"`` and ``"cuda"`` (``fake_device_mesh_check``).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..formatting import TEXT_WIDTH, members_text, ranks_text, wrap_lines
from ..layout import Layout
from ..streams import comparison_text
from .fake_mesh import fake_device_mesh_check
from .group_check import THREADS_GATHER_LIMIT, verify_groups
from .stream_draw import compare_streams

if TYPE_CHECKING:
    import pandas as pd

_POOLS = (
    "each rank's pool must hold, for every dim, the group of the layout's members with the rank at its group rank "
    "(checked on every rank without communication)"
)
_SUMS = (
    "an all-reduce of a few terms per member (count, global rank, slot, dim and first member with their squares) "
    "must give the exact sums, which only the layout's members in group-rank order give"
)
_STREAMS = (
    "every rank's generator seeds are compared with Fast-LLM's formulas; then every rank's real generator streams "
    "(the first draws of each generator) with the prediction"
)
WHAT_IS_CHECKED = {
    "processes": f"{_POOLS}; then in every group {_SUMS}, and an all-gather of global ranks the member list; "
    f"{_STREAMS}",
    "threads": f"{_POOLS}; then in every group, with torch's threaded process groups (one thread per rank, real "
    f"collectives, no network transport), {_SUMS}, and groups of up to {THREADS_GATHER_LIMIT} members are "
    f"all-gathered too; {_STREAMS}",
    "fake": f"{_POOLS}, with torch's fake process groups: no collective ran; torch's DeviceMesh of the layout is "
    f"built and sliced with fake groups for each device type at a sample of ranks; {_STREAMS}",
}
"""For users, per cluster mode: what ``check_layout`` verifies, in one sentence."""

EXPERTS_CHECKED = (
    "the four expert dims' groups are checked as the dense ones, and every group of the expert dim also runs an "
    "all-to-all in which each member checks it received from each other member exactly the value it meant for it"
)
"""What ``check_layout`` adds for a layout with experts (collectives run: not on a fake world)."""

NOT_RUN = "not run"
"""What a table says where no collective ran (a fake world): never ``0.000`` seconds or ``passed``."""


@dataclass
class LayoutCheck:
    """What ``check_layout`` found: the group ``verification`` (``Verification``), the real-vs-predicted
    ``streams`` comparison (``None`` when the groups failed and the streams were not drawn) and, for a fake world,
    the fake ``DeviceMesh`` check (``mesh``, else ``None``)."""

    layout: Layout
    verification: Any
    streams: pd.DataFrame | None
    mesh: pd.DataFrame | None = None

    @property
    def mode(self) -> str:
        """What ran the ranks: ``"processes"``, ``"threads"`` or ``"fake"``."""
        return str(getattr(self.verification, "mode", "processes"))

    @property
    def ok(self) -> bool:
        """Whether every group passed, every seed matched and every real stream equals the prediction."""
        mesh_ok = self.mesh is None or bool(self.mesh.attrs.get("ok"))
        return bool(self.verification.ok and self.streams is not None and self.streams.attrs.get("matches") and mesh_ok)

    def dim_summary(self) -> pd.DataFrame:
        """One row per dim: group size, number of groups, how many passed and failed, slowest group's seconds.

        On a fake world no collective ran: ``passed`` / ``failed`` count the pools' membership checks (column
        ``membership_ok``), and ``collectives`` says ``not run`` instead of a time."""
        frame = self.verification.to_frame()
        grouped = frame.groupby("dim", sort=False)
        summary = grouped.agg(
            group_size=("size", "max"), groups=("group", "count"), passed=("ok", "sum"), slowest_s=("seconds", "max")
        )
        summary["failed"] = summary["groups"] - summary["passed"]
        if self.mode == "fake":
            summary = summary.rename(columns={"passed": "membership_ok"}).assign(collectives=NOT_RUN)
            return summary[["group_size", "groups", "membership_ok", "failed", "collectives"]]
        summary["slowest_s"] = summary["slowest_s"].map(lambda s: f"{float(s):.3f}")
        return summary[["group_size", "groups", "passed", "failed", "slowest_s"]]

    def to_text(self, verbose: bool = False) -> str:
        """The layout, what was checked, one row per dim, every failure in full (``verbose``: every group), and
        the streams verdict; as ``fastdist-lab check`` prints it."""
        verification = self.verification
        what = WHAT_IS_CHECKED.get(self.mode, WHAT_IS_CHECKED["processes"])
        if self.layout.has_experts:
            what += "; " + (EXPERTS_CHECKED if self.mode != "fake" else "the expert dims' groups as the dense ones")
        lines = [*wrap_lines(f"layout: {self.layout!r}"), *textwrap.wrap(f"checked: {what}.", TEXT_WIDTH), ""]
        lines += [*wrap_lines(verification.summary()), self.dim_summary().to_string()]
        failures = [row for row in verification.rows if not row["ok"]]
        if failures:
            lines += ["", f"failed groups ({len(failures)}):"]
            for row in failures:
                lines.append(f"  {row['dim']} group {row['group']} {members_text(row['members'])}: {row['detail']}")
        if not verification.results.ok:
            lines += ["", repr(verification.results)]
        if verbose:
            frame = verification.to_frame()
            frame = frame.assign(
                members=[members_text(m) for m in frame["members"]], seconds=[f"{s:.3f}" for s in frame["seconds"]]
            )[["dim", "group", "members", "size", "ok", "seconds", "detail"]]
            if self.mode == "fake":  # the pools' membership was checked; no collective ran
                frame = frame.rename(columns={"ok": "membership_ok", "seconds": "collectives"}).assign(
                    collectives=NOT_RUN
                )
            lines += ["", "every group:", frame.to_string(index=False, line_width=TEXT_WIDTH)]
        if self.mesh is not None:
            lines += ["", _mesh_text(self.mesh)]
        drawn = self.streams is not None
        lines += ["", comparison_text(self.streams) if drawn else "generator streams: not drawn (the groups failed)"]
        lines += ["", "result: OK" if self.ok else "result: FAILED"]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.to_text()


def _mesh_text(mesh: pd.DataFrame) -> str:
    """One line per device type: how the fake DeviceMesh check went."""
    ranks = mesh.attrs.get("ranks", [])
    lines = []
    for device_type, rows in mesh.groupby("device_type", sort=False):
        bad = rows[~rows["ok"].astype(bool)]
        verdict = "every dim's sub-mesh group matches" if bad.empty else f"{len(bad)} dims differ"
        lines.append(
            f"DeviceMesh ({device_type}, fake groups, as {ranks_text(ranks)}): {verdict}"
            + ("" if bad.empty else f"; {bad.iloc[0]['dim']}: {bad.iloc[0]['first_mismatch']}")
        )
    return "\n".join(lines)


def check_layout(cluster: Any, layout: Layout, timeout: float | None = None) -> LayoutCheck:
    """Apply ``layout`` on ``cluster`` and check every group (``verify_groups``; see ``WHAT_IS_CHECKED`` for each
    mode) and, when every group passed, draw every rank's generator streams and compare them with the prediction. On
    a fake world, also build torch's ``DeviceMesh`` with fake groups (``fake_device_mesh_check``)."""
    verification = verify_groups(cluster, layout, timeout=timeout)
    streams = compare_streams(cluster, timeout=timeout) if verification.ok else None
    mesh = None
    if getattr(verification, "mode", "processes") == "fake" and verification.ok:
        mesh = fake_device_mesh_check(verification_layout(layout, cluster))
    return LayoutCheck(layout, verification, streams, mesh)


def verification_layout(layout: Layout, cluster: Any) -> Layout:
    """``layout`` as the cluster applied it (a ``DistributedConfig`` or fields become a ``Layout``)."""
    applied = getattr(cluster, "layout", None)
    return applied if isinstance(applied, Layout) else layout
