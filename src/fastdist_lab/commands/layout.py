"""``fastdist-lab layout``: print the rank table and every dim's groups, or one rank's dims.

``--from FILE_OR_COMMAND_LINE`` reads the layout from a framework's config instead of the flags: a Fast-LLM YAML,
a torchtitan TOML or launch line, a Megatron-LM command line or launch script. When no ``Layout`` reproduces it,
the framework's own groups are printed and the output says so.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from typing import Any

import numpy as np

from ..config import DistributedConfig
from ..errors import LayoutError
from ..experts import EXPERT_DIM_NAMES, held_experts
from ..formatting import members_text, plural, quoted
from ..layout import Layout
from ..seeds import generator_seeds
from ..validation import check_digits
from .flags import add_layout_arguments, config_from_args, given_shape_flags, layout_from_args

HELP = "print which rank holds which coordinates and which ranks form each group"

SUMMARY_LIMIT = 4096
"""Worlds above this many ranks are summarised unless ``--all-rows`` is given."""

CSV_MEMBERS = 64
"""The CSV format lists a rank's group member by member up to this size (else it names the group)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the flags of ``layout``."""
    add_layout_arguments(parser)
    parser.add_argument(
        "--rank",
        type=int,
        default=None,
        help="show one rank's groups and seeds instead (any world size; with experts, its expert groups too)",
    )
    parser.add_argument(
        "--num-experts",
        type=int,
        default=None,
        metavar="E",
        help="with --rank and experts: name the experts the rank holds (E / EP consecutive experts per expert "
        "rank; without it, the rank's expert slot)",
    )
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")
    parser.add_argument(
        "--all-rows",
        action="store_true",
        help=f"list every rank and group even above {SUMMARY_LIMIT:,} ranks (else a summary is printed)",
    )
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
        help="torchtitan vintage for --from: 2026-08 (today's meshes), 2026-01 or 2025-12 (flattened dp_shard_cp) "
        "(default: 2026-08)",
    )


JSON_MEMBERS = 65536
"""Groups up to this size are listed member by member in the JSON format of ``--rank``."""


def _expert_view(layout: Layout | None, rank: int, num_experts: int | None) -> dict[str, Any] | None:
    """``rank``'s expert coordinates, what it holds (``held_experts``) and its expert groups (None without
    experts; ``--num-experts`` without experts is refused in one line)."""
    if layout is None or not layout.has_experts:
        if num_experts is not None:
            raise LayoutError(f"--num-experts {num_experts} needs a layout with experts (--expert-parallel > 1)")
        return None
    coordinates = layout.expert_grid.coordinates_of(rank)
    dims = []
    for name in EXPERT_DIM_NAMES:
        members = layout.group_of(name, rank)
        dims.append({"dim": name, "size": len(members), "rank": int(np.flatnonzero(members == rank)[0]),
                     "members": members})  # fmt: skip
    return {
        "coordinates": {f"{axis}_rank": coordinates[axis] for axis in ("expert", "expert_tensor", "expert_data")},
        "holds": held_experts(coordinates["expert"], layout.expert_parallel, num_experts),
        "dims": dims,
    }


def _listed(dim: dict[str, Any]) -> dict[str, Any]:
    """A dim of ``--rank``'s JSON: its members listed up to ``JSON_MEMBERS``, else ``None``."""
    return {**dim, "members": [int(m) for m in dim["members"]] if dim["size"] <= JSON_MEMBERS else None}


def _print_rank(config: DistributedConfig, fmt: str, layout: Layout | None = None, num_experts: int | None = None):
    experts = _expert_view(layout, config.rank, num_experts)
    expert_dims = experts["dims"] if experts is not None else []
    dims = [
        {"dim": d.name, "size": d.size, "rank": d.rank, "members": d.global_ranks}
        for d in config.distributed_dims.values()
    ]
    seeds = generator_seeds(config)
    if fmt == "json":
        dense = [{**_listed(d), "global_ranks": repr(d["members"])} for d in dims]
        doc = {"coordinates": config.coordinates(), "dims": dense, "seeds": seeds}
        if experts is not None:
            doc["experts"] = {**experts, "dims": [_listed(d) for d in expert_dims]}
        print(json.dumps(doc, indent=2))
        return
    import pandas as pd

    rows = [{**d, "members": members_text(d["members"])} for d in dims + expert_dims]
    frame = pd.DataFrame(rows).set_index("dim")
    if fmt == "csv":
        frame.to_csv(sys.stdout)
        return
    print(repr(config) if layout is None or not layout.has_experts else repr(layout))
    print(f"rank {config.rank}: " + ", ".join(f"{k}={v}" for k, v in config.coordinates().items() if k != "rank"))
    if experts is not None:
        where = ", ".join(f"{k}={v}" for k, v in experts["coordinates"].items())
        print(f"experts: {where}; holds {experts['holds']}")
    print(frame.to_string())
    print("seeds after set_step(0, training): " + ", ".join(f"{k}={v}" for k, v in seeds.items()))


