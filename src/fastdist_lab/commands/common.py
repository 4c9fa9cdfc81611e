"""Flags shared by every sub-command that takes a layout, and the ``Layout`` they describe."""

from __future__ import annotations

import argparse

from ..layout import Layout

DEFAULT_LAYOUT = {"world_size": 8, "tensor_parallel": 2, "pipeline_parallel": 2, "sequence_data_parallel": 2}
"""The main job's default layout: world 8, tensor 2, pipeline 2, sequence-data 2 (one node)."""


def add_layout_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--world-size``, ``--local-world-size``, the parallel factors, ``--pipeline-first`` and ``--seed``."""
    group = parser.add_argument_group("layout")
    group.add_argument("--world-size", type=int, default=DEFAULT_LAYOUT["world_size"], help="number of ranks")
    group.add_argument(
        "--local-world-size", type=int, default=None, help="ranks (GPUs) per node (default: world size, one node)"
    )
    group.add_argument("--tensor-parallel", "--tp", type=int, default=DEFAULT_LAYOUT["tensor_parallel"])
    group.add_argument("--pipeline-parallel", "--pp", type=int, default=DEFAULT_LAYOUT["pipeline_parallel"])
    group.add_argument("--sequence-data-parallel", "--sdp", type=int, default=DEFAULT_LAYOUT["sequence_data_parallel"])
    group.add_argument("--pipeline-first", action="store_true", help="pipeline ranks vary before data ranks")
    group.add_argument("--seed", type=int, default=1234)
    group.add_argument("--reproducible-init", action="store_true")


def layout_from_args(args: argparse.Namespace, **extra: object) -> Layout:
    """The ``Layout`` the layout flags describe (raises ``LayoutError`` when invalid)."""
    return Layout(
        world_size=args.world_size,
        local_world_size=args.world_size if args.local_world_size is None else args.local_world_size,
        tensor_parallel=args.tensor_parallel,
        pipeline_parallel=args.pipeline_parallel,
        sequence_data_parallel=args.sequence_data_parallel,
        pipeline_first=args.pipeline_first,
        seed=args.seed,
        reproducible_init=args.reproducible_init,
        **extra,  # type: ignore[arg-type]
    )
