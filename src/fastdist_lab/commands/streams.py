"""``fastdist-lab streams``: which ranks share which generator stream, and whether the seed design holds.

Predicts every rank's streams for the layout (``--real``: also draws them on a local cluster and compares),
prints the sharing of each generator and the check table; exits 1 when a check fails or real != predicted.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any

from ..config import DEFAULT_SEED_SHIFTS, PhaseType
from ..errors import LayoutError
from ..formatting import TEXT_WIDTH, plural, wrap_lines
from ..seeds import check_step, step_note
from .flags import add_cluster_arguments, add_layout_arguments, cluster_from_args, layout_from_args, usage_error

HELP = "show which ranks share each generator stream and check the seeds (--real: draw them on workers too)"

MAX_GROUPS_SHOWN = 16
"""Sharing groups printed per generator in the table format (the JSON format has them all)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the flags of ``streams``."""
    add_layout_arguments(parser)
    parser.add_argument("--step", type=int, default=0, help="training step passed to set_step (>= 0)")
    parser.add_argument(
        "--phase", choices=[p.name for p in PhaseType], default="training", help="phase passed to set_step"
    )
    parser.add_argument("--draws", type=int, default=4, help="values drawn from each generator")
    parser.add_argument(
        "--seed-shift",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override one seed shift, e.g. tp_seed_shift=0 (repeatable)",
    )
    parser.add_argument("--real", action="store_true", help="also draw on a local cluster and compare")
    add_cluster_arguments(parser, when="--real")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="output format")


def parse_seed_shifts(items: list[str]) -> dict[str, int]:
    """``["tp_seed_shift=0", ...]`` as a dict; ``LayoutError`` naming the bad item otherwise."""
    shifts: dict[str, int] = {}
    for item in items:
        name, _, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if name not in DEFAULT_SEED_SHIFTS:
            raise LayoutError(
                f"--seed-shift {item!r}: {name!r} is not a seed shift; use one of {', '.join(DEFAULT_SEED_SHIFTS)}"
            )
        try:
            shifts[name] = int(value, 0)
        except ValueError:
            raise LayoutError(f"--seed-shift {item!r}: {value!r} is not an integer") from None
    return shifts


def _groups_text(groups: list[tuple[int, ...]], limit: int = MAX_GROUPS_SHOWN) -> str:
    text = " ".join("[" + " ".join(map(str, group)) + "]" for group in groups[:limit])
    return text + (f" ... ({len(groups) - limit} more)" if len(groups) > limit else "")


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (tuple, set)):
        return list(value)
    return str(value)


def run(args: argparse.Namespace) -> int:
    """Predict (and with ``--real`` draw) the streams, print sharing and checks.

    Returns 0 when every check passes (and real equals predicted), 1 when not, 2 when the cluster failed.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the note below says it once, in one line
        check_step(args.step)  # a negative step is refused before anything starts
        note = step_note(args.step)
        if note is not None:
            sys.stderr.write(f"fastdist-lab streams: note: {note}\n")
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from ..streams import predict

    layout = layout_from_args(args, **parse_seed_shifts(args.seed_shift))
    if args.draws < 1:
        raise LayoutError(f"--draws {args.draws} must be >= 1")
    real = None
    if args.real:
        from ..checks import draw_streams
        from ..errors import ClusterError

        try:
            with cluster_from_args(args, layout) as cluster:
                cluster.apply(layout)
                real = draw_streams(cluster, args.step, args.phase, args.draws)
        except ClusterError as error:
            return usage_error(args, error)
    device = real.devices[real.generator_index("pp")] if real is not None else "cpu"
    predicted = predict(layout, args.step, args.phase, args.draws, device=device)
    report = real if real is not None else predicted
    checks = report.check()
    diff = predicted.diff(real) if real is not None else None
    ok = bool(checks["ok"].all()) and (diff is None or diff.empty)

    if args.format == "json":
        doc: dict[str, Any] = {
            "summary": report.summary(),
            "sharing": {name: report.sharing(name) for name in report.generators},
            "checks": checks.to_dict(orient="records"),
            "ok": ok,
        }
        if diff is not None:
            doc["real"] = {"matches": diff.empty, "diff": diff.to_dict(orient="records")}
        print(json.dumps(doc, default=_json_default))
        return 0 if ok else 1

    for text in (repr(layout), repr(report)):
        print("\n".join(wrap_lines(text)))
    print()
    print(f"ranks sharing one stream (step {args.step}, {args.phase}):")
    width = max(map(len, report.generators))
    for name in report.generators:
        groups = report.sharing(name)
        line = f"  {name:<{width}}  {plural(len(groups), 'stream')}: {_groups_text(groups)}"
        print("\n".join(wrap_lines(line, indent=" " * (width + 4))))
    print()
    print("checks:")
    for row in checks.itertuples(index=False):
        label = "note" if row.check.startswith("note:") else ("ok" if row.ok else "FAIL")
        name = row.check.removeprefix("note:").strip()
        print("\n".join(wrap_lines(f"  {label:<4}  {name}: {row.detail}", indent=" " * 8)))
    if diff is not None:
        print()
        if diff.empty:
            print(f"real vs predicted: all {report.seeds.size} (rank, generator) streams match exactly")
        else:
            print(f"real vs predicted: {len(diff)} of {report.seeds.size} streams differ")
            print(diff.to_string(index=False, line_width=TEXT_WIDTH))
    return 0 if ok else 1