def _summary(layout: Layout, fmt: str) -> None:
    """A world too large to list: its sizes, every dim's topology, and the first and last ranks' coordinates."""
    topology = layout.topology()
    note = f"{layout.world_size:,} ranks: rows not listed (more than {SUMMARY_LIMIT:,}); --all-rows lists every one"
    if fmt == "json":
        doc = {"layout": layout.summary(), "topology": topology.reset_index().to_dict(orient="records"), "note": note}
        print(json.dumps(doc))
        return
    if fmt == "csv":
        topology.to_csv(sys.stdout)
        return
    import pandas as pd

    ranks = layout.ranks
    shown = pd.concat([ranks.head(4), ranks.tail(4)])
    print(repr(layout))
    print(note)
    print(shown.to_string())
    print()
    print(topology.to_string())
    for name in layout.group_dims:
        groups = layout.groups(name)
        print(f"{name} (size {groups.shape[1]:,}, {plural(groups.shape[0], 'group')}): first {members_text(groups[0])}")


def _load(args: argparse.Namespace) -> Any:
    """The ``LoadedConfig`` of ``--from``; every failure as one ``LayoutError`` line.

    A source that gives no world size (a Fast-LLM YAML, where torchrun's ``WORLD_SIZE`` gives it) takes
    ``--world-size``, else ``WORLD_SIZE`` (and ``LOCAL_WORLD_SIZE``) from the environment, as Fast-LLM does.
    """
    from ..conventions import load_config
    from ..errors import ConventionError, WorldSizeNeeded

    given = given_shape_flags(args)
    if given:
        raise LayoutError(f"--from reads the layout from the config; drop {', '.join(given)}")
    if not args.from_config.strip():
        raise LayoutError("--from is empty: give a config file, its text or a launch line")
    world, local = args.world_size, args.local_world_size
    load = functools.partial(load_config, args.from_config, version=args.torchtitan_version)
    try:
        try:
            return load(world_size=world, local_world_size=local)
        except WorldSizeNeeded as needed:
            if world is not None or not os.environ.get("WORLD_SIZE", "").strip():
                message = str(needed).split("; pass")[0]
                raise LayoutError(f"{message}; pass --world-size N (or set WORLD_SIZE=N)") from None
            world = _environment_size("WORLD_SIZE")
            if local is None and os.environ.get("LOCAL_WORLD_SIZE", "").strip():
                local = _environment_size("LOCAL_WORLD_SIZE")
            return load(world_size=world, local_world_size=local)
    except (ConventionError, LayoutError) as error:
        raise LayoutError(" ".join(str(error).split())) from None
    except OSError as error:
        raise LayoutError(f"cannot read {quoted(args.from_config)}: {error.strerror or error}") from None


def _environment_size(name: str) -> int:
    value = check_digits(f"{name} in the environment", os.environ[name].strip())
    if not value.isdigit() or int(value) < 1:
        raise LayoutError(f"{name}={quoted(value)} in the environment is not a number of ranks")
    return int(value)


def _print_convention(loaded: Any, fmt: str) -> None:
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
        print(f"{name} (size {len(rows[0])}, {plural(len(rows), 'group')}): {text}")
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
        if args.format == "table":
            print(loaded.description)
            print()
    elif args.rank is not None and args.expert_parallel == 1 and args.expert_tensor_parallel is None:
        _print_rank(config_from_args(args, args.rank), args.format, None, args.num_experts)  # any world size
        return 0
    else:  # with --rank and experts: the whole-world Layout holds the expert groups
        layout = layout_from_args(args, experts=True)
    if args.rank is not None:
        _print_rank(layout.config(args.rank), args.format, layout, args.num_experts)
        return 0
    if layout.world_size > SUMMARY_LIMIT and not args.all_rows:
        _summary(layout, args.format)
        return 0
    ranks = layout.ranks
    if args.format == "json":
        doc = {
            **({"framework": loaded.framework, "description": loaded.description} if loaded is not None else {}),
            "layout": layout.summary(),
            "ranks": ranks.reset_index().to_dict(orient="records"),
            "groups": {name: layout.groups(name).tolist() for name in layout.group_dims},
        }
        print(json.dumps(doc))
    elif args.format == "csv":
        frame = ranks.copy()
        for name in layout.group_dims:
            groups = layout.groups(name)
            if groups.shape[1] <= CSV_MEMBERS:
                text = np.array([" ".join(map(str, row)) for row in groups.tolist()], dtype=object)
            else:  # one line per rank must stay a line: name the group instead of listing its members
                text = np.array([f"group {i} of {groups.shape[1]} ranks" for i in range(len(groups))], dtype=object)
            frame[f"{name}_group"] = text[layout.group_index(name)]
        frame.to_csv(sys.stdout)
    else:
        if loaded is None:  # a loaded config's description already holds the Layout(...) line
            print(repr(layout))
        print(ranks.to_string())
        print()
        for name in layout.group_dims:
            groups = layout.groups(name)
            rows = " ".join("[" + " ".join(map(str, row)) + "]" for row in groups.tolist())
            print(f"{name} (size {groups.shape[1]}, {plural(groups.shape[0], 'group')}): {rows}")
    return 0
