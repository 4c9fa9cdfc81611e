"""``fastdist-lab search``: every layout and training set-up of a model on some GPUs that fits, ranked by the predicted
step time (``fastdist_lab.cost.search``)."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

from ..cost import DEFAULT_ENGINE, ENGINES, HARDWARE_PRESETS, LIMITS, PRESETS, RANKED_ROWS, RECOMPUTE, SCHEDULES
from ..cost.hardware import DEFAULT_HARDWARE
from ..errors import CostError
from .flags import add_hardware_arguments, hardware_from_args, usage_error

HELP = (
    "rank every layout and training set-up of a model on some GPUs (tensor, pipeline, virtual stages, "
    "sequence-data, data, micro-batch, recompute, sequence tensor parallel, ZeRO, schedule, rank order) that fits "
    "the GPU's memory, by predicted step time; exits 1 when none fits"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the flags of ``search``. A limit not given is absent from the parsed arguments (``SUPPRESS``):
    ``search`` then tries every value the model and the GPUs allow, as its ``LIMITS`` say."""
    question = parser.add_argument_group("what to train on what")
    question.add_argument("--model", choices=tuple(PRESETS), default="llama2-7b", help="published model preset "
                          "(default: %(default)s)")  # fmt: skip
    question.add_argument("--gpus", type=int, required=True, default=argparse.SUPPRESS,
                          help="GPUs of the job (whole nodes)")  # fmt: skip
    question.add_argument("--global-batch-size", type=int, required=True, default=argparse.SUPPRESS,
                          help="sequences per training step")  # fmt: skip
    question.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default: %(default)s)")
    add_hardware_arguments(question, tuple(HARDWARE_PRESETS), DEFAULT_HARDWARE)
    question.add_argument("--seq-length", type=int, default=argparse.SUPPRESS,
                          help="sequence length (default: the model's)")  # fmt: skip
    limits = parser.add_argument_group(
        "limits", "narrow the search; without them every value the model and the GPUs allow is tried"
    )
    for flags, name, what in (
        (("--tensor-parallel", "--tp"), "tensor_parallel", "tensor-parallel sizes (default: the divisors of a node)"),
        (("--pipeline-parallel", "--pp"), "pipeline_parallel", "pipeline-parallel sizes (default: every one)"),
        (("--virtual-pipeline-stages", "--virtual-stages"), "virtual_pipeline_stages", "virtual stages per rank"),
        (("--sequence-data-parallel", "--sdp"), "sequence_data_parallel", "sequence-data-parallel sizes"),
        (("--micro-batch-size",), "micro_batch_size", "micro-batch sizes"),
        (("--zero-stage",), "zero_stage", "ZeRO stages"),
        (("--expert-parallel", "--ep"), "expert_parallel",
         "expert-parallel sizes (default: the divisors of the experts; 1 for a dense model)"),
        (("--expert-tensor-parallel", "--etp"), "expert_tensor_parallel",
         "expert-tensor-parallel sizes (default: 1, and the tensor size for wide experts)"),
    ):
        default = LIMITS[name]
        shown = f" (default: {' '.join(map(str, default))})" if default is not None else ""
        limits.add_argument(*flags, dest=name, type=int, nargs="+", metavar="N", default=argparse.SUPPRESS,
                            help=what if "default" in what else what + shown)  # fmt: skip
    limits.add_argument("--schedule", choices=SCHEDULES, nargs="+", default=argparse.SUPPRESS,
                        help="pipeline schedules (default: every one but looped-bfs)")  # fmt: skip
    limits.add_argument(
        "--recompute",
        choices=RECOMPUTE,
        nargs="+",
        default=argparse.SUPPRESS,
        help="activation recompute (default: none and full; selective only without flash attention)",
    )
    on_off = {"choices": ("on", "off"), "nargs": "?", "const": "on", "default": argparse.SUPPRESS}
    for flag, what in (
        ("--sequence-tensor-parallel", "sequence parallel in the tensor group on (the flag alone) or off"),
        ("--pipeline-first", "pipeline ranks vary before data ranks (the flag alone), or data first (off)"),
    ):
        limits.add_argument(flag, **on_off, help=f"{what}; default: both are tried")
    limits.add_argument("--engine", default=argparse.SUPPRESS, metavar="NAME",
                        help=f"training engine: {', '.join(ENGINES)} (default: {DEFAULT_ENGINE})")  # fmt: skip
    limits.add_argument("--expert-load-imbalance", type=float, default=argparse.SUPPRESS, metavar="X",
                        help="mixture of experts: tokens of the busiest expert rank over the mean (default: 1.0)")
    limits.add_argument(
        "--allow-smaller-batch",
        action="store_true",
        default=argparse.SUPPRESS,
        help="where the batch does not divide over the data ranks, run the largest that does",
    )
    kernels = parser.add_argument_group("kernels and overlap (fixed for every set-up)")
    for flag, action, what in (
        ("--no-flash-attention", "store_false", "attention keeps its scores (no fused kernel)"),
        ("--no-overlap-data-parallel", "store_false", "gradients reduced after the last backward"),
        ("--no-overlap-pipeline-parallel", "store_false", "blocking sends between stages"),
        ("--overlap-tensor-parallel", "store_true", "tensor-parallel collectives overlap their GEMMs"),
        ("--torch-compile", "store_true", "the model runs under torch.compile: element-wise work fused"),
    ):
        name = flag.removeprefix("--no-").removeprefix("--").replace("-", "_")  # the Training field it sets
        kernels.add_argument(flag, dest=name, action=action, default=argparse.SUPPRESS, help=what)
    output = parser.add_argument_group("output")
    output.add_argument("--top", type=int, default=RANKED_ROWS, help="rows to show (default: %(default)s)")
    output.add_argument("--format", choices=("table", "json", "csv"), default="table",
                        help="output format (default: %(default)s)")  # fmt: skip
    output.add_argument("--quiet", action="store_true", help="no progress bar (it shows on a terminal only)")


