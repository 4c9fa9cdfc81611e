"""Flags shared by every sub-command that takes a layout, and the ``Layout`` they describe."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..config import DistributedConfig
from ..errors import LayoutError
from ..formatting import first_line
from ..layout import Layout

DEFAULT_LAYOUT = {"world_size": 8, "tensor_parallel": 2, "pipeline_parallel": 2, "sequence_data_parallel": 2}
"""The main job's default layout, used when no size flag is given: world 8, tensor 2, pipeline 2, sequence-data 2
(one node)."""

GIVEN_FACTOR_DEFAULT = 1
"""A parallel factor the user did not give, once any size flag is given: 1, as ``Layout(...)`` takes it."""


SHAPE_FLAGS = {
    "tensor_parallel": "--tensor-parallel",
    "pipeline_parallel": "--pipeline-parallel",
    "sequence_data_parallel": "--sequence-data-parallel",
}
"""The layout flags that set a parallel factor (``None`` when not given), with their spelling."""

_DEFAULTED_FLAGS = {"world_size": "--world-size", **SHAPE_FLAGS}

SIZES_GIVEN = "layout_sizes_given"
"""The attribute of parsed arguments that says whether the user gave any size flag (``--world-size``,
``--local-world-size`` or a parallel factor; a world the torchrun worker takes from its launcher is not given)."""


class _SizeFlag(argparse.Action):
    """Stores a size flag's value and notes that a size was given (``SIZES_GIVEN``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None):
        setattr(namespace, self.dest, values)
        setattr(namespace, SIZES_GIVEN, True)


def add_layout_arguments(parser: argparse.ArgumentParser, launcher: bool = False) -> None:
    """Add ``--world-size``, ``--local-world-size``, the parallel factors, ``--pipeline-first`` and ``--seed``.

    ``launcher``: the world comes from the launcher's ``WORLD_SIZE`` / ``LOCAL_WORLD_SIZE`` (the torchrun worker),
    and the help says so.
    """
    if launcher:
        world, local = "the launcher's WORLD_SIZE", "the launcher's LOCAL_WORLD_SIZE"
        demo = "tensor 2, pipeline 2, sequence-data 2 on the launcher's world"
    else:
        world, local = str(DEFAULT_LAYOUT["world_size"]), "the world size, one node"
        demo = "the main job's layout, 8 ranks on one node, tensor 2, pipeline 2, sequence-data 2"
    description = (
        f"without size flags: {demo}; with any size flag (--world-size, --local-world-size, --tp, --pp, --sdp), "
        f"a parallel factor not given is {GIVEN_FACTOR_DEFAULT}, as in Layout(...)"
    )
    group = parser.add_argument_group("layout", description)
    parser.set_defaults(**{SIZES_GIVEN: False})
    sizes = {"type": int, "default": None, "action": _SizeFlag}
    group.add_argument("--world-size", **sizes, help=f"number of ranks (GPUs) in the job (default: {world})")
    group.add_argument("--local-world-size", **sizes, help=f"ranks (GPUs) per node (default: {local})")
    factor = f"(default: {GIVEN_FACTOR_DEFAULT} when any size flag is given, else {{}})"
    for name, short, what in (
        ("tensor_parallel", "--tp", "tensor-parallel size: ranks that split each layer "),
        ("pipeline_parallel", "--pp", "pipeline-parallel size: stages of layers "),
        ("sequence_data_parallel", "--sdp", "sequence-data-parallel size: data ranks that share one sequence "),
    ):
        group.add_argument(SHAPE_FLAGS[name], short, **sizes, help=what + factor.format(DEFAULT_LAYOUT[name]))
    group.add_argument(
        "--expert-parallel",
        "--ep",
        type=int,
        default=1,
        help="expert-parallel size: ranks of a pipeline stage that split a mixture-of-experts layer's experts "
        "(default: %(default)s, no experts)",
    )
    group.add_argument(
        "--expert-tensor-parallel",
        "--etp",
        type=int,
        default=None,
        help="expert-tensor-parallel size: ranks that split each expert (default: the tensor-parallel size)",
    )
    group.add_argument(
        "--pipeline-first",
        action="store_true",
        help="pipeline ranks vary before data ranks (small models; default: data ranks first)",
    )
    group.add_argument("--seed", type=int, default=1234, help="base seed of every random generator")
    group.add_argument(
        "--reproducible-init",
        action="store_true",
        help="initialise weights alike on every data and pipeline rank (the init generators ignore those ranks)",
    )


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """The training set-up's flags, generated from ``Training``'s declarations (``setup.TRAINING_SETTINGS``): each
    field's flag, aliases and help, spelled and defaulted alike in every command (``cost``, ``train-step``); a field
    on by default is turned off by ``--no-...``. Values are checked by ``Training`` (one line naming the value)."""
    from ..setup import TRAINING_SETTINGS, Training
    from ..setup.settings import defaults_of

    defaults = defaults_of(Training)
    group = parser.add_argument_group("training set-up", "as setup.Training: the same flags in cost and train-step")
    exclusive = {name: group.add_mutually_exclusive_group() for name, spec in TRAINING_SETTINGS.items()
                 if spec.excludes}  # fmt: skip
    exclusive.update({TRAINING_SETTINGS[name].excludes: place for name, place in exclusive.items()})
    for name, spec in TRAINING_SETTINGS.items():
        place = exclusive.get(name, group)
        place.add_argument(*flag_names(spec, defaults[name]), dest=name, **flag_options(name, spec, defaults[name]))


