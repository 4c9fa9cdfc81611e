"""torchtitan's ``ParallelDims``: its device meshes at three points of its history, experts included.

Facts implemented (read from ``torchtitan/distributed/parallel_dims.py`` at each commit named below, rewritten
here, checked against it by ``tests/conventions/crosscheck_torchtitan.py``). Every mesh is row-major over the
world (``init_device_mesh`` or ``DeviceMesh._unflatten`` of the 1-d world mesh), last dim fastest.

* ``"2025-12"`` (to commit 64dc922fc, 2025-12-12): one world mesh ``(pp, dp_replicate, dp_shard, cp, tp)`` with
  the flattened ``dp`` (dp_replicate, dp_shard), ``dp_shard_cp`` and ``dp_cp``; with experts (ep > 1) ``dp_shard``
  is split into ``(dp_shard_mod_ep, dp_shard_in_ep)`` and ``ep`` is flattened from ``dp_shard_in_ep``, ``cp``
  and, when etp == 1, ``tp``. Refuses etp other than tp or 1 and ep not fitting dp_shard * cp (* tp).
* ``"2026-01"`` (commits 183a0d2e7, 2025-12-17, to c4b409af2, 2026-04-30): meshes unflattened from the world:
  ``(pp, batch, cp, tp)``, ``(pp, dp_replicate, fsdp, tp)``, ``(pp, dp_replicate, efsdp, ep, etp)``, and ``loss``
  flattened from (batch, cp); batch = dp_replicate * dp_shard, fsdp = dp_shard * cp, efsdp = fsdp * tp / (etp * ep).
* ``"2026-08"`` (``"current"``; c4b409af2 to 253a12a2a, 2026-08-22, expert tensor parallelism removed):
  ``(pp, batch, cp, tp)``, ``(pp, dp_replicate, dp_shard, cp, tp)``, ``(pp, dp, cp, tp)`` (spmd_types backend),
  ``(pp, dp_replicate, fsdp, tp)`` (partial_dtensor backend), ``(pp, dp_replicate, efsdp, ep)`` and ``loss``;
  efsdp = fsdp * tp / ep; refuses ep not dividing dp_shard * cp * tp.

Every vintage refuses degrees < 1 (dp_shard may be -1: the rest of the world) and degrees whose product is not the
world, with torchtitan's messages. A ``TorchtitanMesh`` is one ``DeviceMesh`` over the finest axes all of a
vintage's meshes share (e.g. ``dp_shard`` cut into ``dp_shard_in_efsdp`` and ``dp_shard_in_ep``), each torchtitan
mesh name an alias of its axes; when no such axes exist (ep straddling cp or tp groups of unequal sizes), the
names that do not fit come from their own mesh (``views``) in ``groups`` and ``named_groups``.

With ep > 1 the expert meshes are a data-first Layout's expert groups (``Layout(expert_parallel=ep,
expert_tensor_parallel=etp)``, ETP 1 in 2026-08; ``docs/formulas.md``, "Experts"): every mesh is row-major with the
expert-tensor dim (etp, or tp in 2025-12 with etp = tp) fastest inside a stage, then ep, then the expert-FSDP dim and
dp_replicate, which is the Layout's rule (stage rank ``i``: ETP rank ``i % ETP``, EP rank ``(i // ETP) % EP``).
``layout_equivalent`` returns that Layout after checking it group by group (``expert_meshes``, ``expert_mismatch``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ConventionError, ConventionWorldSizeNeeded
from ..validation import check_int
from .device_mesh import DeviceMesh

TORCHTITAN_VERSIONS: dict[str, str] = {
    "2025-12": "torchtitan to commit 64dc922fc (2025-12-12): one world mesh with flattened dp, dp_shard_cp, dp_cp",
    "2026-01": "torchtitan 183a0d2e7 to c4b409af2 (2025-12-17 to 2026-04-30): unflattened meshes, etp",
    "2026-08": "torchtitan c4b409af2 to 253a12a2a (2026-04-30 to 2026-08-22): unflattened meshes, no etp",
}
"""The vintages of torchtitan's ``ParallelDims`` that ``torchtitan(..., version=...)`` reproduces."""

