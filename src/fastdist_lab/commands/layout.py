"""``fastdist-lab layout``: print the rank table and every dim's groups, or one rank's dims."""

from __future__ import annotations

import argparse
import json
import sys

from ..config import DIM_NAMES
from ..seeds import generator_seeds
from .common import add_layout_arguments, layout_from_args

HELP = "print which rank holds which coordinates and which ranks form each group"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the flags of ``layout``."""
    add_layout_arguments(parser)
    parser.add_argument("--rank", type=int, default=None, help="show one rank's dims and seeds instead")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table")


def _members(members: object) -> list[int]:
    return [int(m) for m in members]  # type: ignore[attr-defined]


def _print_rank(layout, rank: int, fmt: str) -> None:
    config = layout.config(rank)
    dims = [
        {
            "dim": d.name,
            "size": d.size,
            "rank": d.rank,
            "global_ranks": repr(d.global_ranks),
            "members": _members(d.global_ranks),
        }
        for d in config.distributed_dims.values()
    ]
    seeds = generator_seeds(config)
    if fmt == "json":
        print(json.dumps({"coordinates": config.coordinates(), "dims": dims, "seeds": seeds}, indent=2))
        return
    import pandas as pd

    frame = pd.DataFrame(dims).drop(columns="members").set_index("dim")
    if fmt == "csv":
        frame.to_csv(sys.stdout)
        return
    print(repr(layout))
    print("rank " + ", ".join(f"{k}={v}" for k, v in config.coordinates().items() if k != "rank") + f" (rank {rank})")
    print(frame.to_string())
    print("seeds after set_step(0, training): " + ", ".join(f"{k}={v}" for k, v in seeds.items()))


def run(args: argparse.Namespace) -> int:
    """Print the layout the flags describe; return the exit code."""
    layout = layout_from_args(args)
    if args.rank is not None:
        _print_rank(layout, args.rank, args.format)
        return 0
    ranks = layout.ranks
    if args.format == "json":
        doc = {
            "layout": layout.summary(),
            "ranks": ranks.reset_index().to_dict(orient="records"),
            "groups": {name: layout.groups(name).tolist() for name in DIM_NAMES},
        }
        print(json.dumps(doc))
    elif args.format == "csv":
        frame = ranks.copy()
        for name in DIM_NAMES:
            groups = layout.groups(name)
            text = [" ".join(map(str, row)) for row in groups.tolist()]
            index = [0] * layout.world_size
            for i, row in enumerate(groups.tolist()):
                for member in row:
                    index[member] = i
            frame[f"{name}_group"] = [text[i] for i in index]
        frame.to_csv(sys.stdout)
    else:
        print(repr(layout))
        print(ranks.to_string())
        print()
        for name in DIM_NAMES:
            groups = layout.groups(name)
            rows = " ".join("[" + " ".join(map(str, row)) + "]" for row in groups.tolist())
            print(f"{name} (size {groups.shape[1]}, {groups.shape[0]} groups): {rows}")
    return 0