def flag_names(spec: Any, default: Any) -> list[str]:
    """A setting's flag and its aliases (``--no-<flag>`` for a flag that is on by default, and no alias)."""
    flag = spec.cli_flag(default)
    return [flag] if flag != spec.flag else [flag, *spec.aliases]


def flag_options(name: str, spec: Any, default: Any) -> dict[str, Any]:
    """The ``add_argument`` options of one value of the setting ``name`` (``spec``, a ``setup.Setting``) whose default
    is ``default``: its type, choices, how many values and its help with the default said once."""
    shown = spec.none_means if default is None else default
    if spec.kind == "flag":
        what = "off" if default else "on"
        return {"action": "store_false" if default else "store_true", "default": default,
                "help": f"{spec.help} ({what} with the flag; default: {'on' if default else 'off'})"}  # fmt: skip
    options: dict[str, Any] = {"default": default, "help": f"{spec.help} (default: {shown})"}
    if spec.kind == "choice":  # refused by the parser, or by Training (its one line names the field)
        options.update(metavar="NAME", help=f"{spec.help}: {', '.join(map(str, spec.choices))} (default: {shown})")
        if spec.cli_choices:
            options["type"] = choice_of(name, spec.choices)
    elif spec.kind == "number":
        options.update(type=float, metavar="X")
    elif spec.kind == "counts":
        options.update(type=int, nargs="+", metavar="N")
    else:
        options.update(type=int, metavar="N")
    return options


def choice_of(name: str, choices: Any) -> Any:
    """An argparse ``type`` for the choice setting ``name``: the value when it is one of ``choices``, else an error that
    names the field and its choices (``argument --engine: invalid choice: 'jax' (engine='jax' must be one of ...)``)."""

    def choice(value: str) -> str:
        if value not in choices:
            choices_text = ", ".join(map(repr, choices))
            raise argparse.ArgumentTypeError(
                f"invalid choice: {value!r} ({name}={value!r} must be one of {choices_text})"
            )
        return value

    return choice


def training_from_args(args: argparse.Namespace) -> Any:
    """The ``setup.Training`` that ``add_training_arguments``' flags describe (``CostError`` naming a bad value);
    each flag's value is stored under its field's name."""
    from ..setup import TRAINING_SETTINGS, Training

    return Training(**{name: getattr(args, name) for name in TRAINING_SETTINGS})


