"""Flags shared by every sub-command that takes a layout, and the ``Layout`` they describe."""

from __future__ import annotations

import argparse

from ..layout import Layout

DEFAULT_LAYOUT = {"world_size": 8, "tensor_parallel": 2, "pipeline_parallel": 2, "sequence_data_parallel": 2}
"""The main job's default layout: world 8, tensor 2, pipeline 2, sequence-data 2 (one node)."""


def add_layout_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--world-size``, ``--local-world-size``, the parallel factors, ``--pipeline-first`` and ``--seed``."""
    group = parser.add_argument_group("layout")
    group.add_argument(
        "--world-size", type=int, default=None, help=f"number of ranks (default {DEFAULT_LAYOUT['world_size']})"
    )
    group.add_argument(
        "--local-world-size", type=int, default=None, help="ranks (GPUs) per node (default: world size, one node)"
    )
    group.add_argument("--tensor-parallel", "--tp", type=int, default=None, help="default 2")
    group.add_argument("--pipeline-parallel", "--pp", type=int, default=None, help="default 2")
    group.add_argument("--sequence-data-parallel", "--sdp", type=int, default=None, help="default 2")
    group.add_argument("--pipeline-first", action="store_true", help="pipeline ranks vary before data ranks")
    group.add_argument("--seed", type=int, default=1234)
    group.add_argument("--reproducible-init", action="store_true")


SHAPE_FLAGS = {
    "tensor_parallel": "--tensor-parallel",
    "pipeline_parallel": "--pipeline-parallel",
    "sequence_data_parallel": "--sequence-data-parallel",
}
"""The layout flags that set a parallel factor (``None`` when not given), with their spelling."""


def given_shape_flags(args: argparse.Namespace) -> list[str]:
    """The parallel-factor flags (and ``--pipeline-first``) given on the command line."""
    given = [flag for name, flag in SHAPE_FLAGS.items() if getattr(args, name) is not None]
    return given + (["--pipeline-first"] if args.pipeline_first else [])


def layout_from_args(args: argparse.Namespace, **extra: object) -> Layout:
    """The ``Layout`` the layout flags describe, defaults filled in (raises ``LayoutError`` when invalid)."""
    world = DEFAULT_LAYOUT["world_size"] if args.world_size is None else args.world_size
    factors = {
        name: DEFAULT_LAYOUT[name] if getattr(args, name) is None else getattr(args, name) for name in SHAPE_FLAGS
    }
    return Layout(
        world_size=world,
        local_world_size=world if args.local_world_size is None else args.local_world_size,
        **factors,
        pipeline_first=args.pipeline_first,
        seed=args.seed,
        reproducible_init=args.reproducible_init,
        **extra,  # type: ignore[arg-type]
    )
