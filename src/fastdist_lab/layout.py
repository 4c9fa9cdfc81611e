"""The whole world of a parallel layout at once, vectorised with numpy.

Every rank is a point of one grid ``arange(world_size).reshape(...)`` whose axes are the parallel
factors (tensor fastest). A dim's groups are a transpose and a reshape of that grid: no per-rank loop,
no sort.
"""

from __future__ import annotations

import html
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from .config import (
    DIM_NAMES,
    INPUT_FIELDS,
    DistributedConfig,
    DistributedDimNames,
    LayoutError,
    PhaseType,
    validate_fields,
)
from .seeds import GENERATORS, seed_arrays

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


class Layout:
    """Every rank of a layout at once: coordinates, the groups of each named dim, topology and seeds.

    Takes every ``DistributedConfig`` field except ``rank``; validates like it (``LayoutError``).
    """

    def __init__(
        self,
        *,
        world_size: int | None = None,
        local_world_size: int | None = None,
        tensor_parallel: int = 1,
        pipeline_parallel: int = 1,
        sequence_data_parallel: int = 1,
        sequence_tensor_parallel: bool = False,
        pipeline_first: bool = False,
        backend: str = "nccl",
        timeout: float = 60,
        seed: int = 1234,
        reproducible_init: bool = False,
        **seed_shifts: int,
    ):
        fields = dict(locals())
        for key in ("self", "seed_shifts", "__class__"):
            fields.pop(key, None)
        defaults = DistributedConfig(world_size=1, rank=0, local_world_size=1).fields()
        unknown = sorted(set(seed_shifts) - set(defaults))
        if unknown or "rank" in seed_shifts:
            raise LayoutError(f"Layout got unknown field(s) {', '.join(unknown or ['rank'])}; a Layout has every rank")
        for name in INPUT_FIELDS:
            if name != "rank" and name not in fields:
                fields[name] = seed_shifts.get(name, defaults[name])
        if world_size is None:
            fields["world_size"] = DistributedConfig.default_world_size()
        if local_world_size is None:
            fields["local_world_size"] = DistributedConfig.default_local_world_size()
        self._fields = validate_fields(fields, with_rank=False)
        if self._fields["world_size"] > MAX_LAYOUT_WORLD_SIZE:
            raise LayoutError(
                f"world_size={self._fields['world_size']} is too large for a whole-world Layout "
                f"(at most {MAX_LAYOUT_WORLD_SIZE}); use DistributedConfig for one rank"
            )

    @classmethod
    def from_config(cls, config: DistributedConfig) -> Layout:
        """The layout of the world ``config`` belongs to."""
        fields = config.fields()
        fields.pop("rank")
        return cls(**fields)

    # ----------------------------------------------------------------- sizes
    def fields(self) -> dict[str, Any]:
        """The input fields (every ``DistributedConfig`` field except ``rank``)."""
        return dict(self._fields)

    def __getattr__(self, name: str) -> Any:
        fields = self.__dict__.get("_fields")
        if fields is not None and name in fields:
            return fields[name]
        raise AttributeError(f"'Layout' object has no attribute {name!r}")

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
    def num_nodes(self) -> int:
        """world_size / local_world_size."""
        return self.world_size // self.local_world_size

    @property
    def dim_names(self) -> tuple[str, ...]:
        """The nine named dims."""
        return DIM_NAMES

    # ----------------------------------------------------------------- grid
    @cached_property
    def _axes(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """Grid axis names and sizes, slowest first."""
        tp, pp = self.tensor_parallel, self.pipeline_parallel
        sdp, bdp = self.sequence_data_parallel, self.batch_data_parallel
        if self.pipeline_first:
            return ("batch_data", "sequence_data", "pipeline", "tensor"), (bdp, sdp, pp, tp)
        return ("pipeline", "batch_data", "sequence_data", "tensor"), (pp, bdp, sdp, tp)

    @cached_property
    def grid(self) -> np.ndarray:
        """All global ranks as a 4-d array, slowest axis first (see ``grid_axes``)."""
        grid = np.arange(self.world_size, dtype=np.int64).reshape(self._axes[1])
        grid.setflags(write=False)  # groups() may return views of it
        return grid

    @property
    def grid_axes(self) -> tuple[str, ...]:
        """Names of ``grid``'s axes, slowest first."""
        return self._axes[0]

    @property
    def axes(self) -> tuple[str, ...]:
        """The parallel axes, fastest-varying first (tensor first; then data-first or pipeline-first order)."""
        return self._axes[0][::-1]

    def dim_axes(self, name: str) -> tuple[str, ...]:
        """The axes dim ``name`` spans, in group-rank order (first axis fastest)."""
        try:
            spanned = DIM_AXES[name]
        except (KeyError, TypeError):
            raise LayoutError(f"dim={name!r} is not a dim; use one of {', '.join(DIM_NAMES)}") from None
        return tuple(axis for axis in self.axes if axis in spanned)

    def groups(self, name: str) -> np.ndarray:
        """Every group of dim ``name``: one row per group, members in group-rank order, rows by first member."""
        members = self.dim_axes(name)
        order, sizes = self._axes
        others = [order.index(a) for a in order if a not in members]
        inner = [order.index(a) for a in reversed(members)]
        size = int(np.prod([sizes[i] for i in inner]))
        return self.grid.transpose(others + inner).reshape(-1, size)

    # ----------------------------------------------------------------- per rank
    @cached_property
    def _coordinates(self) -> dict[str, np.ndarray]:
        ranks = np.arange(self.world_size, dtype=np.int64)
        tp, pp, dp, sdp = self.tensor_parallel, self.pipeline_parallel, self.data_parallel, self.sequence_data_parallel
        above_tensor = ranks // tp
        if self.pipeline_first:
            data, pipeline = above_tensor // pp, above_tensor % pp
        else:
            data, pipeline = above_tensor % dp, above_tensor // dp
        return {
            "node": ranks // self.local_world_size,
            "local_rank": ranks % self.local_world_size,
            "tensor_rank": ranks % tp,
            "data_rank": data,
            "pipeline_rank": pipeline,
            "sequence_data_rank": data % sdp,
            "batch_data_rank": data // sdp,
        }

    @cached_property
    def ranks(self) -> pd.DataFrame:
        """One row per global rank (the index, ``rank``) with its node, local rank and parallel coordinates."""
        import pandas as pd

        frame = pd.DataFrame(self._coordinates, columns=list(RANK_COLUMNS))
        frame.index.name = "rank"
        return frame

    def config(self, rank: int) -> DistributedConfig:
        """The ``DistributedConfig`` of global rank ``rank``."""
        return DistributedConfig(rank=rank, **self._fields)

    def dim_rank(self, name: str) -> np.ndarray:
        """Each global rank's index inside its group of dim ``name`` (array indexed by global rank)."""
        groups = self.groups(name)
        out = np.empty(self.world_size, dtype=np.int64)
        out[groups] = np.arange(groups.shape[1], dtype=np.int64)
        return out

    def group_of(self, name: str, rank: int) -> np.ndarray:
        """The members of ``rank``'s group of dim ``name``."""
        if not 0 <= rank < self.world_size:
            raise LayoutError(f"rank={rank} must be in [0, world_size={self.world_size})")
        groups = self.groups(name)
        return groups[(groups == rank).any(axis=1)][0]

    # ----------------------------------------------------------------- summaries
    def topology(self) -> pd.DataFrame:
        """Per dim: group size, number of groups, most nodes one group spans, whether all stay in one node."""
        import pandas as pd

        rows = []
        for name in DIM_NAMES:
            groups = self.groups(name)
            nodes = groups // self.local_world_size
            spanned = (np.diff(nodes, axis=1) != 0).sum(axis=1) + 1 if groups.shape[1] > 1 else np.ones(1, int)
            rows.append(
                {
                    "dim": name,
                    "group_size": groups.shape[1],
                    "num_groups": groups.shape[0],
                    "nodes_spanned": int(spanned.max()),
                    "intra_node": bool(spanned.max() == 1),
                }
            )
        return pd.DataFrame(rows).set_index("dim")

    def seed_table(self, step: int = 0, phase: PhaseType | str = "training") -> pd.DataFrame:
        """The seed of every generator of every rank after ``set_step(step, phase)``: exact ``uint64`` columns."""
        import pandas as pd

        c = self._coordinates
        seeds = seed_arrays(self._fields, c["tensor_rank"], c["data_rank"], c["pipeline_rank"], step, phase)
        frame = pd.DataFrame({name: seeds[name] for name in GENERATORS})
        frame.index.name = "rank"
        return frame

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
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Layout):
            return NotImplemented
        return self._fields == other._fields

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, str(v)) for k, v in self._fields.items())))

    def __repr__(self) -> str:
        s = self.summary()
        return (
            f"Layout(world_size={s['world_size']}, local_world_size={s['local_world_size']}, "
            f"tensor_parallel={s['tensor_parallel']}, pipeline_parallel={s['pipeline_parallel']}, "
            f"sequence_data_parallel={s['sequence_data_parallel']}, {s['order']}; "
            f"data_parallel={s['data_parallel']}, nodes={s['num_nodes']})"
        )

    def _repr_html_(self) -> str:
        """Summary table, groups per dim and (up to 4,096 ranks) the rank grid as an inline PNG."""
        summary = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
            for k, v in self.summary().items()
        )
        topology = self.topology().to_html()
        picture = ""
        if self.world_size <= 4096:
            import base64

            png = self._repr_png_()
            if png:
                data = base64.b64encode(png).decode("ascii")
                picture = f"<div><img alt='rank grid' src='data:image/png;base64,{data}'/></div>"
        return (
            "<div class='fastdist-layout' style='display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start'>"
            f"<div><b>Layout</b><table>{summary}</table><b>Groups per dim</b>{topology}</div>{picture}</div>"
        )

    def _repr_png_(self) -> bytes | None:
        """The rank grid coloured by tensor groups, as PNG bytes (None when matplotlib is missing)."""
        try:
            from .viz import plot_layout, to_png
        except ImportError:
            return None
        return to_png(plot_layout(self))

    def as_convention(self) -> Any:
        """This layout as a ``fastdist_lab.conventions.Convention`` (axes fastest first; dims as aliases)."""
        from .conventions import layout_convention

        return layout_convention(self)

    def device_mesh_spec(self) -> tuple[tuple[int, ...], tuple[str, ...], np.ndarray]:
        """``(mesh_shape, mesh_dim_names, mesh)`` whose row-major ``init_device_mesh`` numbering is this layout's."""
        from .conventions import device_mesh_spec

        return device_mesh_spec(self)

    @classmethod
    def from_fastllm(cls, source: Any, world_size: int | None = None, local_world_size: int | None = None) -> Layout:
        """The layout of a Fast-LLM config: a path, YAML text or a mapping holding an experiment's
        ``model: distributed:`` section, a ``distributed:`` mapping or the fields themselves (Fast-LLM 91b28fab or
        current field names; see ``fastdist_lab.fastllm``). ``world_size`` / ``local_world_size`` win over the
        file's; one node by default. ``LayoutError`` names the bad key, its line, or the broken rule."""
        from .fastllm import read_fastllm

        settings = read_fastllm(source, world_size=world_size, local_world_size=local_world_size)
        try:
            return cls(**settings.fields)
        except LayoutError as error:
            where = settings.section or "the mapping"
            raise LayoutError(f"{settings.source}: {where}: {error}") from None
