"""``fastdist-lab check``: start a local cluster, apply the layout, check every group with real collectives,
then compare every rank's real generator streams with the prediction (the main job).

``--simulate threads|fake`` runs the ranks in this process instead (``SimulatedCluster``): worlds of thousands of
ranks that do not fit on the machine as processes; the output says what such a check proves."""

from __future__ import annotations

import argparse

from .flags import add_cluster_arguments, add_layout_arguments, cluster_from_args, layout_from_args, usage_error

HELP = "verify a layout with real process groups on a local cluster (gloo on CPU, NCCL on GPUs), or simulated"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the flags of ``check``."""
    add_layout_arguments(parser)
    add_cluster_arguments(parser)
    parser.add_argument("--report", default=None, help="also write the JSON report here")
    parser.add_argument("--quiet", action="store_true", help="no start-up progress on stderr")
    parser.add_argument("--verbose", action="store_true", help="also print every group with its members")


def run(args: argparse.Namespace) -> int:
    """Check the layout; 0 when every group passed, 1 when one failed, 2 for bad input or a cluster failure."""
    if args.timeout is not None and not args.timeout > 0:
        return usage_error(args, f"--timeout={args.timeout} must be > 0")
    layout = layout_from_args(args, experts=True)  # LayoutError -> exit 2 in cli.main
    from ..checks import check_layout
    from ..errors import ClusterError

    try:
        with cluster_from_args(args, layout, progress=False if args.quiet else None) as cluster:
            result = check_layout(cluster, layout, timeout=args.timeout)
    except ClusterError as error:
        return usage_error(args, error)
    print(result.to_text(verbose=args.verbose))
    if args.report:
        result.verification.save(args.report)
    return 0 if result.ok else 1
