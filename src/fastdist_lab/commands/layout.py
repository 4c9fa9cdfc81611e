"""``fastdist-lab layout``: print the rank table and every dim's groups, or one rank's dims.

``--from FILE_OR_COMMAND_LINE`` reads the layout from a framework's config instead of the flags: a Fast-LLM YAML,
a torchtitan TOML or launch line, a Megatron-LM command line or launch script. When no ``Layout`` reproduces it,
the framework's own groups are printed and the output says so.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..config import DIM_NAMES, LayoutError
from ..seeds import generator_seeds
from .common import add_layout_arguments, given_shape_flags, layout_from_args

HELP = "print which rank holds which coordinates and which ranks form each group"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the flags of ``layout``."""
    add_layout_arguments(parser)
    parser.add_argument("--rank", type=int, default=None, help="show one rank's dims and seeds instead")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table")
    parser.add_argument(
        "--from",
        dest="from_config",
        default=None,
        metavar="FILE_OR_COMMAND_LINE",
        help="read the layout from a Fast-LLM YAML, a torchtitan TOML or launch line, or a Megatron-LM command line "
        "or script (--world-size / --local-world-size override what it says)",
    )
    parser.add_argument(
        "--torchtitan-version",
        default=None,
        help="torchtitan vintage for --from: 2025-12, 2026-01 or 2026-08 (current)",
    )


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


def _load(args: argparse.Namespace):
    """The ``LoadedConfig`` of ``--from``; every failure as one ``LayoutError`` line."""
    from ..conventions import ConventionError, load_config

    given = given_shape_flags(args)
    if given:
        raise LayoutError(f"--from reads the layout from the config; drop {', '.join(given)}")
    try:
        return load_config(
            args.from_config,
            world_size=args.world_size,
            local_world_size=args.local_world_size,
            version=args.torchtitan_version,
        )
    except (ConventionError, LayoutError) as error:
        raise LayoutError(" ".join(str(error).split())) from None
    except OSError as error:
        raise LayoutError(f"cannot read {args.from_config!r}: {error.strerror or error}") from None


def _print_convention(loaded, fmt: str) -> None:
    groups = {name: rows.tolist() for name, rows in loaded.named_groups().items()}
    if fmt == "json":
        doc = {"framework": loaded.framework, "source": loaded.source, "description": loaded.description}
        print(json.dumps({**doc, "layout": None, "reason": loaded.reason, "groups": groups}))
        return
    if fmt == "csv":
        print("group,members")
        for name, rows in groups.items():
            for row in rows:
                print(f"{name},{' '.join(map(str, row))}")
        return
    print(loaded.description)
    print()
    for name, rows in groups.items():
        text = " ".join("[" + " ".join(map(str, row)) + "]" for row in rows)
        print(f"{name} (size {len(rows[0])}, {len(rows)} groups): {text}")
    print()
    print(f"No Layout reproduces this {loaded.framework} configuration: {loaded.reason}")


def run(args: argparse.Namespace) -> int:
    """Print the layout the flags (or ``--from``) describe; return the exit code."""
    loaded = None
    if args.from_config is not None:
        loaded = _load(args)
        if loaded.layout is None:
            if args.rank is not None:
                raise LayoutError(f"--rank needs a Layout and none reproduces this config: {loaded.reason}")
            _print_convention(loaded, args.format)
            return 0
        layout = loaded.layout
    else:
        layout = layout_from_args(args)
    if loaded is not None and args.format == "table":
        print(loaded.description)
        print()
    if args.rank is not None:
        _print_rank(layout, args.rank, args.format)
        return 0
    ranks = layout.ranks
    if args.format == "json":
        doc = {
            **({"framework": loaded.framework, "description": loaded.description} if loaded is not None else {}),
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