VERSION_ALIASES: dict[str, str] = {"current": "2026-08", "today": "2026-08", "dec-2025": "2025-12"}
"""Other names accepted for a version."""

DEFAULT_VERSION = "2025-12"
"""The version the ``torchtitan(...)`` preset builds unless told otherwise (the one this project followed first;
kept so that code naming ``dp_shard_cp`` keeps working)."""

LOADER_VERSION = "2026-08"
"""The version a torchtitan config or launch line is read as unless told otherwise: today's meshes
(``version="2025-12"``, ``--torchtitan-version 2025-12`` or the paste box's choice gives December 2025's)."""

BASE_DIMS: tuple[str, ...] = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
"""The dense world-mesh dims of every vintage, slowest first."""


def torchtitan_version(version: str) -> str:
    """``version`` as one of ``TORCHTITAN_VERSIONS`` (aliases such as ``"current"`` accepted)."""
    key = VERSION_ALIASES.get(str(version).lower(), str(version))
    if key not in TORCHTITAN_VERSIONS:
        names = ", ".join([*TORCHTITAN_VERSIONS, *VERSION_ALIASES])
        raise ConventionError(f"version={version!r} is not a torchtitan vintage; use one of {names}")
    return key


def parallel_dims(
    version: str,
    world_size: int | None,
    dp_replicate: int = 1,
    dp_shard: int = -1,
    cp: int = 1,
    tp: int = 1,
    pp: int = 1,
    ep: int = 1,
    etp: int | None = None,
) -> dict[str, int]:
    """The degrees ``ParallelDims(...)`` of ``version`` ends up with (``dp_shard=-1`` resolved), or
    ``ConventionError`` with torchtitan's reason when it refuses them."""
    version = torchtitan_version(version)
    degrees = {"dp_replicate": dp_replicate, "dp_shard": dp_shard, "cp": cp, "tp": tp, "pp": pp, "ep": ep}
    if version == "2026-08":
        if etp not in (None, 1):
            raise ConventionError(
                f"etp={etp!r}: torchtitan removed expert tensor parallelism in commit c4b409af2 (2026-04-30); "
                "use version='2026-01' or '2025-12' (--torchtitan-version 2026-01)"
            )
    else:
        degrees["etp"] = 1 if etp is None else etp
    degrees = {name: check_int(name, value, error=ConventionError) for name, value in degrees.items()}
    refuse = "torchtitan's ParallelDims refuses this: "
    for name, value in degrees.items():
        if name != "dp_shard" and value < 1:
            raise ConventionError(f"{refuse}Parallelism degree should be >= 1, except for dp_shard ({name}={value})")
    if not (degrees["dp_shard"] == -1 or degrees["dp_shard"] >= 1):
        raise ConventionError(f"{refuse}dp_shard must -1 or >=1. (dp_shard={degrees['dp_shard']})")
    others = degrees["dp_replicate"] * cp * tp * pp
    if world_size is None:
        if degrees["dp_shard"] == -1:
            raise ConventionWorldSizeNeeded(
                "dp_shard=-1 means the rest of the world: pass the world size (world_size=..., --world-size)"
            )
        world_size = others * degrees["dp_shard"]
    world = check_int("world_size", world_size, error=ConventionError)
    if degrees["dp_shard"] < 0:
        degrees["dp_shard"] = world // others
        if degrees["dp_shard"] < 1:
            raise ConventionError(
                f"{refuse}dp_shard=-1 leaves {world} // (dp_replicate * cp * tp * pp = {others}) = 0 ranks to shard"
            )
    dps = degrees["dp_shard"]
    if others * dps != world:
        raise ConventionError(
            f"{refuse}Invalid parallel dims: dp_replicate({degrees['dp_replicate']}) * dp_shard({dps}) * cp({cp}) * "
            f"tp({tp}) * pp({pp}) != WORLD_SIZE({world})"
        )
    sparse = dps * cp * tp
    if version == "2026-08" and sparse % ep:
        raise ConventionError(f"{refuse}expert_parallel_degree ({ep}) must divide dp_shard * cp * tp ({sparse})")
    if version != "2026-08" and ep > 1 and degrees["etp"] not in (tp, 1):
        raise ConventionError(f"{refuse}Currently we only support ETP=TP or ETP=1 (etp={degrees['etp']}, tp={tp})")
    if version == "2025-12" and ep > 1:
        borrowed = cp if degrees["etp"] == tp else cp * tp
        if ep % borrowed or (dps * borrowed) % ep:
            what = "cp" if degrees["etp"] == tp else "cp * tp"
            raise ConventionError(
                f"{refuse}expert parallelism borrows all of {what} and part of dp_shard: ep ({ep}) must be a "
                f"multiple of {what} ({borrowed}) and divide dp_shard * {what} ({dps * borrowed})"
            )
    if version == "2026-01" and sparse % (degrees["etp"] * ep):
        raise ConventionError(
            f"torchtitan cannot unflatten the expert mesh (pp, dp_replicate, efsdp, ep, etp): dp_shard * cp * tp "
            f"({sparse}) is not divisible by etp * ep ({degrees['etp'] * ep})"
        )
    degrees["world_size"] = world
    return degrees


