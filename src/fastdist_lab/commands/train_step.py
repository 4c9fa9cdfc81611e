"""``fastdist-lab train-step``: one real training step of a small GPT on the layout's groups (processes, or threads
with ``--simulate threads``) against the same step in one process; prints the worst parameter rows and a count.

Exit codes: 0 when every tensor agrees within the tolerance (with ``--dropout``: every dropout judgment passed),
1 when something does not, 2 for bad input or a cluster that could not run the step (one line on stderr)."""

from __future__ import annotations

import argparse
import sys

from .flags import add_cluster_arguments, add_layout_arguments, cluster_from_args, error_line, layout_from_args

HELP = "run one training step of a small GPT on the layout's groups and compare it with one process"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the flags of ``train-step``."""
    add_layout_arguments(parser)
    parser.add_argument(
        "--sequence-tensor-parallel",
        action="store_true",
        help="split the residual stream along the sequence over the tensor group (needs tensor-parallel > 1)",
    )
    parser.add_argument(
        "--schedule",
        default="1f1b",
        help="torch's pipeline schedule: gpipe, 1f1b, interleaved-1f1b or looped-bfs (checks.SCHEDULES)",
    )
    parser.add_argument(
        "--micro-batches", type=int, default=None, help="micro-batches per data rank (default: twice the pipeline)"
    )
    parser.add_argument(
        "--virtual-stages", type=int, default=2, help="stages per pipeline rank (interleaved-1f1b, looped-bfs)"
    )
    parser.add_argument("--layers", type=int, default=4, help="decoder layers of the model")
    parser.add_argument(
        "--dropout", type=float, default=0.0, help="dropout probability; > 0 judges the dropout masks instead"
    )
    parser.add_argument(
        "--zero-stage", type=int, choices=(0, 1), default=1, help="1: reduce-scatter + all-gather; 0: all-reduce"
    )
    parser.add_argument("--model-seed", type=int, default=0, help="seed of the initial weights and the tokens")
    parser.add_argument(
        "--tolerance", type=float, default=1e-5, help="largest relative error of a gradient or weight that agrees"
    )
    parser.add_argument("--rows", type=int, default=5, help="how many of the worst parameter rows to print")
    add_cluster_arguments(parser)
    parser.add_argument("--quiet", action="store_true", help="no start-up progress on stderr")


def _bad(message: str) -> int:
    sys.stderr.write(f"fastdist-lab train-step: error: {message}\n")
    return 2


def run(args: argparse.Namespace) -> int:
    """Run the step and compare; 0 when everything agrees, 1 when not, 2 for bad input or a cluster failure."""
    if args.timeout is not None and not args.timeout > 0:
        return _bad(f"--timeout={args.timeout} must be > 0")
    if args.simulate == "fake":
        return _bad("--simulate fake runs no collective, so no training step; use --simulate threads")
    if args.rows < 0:
        return _bad(f"--rows={args.rows} must be >= 0")
    if not args.tolerance > 0:
        return _bad(f"--tolerance={args.tolerance} must be > 0")
    extra = {"sequence_tensor_parallel": True} if args.sequence_tensor_parallel else {}
    layout = layout_from_args(args, **extra)  # LayoutError -> exit 2 in cli.main
    from ..checks import TinyGPT, check_training
    from ..checks.train_step import training_settings
    from ..errors import ClusterError

    options = dict(schedule=args.schedule, micro_batches=args.micro_batches, virtual_stages=args.virtual_stages)
    options.update(dropout=args.dropout, zero_stage=args.zero_stage)
    model, _ = training_settings(layout, TinyGPT(layers=args.layers), **options)  # bad input: before any rank runs
    options.update(seed=args.model_seed, timeout=args.timeout, tolerance=args.tolerance)
    try:
        with cluster_from_args(args, layout, progress=False if args.quiet else None) as cluster:
            if not args.quiet and sys.stderr.isatty():
                sys.stderr.write(f"one training step on {layout.world_size} ranks and in this process...\n")
            result = check_training(cluster, layout, model=model, **options)
    except ClusterError as error:
        return _bad(error_line(error))
    print(result.summary(rows=args.rows))
    return 0 if result.ok else 1
