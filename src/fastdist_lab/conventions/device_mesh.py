"""torch's ``DeviceMesh`` numbering (row-major, last dim fastest) and the frameworks built on it.

``init_device_mesh(device, shape, mesh_dim_names=names)`` numbers ranks like ``torch.arange(n).view(shape)``:
the LAST mesh dim varies fastest. The group of a dim holds the ranks that differ only along it; a flattened
group (``mesh[("a", "b")]._flatten()``) runs over the named dims row-major (last named fastest). Presets:
picotron's process-group grid ``(dp, pp, cp, tp)`` and DeepSpeed's ``PipeModelDataParallelTopology`` axes
``(pipe, data, model)`` (a row-major cartesian product, last axis fastest). torchtitan's meshes, which change with
its vintage, are in ``torchtitan_dims``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import ConventionError
from ..layout import DIM_AXES, Layout
from .base import Convention


class DeviceMesh(Convention):
    """``DeviceMesh(shape, names)``: the numbering of ``init_device_mesh(..., shape, mesh_dim_names=names)``.

    ``shape``/``names`` are slowest first, as torch takes them; ``axes`` (fastest first) is their reverse.
    ``groups("tp")`` are the per-dim groups, ``groups(("dp_shard", "cp"))`` a flattened dim with its members
    row-major over the names in the order given (torch requires mesh order for slicing; any order is accepted
    here). ``mesh`` is ``arange(n).reshape(shape)``.
    """

    def __init__(
        self,
        shape: Sequence[int],
        names: Sequence[str] | None = None,
        *,
        name: str = "DeviceMesh",
        flattened: Mapping[str, Sequence[str]] | None = None,
    ):
        shape = tuple(shape)
        names = tuple(names) if names is not None else tuple(f"dim{i}" for i in range(len(shape)))
        if len(names) != len(shape):
            raise ConventionError(f"mesh shape {shape} has {len(shape)} dims but {len(names)} names {names}")
        super().__init__(names[::-1], shape[::-1], name=name, aliases=flattened)
        self.mesh_shape: tuple[int, ...] = tuple(int(s) for s in shape)
        self.mesh_dim_names: tuple[str, ...] = names

    @property
    def mesh(self) -> np.ndarray:
        """``arange(world_size).reshape(mesh_shape)``: torch's mesh tensor as a numpy array."""
        return self.grid

    def member_axes(self, spec: str | int | Sequence[str | int]) -> tuple[str, ...]:
        """The dims ``spec`` names (a name, a mesh-dim index, a flattened alias, or a sequence of them), in member
        order: row-major over the names as given, so the LAST listed varies fastest."""
        items = [spec] if isinstance(spec, (str, int, np.integer)) else list(spec)
        if not items:
            raise ConventionError("a group spec needs at least one mesh dim")
        names: list[str] = []
        for item in items:
            if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
                if not 0 <= item < len(self.mesh_dim_names):
                    raise ConventionError(f"mesh dim {item} out of range for {len(self.mesh_dim_names)} dims")
                names.append(self.mesh_dim_names[item])
            elif item in self.aliases:
                names.extend(self.aliases[item])
            else:
                self.rank_grid.index(item)
                names.append(item)
        if len(set(names)) != len(names):
            raise ConventionError(f"mesh dims {names} repeat a name")
        return tuple(reversed(names))

    def __repr__(self) -> str:
        dims = ", ".join(f"{n}={s}" for n, s in zip(self.mesh_dim_names, self.mesh_shape))
        return f"{self.name}({dims}; world {self.world_size}, last dim fastest)"


PICOTRON_DIMS: tuple[str, ...] = ("dp", "pp", "cp", "tp")
"""picotron's ``ProcessGroupManager`` grid ``arange(world).view(dp, pp, cp, tp)``, slowest first."""

DEEPSPEED_AXES: tuple[str, ...] = ("pipe", "data", "model")
"""DeepSpeed's ``PipeModelDataParallelTopology`` axes, outermost (slowest) first."""


def picotron(dp: int = 1, pp: int = 1, cp: int = 1, tp: int = 1) -> DeviceMesh:
    """picotron's grid ``arange(world).view(dp, pp, cp, tp)`` (tp fastest, dp slowest), with its ``cp_dp`` and
    ``pp_dp`` groups (``grid[:, p, :, t].flatten()`` and ``grid[:, :, c, t].flatten()``)."""
    return DeviceMesh(
        (dp, pp, cp, tp), PICOTRON_DIMS, name="picotron", flattened={"cp_dp": ("dp", "cp"), "pp_dp": ("dp", "pp")}
    )


class DeepSpeed(DeviceMesh):
    """DeepSpeed's ``PipeModelDataParallelTopology(num_pp, num_mp, num_dp)``: axes ``(pipe, data, model)``,
    model fastest; ``groups("data")`` are its ``get_axis_comm_lists("data")``."""

    def __init__(self, pipe: int = 1, data: int = 1, model: int = 1):
        super().__init__((pipe, data, model), DEEPSPEED_AXES, name="DeepSpeed")

    def get_axis_comm_lists(self, axis: str) -> list[list[int]]:
        """The groups along ``axis`` as nested lists (DeepSpeed's name for them)."""
        return self.groups(axis).tolist()


# ---------------------------------------------------------------------- export of a Layout
def layout_device_mesh(layout: Layout) -> DeviceMesh:
    """``layout`` exported as a ``DeviceMesh`` whose flattened aliases are the nine named dims."""
    shape, names, _ = layout.device_mesh_spec()
    flattened = {dim: layout.dim_axes(dim)[::-1] for dim in DIM_AXES if dim not in names}
    return DeviceMesh(shape, names, name="DeviceMesh export", flattened=flattened)


def layout_mesh_dims(layout: Layout, dim: str) -> tuple[str, ...]:
    """The mesh dim names (mesh order, slowest first) to slice and ``_flatten`` for this project's dim ``dim``."""
    if dim not in DIM_AXES:
        raise ConventionError(f"dim={dim!r} is not a dim; use one of {', '.join(DIM_AXES)}")
    return layout.dim_axes(dim)[::-1]
