"""The whole world of a parallel layout at once, vectorised with numpy.

Every rank is a point of one ``RankGrid`` (``fastdist_lab.numbering``) whose axes are the parallel factors,
tensor fastest: the numbering of ServiceNow's Fast-LLM (``fast_llm/engine/distributed/config.py`` at commit
91b28fab). A dim's groups are a transpose and a reshape of that grid, and every per-rank coordinate is a
mixed-radix number along some axes: no per-rank loop, no sort.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from .config import DIM_NAMES, DistributedConfig, DistributedDimNames, LayoutFields, PhaseType
from .errors import LayoutError
from .experts import EXPERT_DIM_AXES, EXPERT_DIM_NAMES, ExpertGrid, expert_sizes
from .fastllm import read_fastllm
from .numbering import RankGrid
from .painters import paint
from .seeds import GENERATORS, seed_arrays
from .validation import check_int, env_int, is_bool

if TYPE_CHECKING:
    import pandas as pd

MAX_LAYOUT_WORLD_SIZE = 2**24
"""The largest world a ``Layout`` materialises (16,777,216 ranks); ``DistributedConfig`` has no limit."""

RANK_COLUMNS: tuple[str, ...] = (
    "node",
    "local_rank",
    "tensor_rank",
    "data_rank",
    "pipeline_rank",
    "sequence_data_rank",
    "batch_data_rank",
)
"""Columns of ``Layout.ranks``, in order."""

LAYOUT_AXES: dict[bool, tuple[str, ...]] = {
    False: ("tensor", "sequence_data", "batch_data", "pipeline"),
    True: ("tensor", "pipeline", "sequence_data", "batch_data"),
}
"""The four parallel axes, fastest-varying first, keyed by ``pipeline_first`` (data-first, the default, for large
models; pipeline-first keeps pipeline neighbours close). The only place the axis order is written."""

DIM_AXES: dict[str, tuple[str, ...]] = {
    DistributedDimNames.world: ("tensor", "sequence_data", "batch_data", "pipeline"),
    DistributedDimNames.data: ("sequence_data", "batch_data"),
    DistributedDimNames.pipeline: ("pipeline",),
    DistributedDimNames.tensor: ("tensor",),
    DistributedDimNames.sequence_data: ("sequence_data",),
    DistributedDimNames.batch_data: ("batch_data",),
    DistributedDimNames.tensor_and_sequence_data: ("tensor", "sequence_data"),
    DistributedDimNames.tensor_and_data: ("tensor", "sequence_data", "batch_data"),
    DistributedDimNames.model_and_sequence_data: ("tensor", "sequence_data", "pipeline"),
}
"""The grid axes each named dim spans; its members follow the layout's axis order (``Layout.axes``)."""

_COORDINATE_AXES: dict[str, tuple[str, ...]] = {
    f"{dim}_rank": DIM_AXES[dim] for dim in ("tensor", "data", "pipeline", "sequence_data", "batch_data")
}
"""Each parallel coordinate is a rank's position in its group of the matching dim."""

EXPERT_FIELDS: tuple[str, ...] = ("expert_parallel", "expert_tensor_parallel")
"""The Layout's fields beyond Fast-LLM's ``DistributedConfig`` (Fast-LLM 91b28fab has no experts)."""


def nodes_spanned(groups: np.ndarray, local_world_size: int) -> int:
    """The most nodes one group (a row of ``groups``) has members on, with ``local_world_size`` ranks per node.

    Rows hold their members in increasing rank order (every group of a layout does), so a row spans one node more
    than the number of places where its node changes. Division in int32 when ranks fit: numpy's int64 division is
    slow, and this runs on every group of 2**24-rank worlds.
    """
    if groups.size == 0 or groups.shape[1] < 2:
        return 1
    small = groups.size and int(groups.max()) < 2**31
    nodes = groups.astype(np.int32) // np.int32(local_world_size) if small else groups // local_world_size
    return int(((nodes[:, 1:] != nodes[:, :-1]).sum(axis=1) + 1).max())