def search_limits(args: argparse.Namespace) -> dict[str, object]:
    """The ``search`` keyword arguments the flags give: only what was given, spelled as ``LIMITS`` names it."""
    given = {name: getattr(args, name) for name in LIMITS if hasattr(args, name)}
    for name in ("sequence_tensor_parallel", "pipeline_first"):
        if name in given:
            given[name] = given[name] == "on"
    given["top"] = args.top
    return given


def run(args: argparse.Namespace) -> int:
    """Search and print the best rows; 0 on success, 1 when no set-up fits the memory, 2 for bad input (one line on
    stderr)."""
    from ..cost import search
    from ..cost.ranking import ranked_legend, ranked_lines, search_summary
    from ..runtime.progress import finish, resolve_progress

    progress = resolve_progress(False if args.quiet else None, "search", leave=False)
    try:
        result = search(
            args.model,
            args.gpus,
            gpus_per_node=args.gpus_per_node,
            hardware=hardware_from_args(args),
            global_batch_size=args.global_batch_size,
            seq_length=getattr(args, "seq_length", None),
            progress=progress,
            **search_limits(args),
        )
    except CostError as error:
        finish(progress)
        return usage_error(args, str(error))
    if args.format == "json":
        document = {
            "model": args.model,
            "seq_length": result.model.seq_length,
            "gpus": result.gpus,
            "gpus_per_node": result.gpus_per_node,
            "hardware": result.hardware.name,
            "global_batch_size": args.global_batch_size,
            "searched": result.searched,
            "dropped": result.dropped,
            "pruned": result.pruned,
            "rows": json.loads(result.frame.to_json(orient="records")),
        }
        print(json.dumps(document))
    elif args.format == "csv":
        result.frame.to_csv(sys.stdout, index_label="row")
    else:
        title = f"{args.model} (sequence {result.model.seq_length}), global batch {args.global_batch_size} on "
        print(textwrap.fill(title + search_summary(result), 120))
        if len(result):
            print()
            print("\n".join(ranked_lines(result)))
            print()
            print(textwrap.fill(ranked_legend(result), 120))
    return 0 if len(result) else 1