def given_shape_flags(args: argparse.Namespace) -> list[str]:
    """The parallel-factor flags (and ``--pipeline-first``) given on the command line."""
    given = [flag for name, flag in SHAPE_FLAGS.items() if getattr(args, name) is not None]
    return given + (["--pipeline-first"] if args.pipeline_first else [])


def layout_defaults(args: argparse.Namespace) -> dict[str, int]:
    """The world size and parallel factors a command line leaves out take these: the main job's layout
    (``DEFAULT_LAYOUT``) when no size flag was given, else ``GIVEN_FACTOR_DEFAULT`` for each factor (the world size
    stays ``DEFAULT_LAYOUT``'s)."""
    if not getattr(args, SIZES_GIVEN, False):
        return dict(DEFAULT_LAYOUT)
    return {name: GIVEN_FACTOR_DEFAULT for name in SHAPE_FLAGS} | {"world_size": DEFAULT_LAYOUT["world_size"]}


def _factors(args: argparse.Namespace) -> tuple[dict[str, int], dict[str, int]]:
    """World size and parallel factors from the flags, defaults filled in (``layout_defaults``), and the fields left
    at their default with that default."""
    defaults = layout_defaults(args)
    defaulted = {name: defaults[name] for name in _DEFAULTED_FLAGS if getattr(args, name) is None}
    return {name: getattr(args, name) for name in _DEFAULTED_FLAGS} | defaulted, defaulted


def _with_defaults_named(error: LayoutError, defaulted: dict[str, int]) -> LayoutError:
    """``error``, telling which of the sizes it names were not given but defaulted (they are easy to overlook)."""
    text = str(error)
    named = [f"{_DEFAULTED_FLAGS[name]} {value}" for name, value in defaulted.items() if f"{name}=" in text]
    if not named:
        return error
    return LayoutError(f"{text} (not given, so the defaults: {', '.join(named)}; give the sizes you want)")


def layout_from_args(args: argparse.Namespace, *, experts: bool = False, **extra: object) -> Layout:
    """The ``Layout`` the layout flags describe (raises ``LayoutError`` naming any defaulted flag when invalid).

    ``experts``: whether the command handles expert parallelism; when it does not, a layout with experts is refused
    in one line rather than silently treated as dense (``layout`` and ``check`` handle experts)."""
    factors, defaulted = _factors(args)
    try:
        layout = Layout(
            local_world_size=args.local_world_size,
            pipeline_first=args.pipeline_first,
            seed=args.seed,
            reproducible_init=args.reproducible_init,
            expert_parallel=getattr(args, "expert_parallel", 1),
            expert_tensor_parallel=getattr(args, "expert_tensor_parallel", None),
            **factors,
            **extra,  # type: ignore[arg-type]
        )
    except LayoutError as error:
        raise _with_defaults_named(error, defaulted) from None
    if layout.has_experts and not experts:
        raise LayoutError(
            f"--expert-parallel={layout.expert_parallel} --expert-tensor-parallel="
            f"{layout.expert_sizes['expert_tensor']}: this command does not handle experts yet "
            "(`fastdist-lab layout` shows their groups)"
        )
    return layout


def config_from_args(args: argparse.Namespace, rank: int) -> DistributedConfig:
    """One rank's ``DistributedConfig`` from the layout flags: no whole-world table, so any world size works."""
    factors, defaulted = _factors(args)
    if getattr(args, "expert_parallel", 1) != 1 or getattr(args, "expert_tensor_parallel", None) is not None:
        raise LayoutError(
            "--rank shows one rank's Fast-LLM DistributedConfig, which has no experts: leave out --rank to see the "
            "expert groups of the whole world"
        )
    world = factors.pop("world_size")
    local = args.local_world_size
    if local is None:
        local = world if isinstance(world, int) and world > 0 else 1
    try:
        return DistributedConfig(
            world_size=world,
            rank=rank,
            local_world_size=local,
            pipeline_first=args.pipeline_first,
            seed=args.seed,
            reproducible_init=args.reproducible_init,
            **factors,
        )
    except LayoutError as error:
        raise _with_defaults_named(error, defaulted) from None


