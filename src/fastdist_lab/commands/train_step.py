"""``fastdist-lab train-step``: one real training step of a small GPT on the layout's groups (processes, or threads
with ``--simulate threads``) against the same step in one process, with a mixture of experts when the layout has
experts (``--ep`` / ``--etp``, ``--num-experts``); prints the worst parameter rows and a count. The
training set-up takes the same flags and defaults as ``fastdist-lab cost`` (``flags.add_training_arguments``), so a
row of ``fastdist-lab search`` runs as it stands, e.g. ``--schedule zero-bubble --zero-stage 1 --recompute full``.
``--engine`` is a pricing setting (``cost.ENGINE_TRAITS``: what each engine overlaps and fuses): the step runs the
lab's own code, whose numbers are the same under every engine, and says so on its first line when the engine is not
the default; ``--torch-compile`` likewise (the step runs eager).

Exit codes: 0 when every tensor agrees within the tolerance (with ``--dropout``: every dropout judgment passed),
1 when something does not, 2 for bad input or a cluster that could not run the step (one line on stderr)."""

from __future__ import annotations

import argparse
import sys

from .flags import (
    add_cluster_arguments,
    add_layout_arguments,
    add_training_arguments,
    cluster_from_args,
    layout_from_args,
    training_from_args,
    usage_error,
)

ENGINE_NOTE = (
    "engine: {engine} is priced by `fastdist-lab cost` (its overlap and kernels); this step runs the lab's own code, "
    "whose numbers do not depend on the engine"
)
"""The line ``train-step`` prints first for an engine other than the default (``--engine`` prices, it does not run)."""

COMPILE_NOTE = (
    "torch.compile is priced by `fastdist-lab cost` (element-wise work fused); this step runs the lab's own code in "
    "eager mode"
)
"""The line ``train-step`` prints for ``--torch-compile`` (it prices, it does not compile)."""

HELP = "run one training step of a small GPT on the layout's groups and compare it with one process"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the flags of ``train-step``."""
    add_layout_arguments(parser)
    add_training_arguments(parser)
    parser.add_argument("--layers", type=int, default=4, help="decoder layers of the model")
    parser.add_argument(
        "--num-experts",
        type=int,
        default=None,
        help="experts of each MoE layer when the layout has experts (--ep / --etp; default: max(4, 2 * EP))",
    )
    parser.add_argument(
        "--dropout", type=float, default=0.0, help="dropout probability; > 0 judges the dropout masks instead"
    )
    parser.add_argument("--model-seed", type=int, default=0, help="seed of the initial weights and the tokens")
    parser.add_argument(
        "--tolerance", type=float, default=1e-5, help="largest relative error of a gradient or weight that agrees"
    )
    parser.add_argument("--rows", type=int, default=5, help="how many of the worst parameter rows to print")
    add_cluster_arguments(parser)
    parser.add_argument("--quiet", action="store_true", help="no start-up progress on stderr")


def run(args: argparse.Namespace) -> int:
    """Run the step and compare; 0 when everything agrees, 1 when not, 2 for bad input or a cluster failure."""
    if args.timeout is not None and not args.timeout > 0:
        return usage_error(args, f"--timeout={args.timeout} must be > 0")
    if args.simulate == "fake":
        return usage_error(args, "--simulate fake runs no collective, so no training step; use --simulate threads")
    if args.rows < 0:
        return usage_error(args, f"--rows={args.rows} must be >= 0")
    if not args.tolerance > 0:
        return usage_error(args, f"--tolerance={args.tolerance} must be > 0")
    layout = layout_from_args(args, experts=True)  # LayoutError -> exit 2 in cli.main
    from ..checks import TinyGPT, check_training
    from ..checks.train_step import training_settings
    from ..errors import ClusterError, CostError
    from ..setup import DEFAULT_ENGINE

    try:
        training = training_from_args(args)
    except CostError as error:
        return usage_error(args, str(error))
    experts = max(4, 2 * layout.expert_parallel) if args.num_experts is None else args.num_experts
    base = TinyGPT(layers=args.layers, num_experts=experts if layout.has_experts else 0)
    model, _, _ = training_settings(layout, training, base, args.dropout)  # before any rank
    options = dict(training=training, model=model, dropout=args.dropout, seed=args.model_seed)
    options.update(timeout=args.timeout, tolerance=args.tolerance)
    try:
        with cluster_from_args(args, layout, progress=False if args.quiet else None) as cluster:
            if not args.quiet and sys.stderr.isatty():
                sys.stderr.write(f"one training step on {layout.world_size} ranks and in this process...\n")
            result = check_training(cluster, layout, **options)
    except ClusterError as error:
        return usage_error(args, error)
    if training.engine != DEFAULT_ENGINE:
        print(ENGINE_NOTE.format(engine=training.engine))
    if training.torch_compile:
        print(COMPILE_NOTE)
    print(result.summary(rows=args.rows))
    return 0 if result.ok else 1