MESH_NAMES: dict[str, tuple[str, ...]] = {
    "2025-12": ("pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "dp_shard_cp", "dp_cp"),
    "2025-12 ep": (
        "pp",
        "dp_replicate",
        "dp_shard_mod_ep",
        "dp_shard_in_ep",
        "cp",
        "tp",
        "dp",
        "dp_shard_cp",
        "dp_cp",
        "ep",
    ),
    "2026-01": ("pp", "batch", "loss", "dp_replicate", "fsdp", "cp", "tp", "ep", "efsdp", "etp"),
    "2026-08": ("pp", "batch", "loss", "dp_replicate", "dp", "dp_shard", "fsdp", "cp", "tp", "ep", "efsdp"),
}
"""The one-dimensional meshes torchtitan's ``ParallelDims`` of each vintage names (``"2025-12 ep"``: with ep > 1)."""


def _views(version: str, d: Mapping[str, int]) -> tuple[dict[str, tuple[tuple[str, ...], tuple[int, ...]]], dict]:
    """(meshes by role, each (dim names, sizes) slowest first, the first one naming the axes; flattened name ->
    (mesh, dims)). Roles are torchtitan's: ``world`` (2025-12), ``dataloading``, ``dense``, ``dense_fsdp``,
    ``dense_fwdbwd``, ``sparse``; ``basis`` is the (pp, dp_replicate, dp_shard, cp, tp) grid that names the axes."""
    pp, dpr, dps, cp, tp, ep = (d[k] for k in ("pp", "dp_replicate", "dp_shard", "cp", "tp", "ep"))
    batch, fsdp = dpr * dps, dps * cp
    if version == "2025-12":
        if ep == 1:
            world = (BASE_DIMS, (pp, dpr, dps, cp, tp))
            flat = {"dp": ("dp_replicate", "dp_shard"), "dp_shard_cp": ("dp_shard", "cp")}
            flat["dp_cp"] = ("dp_replicate", "dp_shard", "cp")
            return {"world": world}, {name: ("world", dims) for name, dims in flat.items()}
        borrowed = cp if d["etp"] == tp else cp * tp
        names = ("pp", "dp_replicate", "dp_shard_mod_ep", "dp_shard_in_ep", "cp", "tp")
        world = (names, (pp, dpr, dps * borrowed // ep, ep // borrowed, cp, tp))
        shard = ("dp_shard_mod_ep", "dp_shard_in_ep")
        flat = {"dp": ("dp_replicate", *shard), "dp_shard_cp": (*shard, "cp"), "dp_cp": ("dp_replicate", *shard, "cp")}
        flat["ep"] = ("dp_shard_in_ep", "cp", "tp") if d["etp"] != tp else ("dp_shard_in_ep", "cp")
        return {"world": world}, {name: ("world", dims) for name, dims in flat.items()}
    views = {
        "basis": (BASE_DIMS, (pp, dpr, dps, cp, tp)),
        "dataloading": (("pp", "batch", "cp", "tp"), (pp, batch, cp, tp)),
    }
    if version == "2026-01":
        etp = d["etp"]
        views["dense_fsdp"] = (("pp", "dp_replicate", "fsdp", "tp"), (pp, dpr, fsdp, tp))
        views["sparse"] = (("pp", "dp_replicate", "efsdp", "ep", "etp"), (pp, dpr, fsdp * tp // (etp * ep), ep, etp))
    else:
        views["dense"] = (BASE_DIMS, (pp, dpr, dps, cp, tp))
        views["dense_fwdbwd"] = (("pp", "dp", "cp", "tp"), (pp, batch, cp, tp))
        views["dense_fsdp"] = (("pp", "dp_replicate", "fsdp", "tp"), (pp, dpr, fsdp, tp))
        views["sparse"] = (("pp", "dp_replicate", "efsdp", "ep"), (pp, dpr, fsdp * tp // ep, ep))
    return views, {"loss": ("dataloading", ("batch", "cp"))}


def _spans(names: Sequence[str], sizes: Sequence[int]) -> dict[str, tuple[int, int]]:
    """Each dim's (stride, stride * size) in a row-major mesh."""
    out, stride = {}, 1
    for name, size in zip(reversed(names), reversed(sizes)):
        out[name] = (stride, stride * size)
        stride *= size
    return out


def _refine(views: Mapping[str, tuple[tuple[str, ...], tuple[int, ...]]], world: int) -> tuple | None:
    """The finest row-major axes every view's dims are unions of: (names, sizes, dim -> its axes slowest first),
    or None when the views' boundaries do not nest. A dim of size 1 keeps an axis of size 1 of its own."""
    spans = [_spans(names, sizes) for names, sizes in views.values()]
    bounds = sorted({b for span in spans for low_high in span.values() for b in low_high})
    if any(b % a for a, b in zip(bounds, bounds[1:])):
        return None
    base, inner = spans[0], spans[-1]
    axes: list[tuple[str, int, int]] = []  # (name, low, high), fastest first
    for low, high in zip(bounds, bounds[1:]):
        owner = next(n for n, (a, b) in base.items() if a <= low and high <= b and a < b)
        name = owner
        if base[owner] != (low, high):
            name = f"{owner}_in_{next(n for n, (a, b) in inner.items() if a <= low and high <= b and a < b)}"
        while name in [a[0] for a in axes]:
            name += "_"
        axes.append((name, low, high))
    singles = {dim: low for span in spans for dim, (low, high) in span.items() if low == high}
    for dim, low in singles.items():
        if dim not in [a[0] for a in axes]:
            axes.append((dim, low, low))
    axes.sort(key=lambda a: (a[1], a[2]))
    members: dict[str, tuple[str, ...]] = {}
    for span in spans:
        for dim, (low, high) in span.items():
            if low == high:
                members[dim] = (dim,)
            else:
                members[dim] = tuple(a[0] for a in reversed(axes) if low <= a[1] and a[2] <= high and a[1] < a[2])
    names = tuple(a[0] for a in reversed(axes))
    sizes = tuple(max(a[2] // a[1], 1) for a in reversed(axes))
    return names, sizes, members


class TorchtitanMesh(DeviceMesh):
    """torchtitan's device meshes for one set of degrees and one vintage (see the module docstring).

    A ``DeviceMesh`` whose aliases are torchtitan's mesh names: ``groups("ep")``, ``groups("loss")``, ... give the
    groups torchtitan's ``ParallelDims`` builds (members in mesh order). ``mesh_names`` lists its one-dimensional
    meshes, ``named_groups()`` all their groups, ``views`` each global mesh as its own ``DeviceMesh``.
    """

    local_world_size: int | None = None
    """Processes per node, when known (set by the config loaders); ``layout_equivalent`` uses it."""
    source_notes: tuple[str, ...] = ()
    """Where the degrees and the world size came from (set by the config loaders)."""

    def __init__(self, version: str, degrees: Mapping[str, int]):
        self.version = torchtitan_version(version)
        self.degrees = dict(degrees)
        self._own: dict[str, str] = {}
        view_shapes, self._flattened = _views(self.version, self.degrees)
        self.views = {
            role: DeviceMesh(sizes, names, name=f"torchtitan {role} mesh")
            for role, (names, sizes) in view_shapes.items()
            if role != "basis"
        }
        refined = _refine(view_shapes, self.degrees["world_size"])
        if refined is None:  # no common finer axes: the basis grid, the other names through their own mesh
            names, sizes = view_shapes["basis"]
            basis = _spans(names, sizes)
            members: dict[str, tuple[str, ...]] = {}
            for role, (dims, shape) in view_shapes.items():
                for dim, (low, high) in _spans(dims, shape).items():
                    inside = [n for n in names if low <= basis[n][0] < basis[n][1] <= high]
                    if dim in names:
                        members.setdefault(dim, (dim,))
                    elif low < high and math.prod(basis[n][1] // basis[n][0] for n in inside) == high // low:
                        members.setdefault(dim, tuple(inside))
                    else:
                        self._own.setdefault(dim, role)
        else:
            names, sizes, members = refined
        for flat, (role, dims) in self._flattened.items():
            if all(dim in members for dim in dims):
                members[flat] = tuple(axis for dim in dims for axis in members[dim])
            else:
                self._own[flat] = role
        aliases = {dim: axes for dim, axes in members.items() if dim not in names and axes}
        name = "torchtitan" if self.version == DEFAULT_VERSION else f"torchtitan {self.version}"
        super().__init__(sizes, names, name=name, flattened=aliases)

    @property
    def mesh_names(self) -> tuple[str, ...]:
        """torchtitan's one-dimensional mesh names in this vintage (flattened ones included)."""
        key = "2025-12 ep" if self.version == "2025-12" and self.degrees["ep"] > 1 else self.version
        return MESH_NAMES[key]

    def groups(self, spec: Any) -> np.ndarray:
        """The groups of ``spec``: a mesh name of this vintage (or a sequence of axes, as on ``DeviceMesh``)."""
        if isinstance(spec, str) and spec in self._own:
            view = self.views[self._own[spec]]
            return view.groups(self._flattened[spec][1] if spec in self._flattened else spec)
        return super().groups(spec)

    def named_groups(self) -> dict[str, np.ndarray]:
        """Every group of every one-dimensional mesh torchtitan builds, by mesh name."""
        return {name: self.groups(name) for name in self.mesh_names}

    def layout_equivalent(self, local_world_size: int | None = None) -> tuple[Any, str]:
        """``(layout, why)``: the data-first ``Layout`` (tensor = tp, sequence-data = cp, batch-data =
        dp_replicate x dp_shard, pipeline = pp) with the same dense groups, or ``(None, reason)``.

        With ep > 1 the Layout has experts too (``expert_parallel`` = ep, ``expert_tensor_parallel`` = etp, 1 where
        the vintage has none) when its expert groups are torchtitan's expert meshes (``expert_meshes``); where one
        differs, the dense Layout comes back and ``why`` names that mesh. With ep = 1 torchtitan shards the experts
        as the dense layers (its ``models/*/parallelize.py`` use the expert meshes only when ``ep_enabled``)."""
        from ..layout import Layout
        from .equivalence import equivalent

        d = self.degrees
        local = local_world_size or self.local_world_size or d["world_size"]
        dense = dict(
            world_size=d["world_size"],
            local_world_size=local,
            tensor_parallel=d["tp"],
            pipeline_parallel=d["pp"],
            sequence_data_parallel=d["cp"],
        )
        try:
            layout = Layout(**dense)
        except ValueError as error:
            return None, f"no Layout: {error}"
        batch = "dp" if self.version == "2025-12" else "batch"
        # batch is (dp_replicate, dp_shard) flattened, named by those axes: it has no axes of its own when it has
        # size 1 and ep straddles unequal cp or tp groups (then it comes from its own mesh, which equivalent can't read)
        data = "dp" if self.version == "2025-12" else ("dp_replicate", "dp_shard")
        mapping = {"tensor": "tp", "sequence_data": "cp", "batch_data": data, "pipeline": "pp"}
        result = equivalent(layout, self, mapping)
        if not result:
            return None, f"no Layout: {result.reason}"
        notes = [f"the dense groups are this Layout's (cp = sequence-data, {batch} = batch-data)"]
        if d["ep"] > 1:
            etp = d.get("etp", 1)
            try:
                moe = Layout(**dense, expert_parallel=d["ep"], expert_tensor_parallel=etp)
            except ValueError as error:
                return layout, "; ".join([*notes, f"no Layout holds torchtitan's expert meshes: {error}"])
            mismatch = self.expert_mismatch(moe)
            if mismatch:
                return layout, "; ".join([*notes, mismatch])
            pairs = ", ".join(f"{dim} = {mesh}" for dim, (mesh, _) in self.expert_meshes().items())
            notes.append(f"so are the expert groups, torchtitan's expert meshes (EP {d['ep']}, ETP {etp}: {pairs})")
            layout = moe
        return layout, "; ".join(notes)

    def expert_meshes(self) -> dict[str, tuple[str, np.ndarray]]:
        """torchtitan's expert groups by the Layout's expert dim: ``{"expert": (mesh, groups), "expert_tensor":
        ..., "expert_data": ...}`` (members in mesh order), or ``{}`` when ep = 1.

        ``expert`` is the ``ep`` mesh; ``expert_tensor`` the ``etp`` mesh (2026-01), the ``tp`` mesh (2025-12 with
        etp = tp) or single ranks (etp = 1, and 2026-08, which has no etp); ``expert_data`` the expert-FSDP mesh with
        ``dp_replicate`` before it, as torchtitan's ``parallelize`` slices it: ``(dp_replicate, efsdp)``
        (2026-01, 2026-08) or ``(dp_replicate, dp_shard_mod_ep)`` (2025-12, its ``dp_mod_ep`` mesh).
        """
        d = self.degrees
        if d["ep"] == 1:
            return {}
        singles = np.arange(d["world_size"]).reshape(-1, 1)
        if self.version == "2025-12":
            shard, world = "dp_shard_mod_ep", self.views["world"]
            tensor = ("tp", self.groups("tp")) if d["etp"] == d["tp"] else ("single-rank (etp = 1)", singles)
        else:
            shard, world = "efsdp", self.views["sparse"]
            tensor = ("etp", self.groups("etp")) if "etp" in d else ("single-rank (no etp)", singles)
        data = (f"(dp_replicate, {shard})", world.groups(("dp_replicate", shard)))
        return {"expert": ("ep", self.groups("ep")), "expert_tensor": tensor, "expert_data": data}

    def expert_mismatch(self, layout: Any) -> str:
        """``""`` when ``layout``'s expert groups are torchtitan's expert meshes (``expert_meshes``; members in
        order, groups in any order), else one line naming the first mesh that differs and how."""
        from .equivalence import first_group_mismatch

        found = first_group_mismatch(layout, self.expert_meshes().items())
        if found is None:
            return ""
        dim, mesh, theirs, ours = found
        if theirs.shape != ours.shape:
            how = f"its groups have {theirs.shape[1]} ranks, the Layout's {ours.shape[1]}"
        else:
            rows = {tuple(row) for row in ours.tolist()}
            row = next(r for r in theirs.tolist() if tuple(r) not in rows)
            other = ours[layout.group_index(dim)[row[0]]].tolist()
            how = f"rank {row[0]}'s group is {row} in torchtitan, {other} in the Layout"
        return f"torchtitan's {mesh} mesh is not the Layout's {dim} groups: {how}"

    def describe_degrees(self) -> str:
        """One line: the degrees in torchtitan's words."""
        d = self.degrees
        text = ", ".join(f"{k}={d[k]}" for k in ("pp", "dp_replicate", "dp_shard", "cp", "tp", "ep") if k in d)
        if "etp" in d:
            text += f", etp={d['etp']}"
        return f"world {d['world_size']}: {text} ({self.version})"


def torchtitan(
    pp: int = 1,
    dp_replicate: int = 1,
    dp_shard: int = 1,
    cp: int = 1,
    tp: int = 1,
    ep: int = 1,
    etp: int | None = None,
    *,
    version: str = DEFAULT_VERSION,
    world_size: int | None = None,
) -> TorchtitanMesh:
    """torchtitan's meshes for these ``ParallelDims`` degrees in ``version`` ("2025-12", "2026-01" or "2026-08",
    alias "current"). ``dp_shard=-1`` takes the rest of ``world_size``. Refuses, with torchtitan's reason, what its
    ``ParallelDims`` refuses."""
    degrees = parallel_dims(version, world_size, dp_replicate, dp_shard, cp, tp, pp, ep, etp)
    return TorchtitanMesh(version, degrees)