def add_hardware_arguments(group: Any, presets: tuple[str, ...], default: str) -> None:
    """Register ``--hardware`` (one of ``presets``, ``default`` when not given) and ``--inter-node-GBps`` (the
    preset's network bandwidth per GPU between nodes replaced, for a cluster unlike the preset's reference node)."""
    group.add_argument("--hardware", choices=presets, default=default,
                       help="the GPU, its memory and its links (default: %(default)s)")  # fmt: skip
    group.add_argument(
        "--inter-node-GBps", dest="inter_node_GBps", type=float, default=None, metavar="GB/S",
        help="network bandwidth per GPU between nodes at line rate (GB/s), replacing the preset's: the node's "
        "adapters over its GPUs, or what NCCL measured on your cluster (nccl-tests' busbw through one adapter, "
        "over the GPUs sharing it, over the model's network efficiency)",
    )  # fmt: skip


def hardware_from_args(args: argparse.Namespace) -> Any:
    """The ``Hardware`` the flags name: the ``--hardware`` preset on ``--inter-node-GBps`` where given
    (``Hardware.with_network``). ``CostError`` (one line naming the value) for a bad bandwidth."""
    from ..setup import Hardware

    return Hardware.preset(args.hardware).with_network(args.inter_node_GBps)


def usage_error(args: argparse.Namespace, problem: str | BaseException) -> int:
    """Write ``problem`` as the command's one-line error on stderr (``fastdist-lab COMMAND: error: ...``, as
    ``cli.main`` writes a ``LayoutError``; an exception as its ``error_line``) and return the exit code, 2."""
    message = problem if isinstance(problem, str) else error_line(problem)
    sys.stderr.write(f"fastdist-lab {args.command}: error: {message}\n")
    return 2


def error_line(error: BaseException) -> str:
    """The first line of an error, for a one-line CLI message; a backend the machine cannot run names the flag
    that picks another (``--backend gloo``)."""
    first = first_line(error)
    alternative = getattr(error, "alternative", None)  # errors.BackendUnavailable, read duck-typed
    if alternative in ("gloo", "nccl"):  # (a CapacityError's alternative is a mode, already named in its text)
        return f"{first} (--backend {alternative})"
    return first


def add_cluster_arguments(parser: argparse.ArgumentParser, when: str = "") -> None:
    """``--backend``, ``--simulate`` and ``--timeout``: where the ranks of a command run and their deadline (``when``:
    the flag that makes the command start them, e.g. ``"--real"``, if it does not always). ``--simulate threads|fake``
    runs the ranks in this process (``runtime.SimulatedCluster``), for worlds too big for one process per rank."""
    suffix = f" ({when})" if when else ""
    parser.add_argument(
        "--backend",
        choices=("auto", "gloo", "nccl"),
        default="auto",
        help=f"auto: NCCL with a GPU per rank, else gloo{suffix}",
    )
    parser.add_argument(
        "--simulate",
        choices=("threads", "fake"),
        default=None,
        help="run the ranks in this process: threads (torch's threaded groups, real collectives) or fake (torch's "
        "fake groups: membership only, no collective); for worlds too big for one process per rank",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"seconds allowed for start-up and each call{suffix} (default: 60; simulated: 60 + 0.02 per rank)",
    )


def cluster_from_args(args: argparse.Namespace, layout: Layout, progress: object = None) -> Any:
    """The started cluster for ``layout`` that ``add_cluster_arguments``' flags ask for (``runtime.open_cluster``):
    one process per rank, or ``--simulate``'s in-process ranks."""
    from ..runtime import open_cluster

    return open_cluster(
        args.simulate or "processes",
        layout.world_size,
        local_world_size=layout.local_world_size,
        backend=args.backend,
        timeout=args.timeout,
        progress=progress,
    )
