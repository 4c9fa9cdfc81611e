"""``fastdist-lab cost``: memory per pipeline stage, bytes per group and communication time of one training step."""

from __future__ import annotations

import argparse
import json
import sys

from ..cost import HARDWARE_PRESETS, PRESETS, RECOMPUTE, CostError
from .common import add_layout_arguments, layout_from_args

HELP = "estimate what one training step costs on a layout: memory per stage, bytes per group, time per dim"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the flags of ``cost``."""
    add_layout_arguments(parser)
    group = parser.add_argument_group("model and training")
    group.add_argument("--model", choices=tuple(PRESETS), default="llama2-7b", help="published model preset")
    group.add_argument("--seq-length", type=int, default=None, help="sequence length (default: the model's)")
    group.add_argument("--micro-batch-size", type=int, default=1, help="sequences per micro-batch on each data rank")
    group.add_argument(
        "--num-microbatches", type=int, default=None, help="micro-batches per step (default: pipeline stages)"
    )
    zero = group.add_mutually_exclusive_group()
    zero.add_argument("--zero-stage", type=int, default=None, help="ZeRO stage 0-3 (default 0)")
    zero.add_argument("--distributed-optimizer", action="store_true", help="shard optimizer states (ZeRO 1)")
    group.add_argument("--sequence-tensor-parallel", action="store_true", help="sequence parallel in the tensor group")
    group.add_argument(
        "--recompute", choices=RECOMPUTE, default="none", help="activation recomputation in the backward pass"
    )
    parser.add_argument("--hardware", choices=tuple(HARDWARE_PRESETS), default="dgx-h100", help="link speeds")
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table", help="output format")


def run(args: argparse.Namespace) -> int:
    """Print the estimate; 0 on success, 2 for bad input (one line on stderr)."""
    layout = layout_from_args(args)  # LayoutError -> exit 2 in cli.main
    from ..cost import Training, Transformer, estimate

    try:
        changes = {} if args.seq_length is None else {"seq_length": args.seq_length}
        model = Transformer.preset(args.model, **changes)
        training = Training(
            micro_batch_size=args.micro_batch_size,
            num_microbatches=args.num_microbatches,
            distributed_optimizer=args.distributed_optimizer,
            zero_stage=args.zero_stage,
            sequence_tensor_parallel=args.sequence_tensor_parallel,
            recompute=args.recompute,
        )
        report = estimate(layout, model, training)
    except CostError as error:
        sys.stderr.write(f"fastdist-lab cost: error: {error}\n")
        return 2
    if args.format == "json":
        print(json.dumps(report.to_dict(args.hardware)))
    elif args.format == "csv":
        for title, frame, index in (
            ("memory", report.memory, True),
            ("communication", report.communication, False),
            (f"time on {args.hardware}", report.time(args.hardware), True),
        ):
            print(f"# {title}")
            frame.to_csv(sys.stdout, index=index)
    else:
        print(report.to_text(args.hardware))
    return 0
