"""``fastdist-lab search``: every layout and training set-up of a model on some GPUs that fits, ranked by the predicted
step time (``fastdist_lab.cost.search``)."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import Any

from ..cost import LIMITS, RANKED_ROWS
from ..cost.search.candidates import SEARCH_SETTINGS
from ..errors import CostError
from ..setup import DEFAULT_HARDWARE, HARDWARE_PRESETS, PRESETS
from .flags import add_hardware_arguments, flag_names, flag_options, hardware_from_args, usage_error

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
    fixed = parser.add_argument_group("fixed for every set-up (as setup.Training)")
    for name, spec in SEARCH_SETTINGS.items():  # declared once, beside each field (setup.Training's Settings)
        if spec.search == "varied":
            limits.add_argument(*[spec.flag, *spec.aliases], dest=name, **varied_options(spec, LIMITS[name]))
        else:
            options = {**flag_options(name, spec, LIMITS[name]), "default": argparse.SUPPRESS}
            fixed.add_argument(*flag_names(spec, LIMITS[name]), dest=name, **options)
    limits.add_argument(
        "--allow-smaller-batch",
        action="store_true",
        default=argparse.SUPPRESS,
        help="where the batch does not divide over the data ranks, run the largest that does",
    )
    output = parser.add_argument_group("output")
    output.add_argument("--top", type=int, default=RANKED_ROWS, help="rows to show (default: %(default)s)")
    output.add_argument("--format", choices=("table", "json", "csv"), default="table",
                        help="output format (default: %(default)s)")  # fmt: skip
    output.add_argument("--quiet", action="store_true", help="no progress bar (it shows on a terminal only)")


def varied_options(spec: Any, tried: Any) -> dict[str, Any]:
    """The ``add_argument`` options of a limit the search varies (``spec``, a ``setup.Setting``; ``tried``: the values
    it tries by default, ``None`` for every one the model and the GPUs allow): one or more values, or for a flag
    ``on`` / ``off`` (both tried when not given)."""
    if spec.kind == "flag":
        return {"choices": ("on", "off"), "nargs": "?", "const": "on", "default": argparse.SUPPRESS,
                "help": f"{spec.help}; default: both are tried"}  # fmt: skip
    shown = "" if tried is None or "default" in spec.help else f" (default: {' '.join(map(str, tried))})"
    options: dict[str, Any] = {"nargs": "+", "default": argparse.SUPPRESS, "help": spec.help + shown}
    if spec.kind == "choice":
        return {**options, "choices": spec.choices, "metavar": "NAME",
                "help": f"{spec.help}: {', '.join(spec.choices)}{shown}"}  # fmt: skip
    return {**options, "type": int, "metavar": "N"}


def search_limits(args: argparse.Namespace) -> dict[str, object]:
    """The ``search`` keyword arguments the flags give: only what was given, spelled as ``LIMITS`` names it."""
    given = {name: getattr(args, name) for name in LIMITS if hasattr(args, name)}
    for name, spec in SEARCH_SETTINGS.items():
        if name in given and spec.search == "varied" and spec.kind == "flag":
            given[name] = given[name] == "on"
    given["top"] = args.top
    return given


def run(args: argparse.Namespace) -> int:
    """Search and print the best rows; 0 on success, 1 when no set-up fits the memory, 2 for bad input (one line on
    stderr)."""
    from ..cost import search
    from ..cost.search.ranking import ranked_legend, ranked_lines, search_summary
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
