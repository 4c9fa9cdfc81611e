"""``fastdist-lab cost``: memory per pipeline stage, bytes per group, communication time and step time of one
training step."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import CostError
from ..setup import DEFAULT_HARDWARE, HARDWARE_PRESETS, PRESETS
from .flags import (
    add_hardware_arguments,
    add_layout_arguments,
    add_training_arguments,
    hardware_from_args,
    layout_from_args,
    training_from_args,
    usage_error,
)

HELP = (
    "estimate what one training step costs on a layout: memory per stage (and whether it fits), bytes per group, "
    "communication time per dim and the step time"
)

MAX_REPLAY_RANKS = 64
"""``--replay`` starts one local process per rank: at most this many."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the flags of ``cost``."""
    add_layout_arguments(parser)
    add_training_arguments(parser)
    group = parser.add_argument_group("model")
    group.add_argument("--model", choices=tuple(PRESETS), default="llama2-7b", help="published model preset")
    group.add_argument("--seq-length", type=int, default=None, help="sequence length (default: the model's)")
    add_hardware_arguments(parser, tuple(HARDWARE_PRESETS), DEFAULT_HARDWARE)
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table", help="output format")
    replay = parser.add_argument_group("replay on a local cluster")
    replay.add_argument(
        "--replay", action="store_true", help="also run the step's collectives on real groups of local processes"
    )
    replay.add_argument(
        "--scale", type=float, default=None, help="message scale in (0, 1] (default: the largest message to 1 MiB)"
    )
    replay.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto", help="auto: NCCL on GPUs")
    replay.add_argument("--quiet", action="store_true", help="no progress bars on stderr")


def run(args: argparse.Namespace) -> int:
    """Print the estimate; 0 on success, 2 for bad input (one line on stderr)."""
    layout = layout_from_args(args, experts=True)  # LayoutError -> exit 2 in cli.main
    if args.replay and layout.has_experts:
        return usage_error(
            args,
            "--replay runs the step's collectives on the pool's groups, which has no expert groups yet; leave out "
            f"--replay or --expert-parallel={layout.expert_parallel}",
        )
    from ..cost import estimate
    from ..setup import Transformer

    try:
        changes = {} if args.seq_length is None else {"seq_length": args.seq_length}
        model = Transformer.preset(args.model, **changes)
        training = training_from_args(args)
        report = estimate(layout, model, training)
        hardware = hardware_from_args(args)
    except CostError as error:
        return usage_error(args, str(error))
    if args.scale is not None and not 0 < args.scale <= 1:
        return usage_error(args, f"--scale={args.scale} must be in (0, 1]")
    replayed = None
    if args.replay:
        try:
            replayed = _replay(args, layout, model, training, hardware)
        except Exception as error:  # CostError, ClusterError: one line, never a traceback
            return usage_error(args, error)
    if args.format == "json":
        document = report.to_dict(hardware)
        if replayed is not None:
            document["replay"] = {
                "scale": replayed.attrs["scale"],
                "backend": replayed.attrs["backend"],
                "per_dim": json.loads(replayed.reset_index().to_json(orient="records")),
            }
        print(json.dumps(document))
    elif args.format == "csv":
        for title, frame, index in (
            ("memory", report.fits(hardware), True),
            ("communication", report.communication, False),
            (f"communication time on {hardware.name}", report.communication_time(hardware), True),
            (f"step time on {hardware.name}", report.step(hardware).breakdown, True),
        ):
            print(f"# {title}")
            frame.to_csv(sys.stdout, index=index)
        if replayed is not None:
            print(f"# replay (scale {replayed.attrs['scale']:.6g}, {replayed.attrs['backend']})")
            replayed.to_csv(sys.stdout)
    else:
        print(report.to_text(hardware))
        if replayed is not None:
            attrs = replayed.attrs
            print(
                f"\nreplayed on {layout.world_size} local ranks ({attrs['backend']}), messages x {attrs['scale']:.3g}, "
                f"median of {attrs['iterations']} timed calls;\nprediction on {attrs['hardware'].name}:"
            )
            print(replayed.to_text())
    return 0


def _replay(args: argparse.Namespace, layout: Any, model: Any, training: Any, hardware: Any) -> Any:
    """Start a local cluster of the layout, apply it and replay the step (per dim)."""
    if layout.world_size > MAX_REPLAY_RANKS:
        raise CostError(
            f"--replay starts one process per rank: world_size={layout.world_size} is over {MAX_REPLAY_RANKS}; "
            "replay a smaller layout"
        )
    from ..checks import replay, verify_groups
    from ..errors import ClusterError
    from ..runtime import LocalCluster

    progress = False if args.quiet else None  # a bar only on a terminal, never into a redirected stderr
    with LocalCluster(
        layout.world_size, backend=args.backend, local_world_size=layout.local_world_size, progress=progress
    ) as cluster:
        verification = verify_groups(cluster, layout)
        if not verification.ok:
            raise ClusterError(f"the layout's groups failed their check: {verification.summary()}")
        return replay(cluster, layout, model, training, args.scale, hardware=hardware, progress=progress)