@dataclass(frozen=True, init=False, eq=False)  # equality and hash: LayoutFields', on the same fields
class Layout(LayoutFields):
    """Every rank of a layout at once: coordinates, the groups of each named dim, topology and seeds.

    Takes every ``DistributedConfig`` field except ``rank`` and validates like it (``LayoutError`` naming the
    field and the numbers). One default everywhere: ``world_size`` comes from ``WORLD_SIZE`` (else 1) and
    ``local_world_size`` from ``LOCAL_WORLD_SIZE``, else the whole world is **one node**.

    Example::

        >>> layout = Layout(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2,
        ...                 sequence_data_parallel=2)
        >>> layout.groups("data")[0].tolist()
        [0, 2, 4, 6]
        >>> int(layout.coordinates["data_rank"][5])
        2

    ``expert_parallel`` (EP, default 1) and ``expert_tensor_parallel`` (ETP, default ``None``: the tensor size, as
    Megatron-Core defaults) place a mixture-of-experts layer's experts (``fastdist_lab.experts``): ``groups``,
    ``group_index``, ``dim_rank`` and ``group_of`` also take the expert dims (``EXPERT_DIM_NAMES``). With EP = 1
    and ETP = tensor size every dense group, seed and stream is as without them.

        >>> moe = Layout(world_size=16, local_world_size=8, tensor_parallel=2, expert_parallel=4)
        >>> moe.groups("expert")[0].tolist(), moe.groups("expert_data")[0].tolist()
        ([0, 2, 4, 6], [0, 8])
    """

    expert_parallel: int = 1
    expert_tensor_parallel: int | None = None

    def __init__(self, **fields: Any):
        if fields.get("world_size") is None:
            fields["world_size"] = env_int("WORLD_SIZE", 1)
        if fields.get("local_world_size") is None:
            world = fields["world_size"]
            one_node = world if isinstance(world, int) and not is_bool(world) and world > 0 else 1
            fields["local_world_size"] = env_int("LOCAL_WORLD_SIZE", one_node)  # a bad world: its error alone
        experts = {name: fields.pop(name, None) for name in EXPERT_FIELDS}
        self._assign(fields)
        self._assign_experts(**experts)
        if self.world_size > MAX_LAYOUT_WORLD_SIZE:
            raise LayoutError(
                f"world_size={self.world_size} is more than a whole-world Layout holds (at most "
                f"{MAX_LAYOUT_WORLD_SIZE:,} ranks); one rank's view (DistributedConfig, or "
                "`fastdist-lab layout --rank R`) has no limit"
            )

    def _assign_experts(self, expert_parallel: Any, expert_tensor_parallel: Any) -> None:
        ep = (
            1
            if expert_parallel is None
            else check_int("expert_parallel", expert_parallel, minimum=1, error=LayoutError)
        )
        etp = expert_tensor_parallel
        if etp is not None:
            etp = check_int("expert_tensor_parallel", etp, minimum=1, error=LayoutError)
        expert_sizes(self.tensor_parallel, self.world_size // self.pipeline_parallel, ep, etp)  # raises if bad
        self.__dict__.update(expert_parallel=ep, expert_tensor_parallel=etp)  # frozen: set once, here

    @cached_property
    def _key(self) -> tuple[Any, ...]:
        """The fields, ETP resolved (``None`` and the tensor size are one layout): what equality and hash compare
        (kept: a Layout is frozen, and hashing sits on hot paths such as the per-rank caches)."""
        fields = self.fields()
        fields["expert_tensor_parallel"] = self.expert_sizes["expert_tensor"]
        return tuple(fields.values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Layout):
            return NotImplemented
        return type(self) is type(other) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    @classmethod
    def from_config(cls, config: DistributedConfig) -> Layout:
        """The layout of the world ``config`` belongs to."""
        return cls(**{name: value for name, value in config.fields().items() if name != "rank"})

    # ----------------------------------------------------------------- sizes
    @property
    def model_parallel(self) -> int:
        """tensor_parallel * pipeline_parallel."""
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def data_parallel(self) -> int:
        """world_size / model_parallel."""
        return self.world_size // self.model_parallel

    @property
    def batch_data_parallel(self) -> int:
        """data_parallel / sequence_data_parallel."""
        return self.data_parallel // self.sequence_data_parallel

    @property
    def expert_sizes(self) -> dict[str, int]:
        """``expert_tensor`` (ETP, the tensor size unless given), ``expert`` (EP) and ``expert_data`` (EDP = the
        ranks of a pipeline stage / (ETP * EP)) sizes."""
        etp, ep, edp = expert_sizes(
            self.tensor_parallel,
            self.world_size // self.pipeline_parallel,
            self.expert_parallel,
            self.expert_tensor_parallel,
        )
        return {"expert_tensor": etp, "expert": ep, "expert_data": edp}

    @property
    def has_experts(self) -> bool:
        """Whether the expert groups differ from the dense ones (EP > 1, or ETP other than the tensor size)."""
        return self.expert_parallel > 1 or self.expert_sizes["expert_tensor"] != self.tensor_parallel

    @property
    def num_nodes(self) -> int:
        """world_size / local_world_size."""
        return self.world_size // self.local_world_size

    @property
    def dim_names(self) -> tuple[str, ...]:
        """The nine named dims."""
        return DIM_NAMES

    @property
    def group_dims(self) -> tuple[str, ...]:
        """The dims whose groups tell this layout apart: the nine, then the four expert dims when it has experts."""
        return (*DIM_NAMES, *EXPERT_DIM_NAMES) if self.has_experts else DIM_NAMES

    # ----------------------------------------------------------------- grid
    @property
    def axes(self) -> tuple[str, ...]:
        """The parallel axes, fastest-varying first (tensor first; then data-first or pipeline-first order)."""
        return LAYOUT_AXES[self.pipeline_first]

    def axis_sizes(self) -> dict[str, int]:
        """The size of each parallel axis, fastest first."""
        sizes = {
            "tensor": self.tensor_parallel,
            "sequence_data": self.sequence_data_parallel,
            "batch_data": self.batch_data_parallel,
            "pipeline": self.pipeline_parallel,
        }
        return {axis: sizes[axis] for axis in self.axes}

    @cached_property
    def rank_grid(self) -> RankGrid:
        """This layout's numbering: the four axes, fastest first (see ``fastdist_lab.numbering``)."""
        sizes = self.axis_sizes()
        return RankGrid(tuple(sizes), tuple(sizes.values()), error=LayoutError)

    @property
    def grid(self) -> np.ndarray:
        """All global ranks as a read-only 4-d array, slowest axis first (see ``grid_axes``)."""
        return self.rank_grid.grid

    @property
    def grid_axes(self) -> tuple[str, ...]:
        """Names of ``grid``'s axes, slowest first."""
        return self.rank_grid.grid_axes

    def dim_axes(self, name: str) -> tuple[str, ...]:
        """The axes dim ``name`` spans, in group-rank order (first axis fastest)."""
        try:
            spanned = DIM_AXES[name]
        except (KeyError, TypeError):
            dims = ", ".join((*DIM_NAMES, *EXPERT_DIM_NAMES))
            raise LayoutError(f"dim={name!r} is not a dim; use one of {dims}") from None
        return self.rank_grid.ordered(spanned)

    @cached_property
    def expert_grid(self) -> ExpertGrid:
        """The expert numbering (``fastdist_lab.experts``): each pipeline stage's ranks, in increasing rank, read as
        expert-tensor rank fastest, then expert rank, then expert-data rank."""
        sizes = self.expert_sizes
        stages = self.groups(DistributedDimNames.tensor_and_data)
        return ExpertGrid(stages, sizes["expert_tensor"], sizes["expert"], error=LayoutError)

    def groups(self, name: str) -> np.ndarray:
        """Every group of dim ``name`` (a dense dim or an expert dim): one row per group, members in group-rank
        order, rows by first member (read-only: computed once per layout and dim)."""
        found = self._groups.get(name)
        if found is None:
            if name in EXPERT_DIM_AXES:
                found = self.expert_grid.groups(name)
            else:
                found = self.rank_grid.groups(self.dim_axes(name))
            found.setflags(write=False)
            self._groups[name] = found
        return found

    @cached_property
    def _groups(self) -> dict[str, np.ndarray]:
        return {}

    def group_index(self, name: str) -> np.ndarray:
        """Each global rank's row in ``groups(name)`` (array indexed by global rank)."""
        if name in EXPERT_DIM_AXES:
            return self.expert_grid.group_index(name)
        return self.rank_grid.group_index(self.dim_axes(name))

    def dim_rank(self, name: str) -> np.ndarray:
        """Each global rank's index inside its group of dim ``name`` (array indexed by global rank)."""
        if name in EXPERT_DIM_AXES:
            return self.expert_grid.dim_rank(name)
        return self.rank_grid.group_rank(self.dim_axes(name))

    def group_of(self, name: str, rank: int) -> np.ndarray:
        """The members of ``rank``'s group of dim ``name``, in group-rank order."""
        if name in EXPERT_DIM_AXES:
            rank = self.rank_grid.check_rank(rank)
            return self.groups(name)[int(self.group_index(name)[rank])]
        return self.rank_grid.group_of(self.dim_axes(name), rank)

    # ----------------------------------------------------------------- per rank
    @cached_property
    def coordinates(self) -> dict[str, np.ndarray]:
        """Every rank's ``node``, ``local_rank`` and parallel coordinates (``RANK_COLUMNS``), arrays by rank."""
        local, nodes = self.local_world_size, self.num_nodes
        out = {
            "node": np.repeat(np.arange(nodes, dtype=np.int64), local),
            "local_rank": np.tile(np.arange(local, dtype=np.int64), nodes),
        }
        for column, axes in _COORDINATE_AXES.items():
            out[column] = self.rank_grid.group_rank(self.rank_grid.ordered(axes))
        for values in out.values():
            values.setflags(write=False)
        return {column: out[column] for column in RANK_COLUMNS}

    @cached_property
    def ranks(self) -> pd.DataFrame:
        """One row per global rank (the index, ``rank``) with its node, local rank and parallel coordinates."""
        import pandas as pd

        frame = pd.DataFrame(self.coordinates, columns=list(RANK_COLUMNS), copy=False)  # read-only, shared
        frame.index.name = "rank"
        return frame

    def config(self, rank: int) -> DistributedConfig:
        """The ``DistributedConfig`` of global rank ``rank``."""
        fields = {name: value for name, value in self.fields().items() if name not in EXPERT_FIELDS}
        return DistributedConfig(rank=self.rank_grid.check_rank(rank), **fields)

    # ----------------------------------------------------------------- summaries
    def topology(self) -> pd.DataFrame:
        """Per dim of ``group_dims`` (the expert dims too when the layout has experts): group size, number of groups,
        most nodes one group spans, whether all stay in one node."""
        import pandas as pd

        rows = []
        for name in self.group_dims:
            groups = self.groups(name)
            spanned = nodes_spanned(groups, self.local_world_size)
            rows.append((name, groups.shape[1], self.world_size // groups.shape[1], spanned, spanned == 1))
        columns = ["dim", "group_size", "num_groups", "nodes_spanned", "intra_node"]
        return pd.DataFrame(rows, columns=columns).set_index("dim")

    def seed_table(self, step: int = 0, phase: PhaseType | str = "training") -> pd.DataFrame:
        """The seed of every generator of every rank after ``set_step(step, phase)``: exact ``uint64`` columns."""
        import pandas as pd

        c = self.coordinates
        seeds = seed_arrays(self.fields(), c["tensor_rank"], c["data_rank"], c["pipeline_rank"], step, phase)
        frame = pd.DataFrame({name: seeds[name] for name in GENERATORS})
        frame.index.name = "rank"
        return frame

    def device_mesh_spec(self) -> tuple[tuple[int, ...], tuple[str, ...], np.ndarray]:
        """``(mesh_shape, mesh_dim_names, mesh)`` whose row-major ``init_device_mesh`` numbering is this layout's.

        torch's ``init_device_mesh`` takes shapes slowest first (last dim fastest), so this is ``grid``'s shape
        and axis names: data-first ``(pipeline, batch_data, sequence_data, tensor)``, pipeline-first
        ``(batch_data, sequence_data, pipeline, tensor)``; ``mesh`` equals ``grid``.
        """
        grid = self.grid
        return tuple(int(s) for s in grid.shape), self.grid_axes, np.array(grid)

    def plot(self, dim: str = "tensor", highlight: int | None = None, **options: Any) -> Any:
        """The rank grid (nodes as rows, GPUs as columns) coloured by the groups of ``dim``, ``highlight`` and its group
        outlined: a matplotlib ``Figure`` drawn by ``fastdist_lab.viz.plot_layout`` (``ranks=``, ``marks=`` too)."""
        return paint("layout", self, dim, highlight, **options)

    def plot_dims(self, highlight: int | None = None) -> Any:
        """One small rank grid per dim of ``group_dims`` (``fastdist_lab.viz.plot_dims``), ``highlight`` outlined in
        each."""
        return paint("dims", self, highlight)

    def summary(self) -> dict[str, Any]:
        """The sizes of this layout as a flat dict."""
        return {
            "world_size": self.world_size,
            "num_nodes": self.num_nodes,
            "local_world_size": self.local_world_size,
            "tensor_parallel": self.tensor_parallel,
            "pipeline_parallel": self.pipeline_parallel,
            "data_parallel": self.data_parallel,
            "sequence_data_parallel": self.sequence_data_parallel,
            "batch_data_parallel": self.batch_data_parallel,
            "order": "pipeline-first" if self.pipeline_first else "data-first",
            **({f"{dim}_parallel": size for dim, size in self.expert_sizes.items()} if self.has_experts else {}),
        }

    def __repr__(self) -> str:
        s = self.summary()
        return (
            f"Layout(world_size={s['world_size']}, local_world_size={s['local_world_size']}, "
            f"tensor_parallel={s['tensor_parallel']}, pipeline_parallel={s['pipeline_parallel']}, "
            f"sequence_data_parallel={s['sequence_data_parallel']}, {s['order']}; "
            f"data_parallel={s['data_parallel']}, nodes={s['num_nodes']}"
            + (
                f"; expert_parallel={s['expert_parallel']}, expert_tensor_parallel={s['expert_tensor_parallel']}, "
                f"expert_data_parallel={s['expert_data_parallel']})"
                if self.has_experts
                else ")"
            )
        )

    def summary_html(self) -> str:
        """The summary and the groups per dim as HTML tables (no picture: pictures live in ``fastdist_lab.viz``)."""
        import html  # only for a notebook's display

        summary = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
            for k, v in self.summary().items()
        )
        topology = self.topology().to_html()
        return f"<div><b>Layout</b><table>{summary}</table><b>Groups per dim</b>{topology}</div>"

    def _repr_html_(self) -> str:
        """The summary tables; in a notebook ``fastdist_lab.viz`` adds the rank grid (see ``viz.notebook``)."""
        return f"<div class='fastdist-layout'>{self.summary_html()}</div>"

    @classmethod
    def from_fastllm(cls, source: Any, world_size: int | None = None, local_world_size: int | None = None) -> Layout:
        """The layout of a Fast-LLM config: a path, YAML text or a mapping holding an experiment's
        ``model: distributed:`` section, a ``distributed:`` mapping or the fields themselves (Fast-LLM 91b28fab or
        current field names; see ``fastdist_lab.fastllm``). ``world_size`` / ``local_world_size`` win over the
        file's; one node by default. ``LayoutError`` names the bad key, its line, or the broken rule."""
        settings = read_fastllm(source, world_size=world_size, local_world_size=local_world_size)
        try:
            return cls(**settings.fields)
        except LayoutError as error:
            where = settings.section or "the mapping"
            raise LayoutError(f"{settings.source}: {where}: {error}") from None
