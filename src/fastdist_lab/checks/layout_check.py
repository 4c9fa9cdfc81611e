"""The main job: every group of a layout verified with real collectives, and every rank's real generator streams
compared with the prediction, on a running cluster (``fastdist-lab check``, the cluster panel)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..layout import Layout
from ..streams import compare_on_cluster, comparison_text

if TYPE_CHECKING:
    import pandas as pd

MEMBERS_SHOWN = 8
"""Members of one group written out in the verbose table (longer groups are shortened in the middle)."""

WHAT_IS_CHECKED = (
    "in every group of every dim, an all-gather of the members' global ranks must give the member list in "
    "group-rank order and an all-reduce (sum) their sum; every rank's generator seeds are compared with Fast-LLM's "
    "formulas; then every rank's real generator streams (the first draws of each generator) with the prediction"
)
"""One sentence for users: what ``check_layout`` verifies."""


def members_text(members: Any, limit: int = MEMBERS_SHOWN) -> str:
    """``"0 1 2 3"``, or ``"0 1 2 3 ... 63 (64 ranks)"`` past ``limit`` members."""
    members = [int(m) for m in members]
    if len(members) <= limit:
        return " ".join(map(str, members))
    return " ".join(map(str, members[: limit // 2])) + f" ... {members[-1]} ({len(members)} ranks)"


@dataclass
class LayoutCheck:
    """What ``check_layout`` found: the group ``verification`` (``Verification``) and the real-vs-predicted
    ``streams`` comparison (``None`` when the groups failed and the streams were not drawn)."""

    layout: Layout
    verification: Any
    streams: pd.DataFrame | None

    @property
    def ok(self) -> bool:
        """Whether every group passed, every seed matched and every real stream equals the prediction."""
        return bool(self.verification.ok and self.streams is not None and self.streams.attrs.get("matches"))

    def dim_summary(self) -> pd.DataFrame:
        """One row per dim: group size, number of groups, how many passed and failed, slowest group's seconds."""
        frame = self.verification.to_frame()
        grouped = frame.groupby("dim", sort=False)
        summary = grouped.agg(
            group_size=("size", "max"), groups=("group", "count"), passed=("ok", "sum"), slowest_s=("seconds", "max")
        )
        summary["failed"] = summary["groups"] - summary["passed"]
        summary["slowest_s"] = summary["slowest_s"].map(lambda s: f"{float(s):.3f}")
        return summary[["group_size", "groups", "passed", "failed", "slowest_s"]]

    def to_text(self, verbose: bool = False) -> str:
        """The layout, what was checked, one row per dim, every failure in full (``verbose``: every group), and
        the streams verdict; as ``fastdist-lab check`` prints it."""
        verification = self.verification
        lines = [f"layout: {self.layout!r}", *textwrap.wrap(f"checked: {WHAT_IS_CHECKED}.", 110), ""]
        lines.append(verification.summary())
        lines.append(self.dim_summary().to_string())
        failures = [row for row in verification.rows if not row["ok"]]
        if failures:
            lines += ["", f"failed groups ({len(failures)}):"]
            for row in failures:
                lines.append(f"  {row['dim']} group {row['group']} [{members_text(row['members'])}]: {row['detail']}")
        if not verification.results.ok:
            lines += ["", repr(verification.results)]
        if verbose:
            frame = verification.to_frame()
            frame = frame.assign(
                members=[members_text(m) for m in frame["members"]],
                seconds=[f"{s:.3f}" for s in frame["seconds"]],
            )[["dim", "group", "members", "size", "ok", "seconds", "detail"]]
            lines += ["", "every group:", frame.to_string(index=False)]
        lines.append("")
        if self.streams is None:
            lines.append("generator streams: not drawn (the groups failed)")
        else:
            lines.append(comparison_text(self.streams))
        lines.append("")
        lines.append("result: OK" if self.ok else "result: FAILED")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.to_text()


def check_layout(cluster: Any, layout: Layout, timeout: float | None = None) -> LayoutCheck:
    """Apply ``layout`` on ``cluster`` (every group checked with real collectives) and, when every group passed,
    draw every rank's generator streams and compare them with the prediction."""
    verification = cluster.apply(layout, timeout=timeout)
    streams = compare_on_cluster(cluster, timeout=timeout) if verification.ok else None
    return LayoutCheck(layout, verification, streams)
