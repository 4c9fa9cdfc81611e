"""Cross-check ``fastdist_lab.conventions.torchtitan(..., version=...)`` against torchtitan's own ``ParallelDims``,
built for every rank of each world on torch's fake process group (CPU only).

Not collected by pytest (torchtitan is not a dependency). Run it by hand, one torchtitan vintage at a time, with a
torchtitan source tree at the matching commit (64dc922fc for "2025-12", 183a0d2e7 for "2026-01", 253a12a2a or
later for "2026-08"). Only ``torchtitan/distributed/parallel_dims.py`` and what it imports run (the package's
``__init__``, which imports triton and tokenizers for its quantization converters, is skipped): the two older trees
need nothing more, 2026-08 (its ``config``) needs tyro, docstring-parser and spmd-types, pure Python, installed in a
venv of their own on top of the project's, e.g.::

    git -C TORCHTITAN_GIT archive 64dc922fc torchtitan | tar -x -C /tmp/tt-64dc922fc
    python -m venv /tmp/ttvenv && echo "$PROJECT_VENV/lib/python3.11/site-packages" > \
        /tmp/ttvenv/lib/python3.11/site-packages/project.pth
    /tmp/ttvenv/bin/pip install --no-deps tyro docstring-parser spmd-types
    PYTHONPATH=src /tmp/ttvenv/bin/python tests/conventions/crosscheck_torchtitan.py 2025-12 /tmp/tt-64dc922fc [--quick]

For every set of degrees (worlds up to 32; dp_replicate, dp_shard (explicit or -1), cp, tp, pp, ep and, where
the vintage has it, etp) it compares, without patching torchtitan: whether ``ParallelDims`` (and ``build_mesh``)
refuses, and every group of every one-dimensional mesh, read back from the built meshes (``mesh[name].mesh``).
With ep > 1 it also compares the meshes torchtitan's ``models/*/parallelize.py`` give the experts (``ep``; the expert
TP mesh ``etp``, or ``tp`` in 2025-12 with etp = tp; ``dp_mod_ep`` or ``get_mesh(["dp_replicate", "efsdp"])``) with
``layout_equivalent(...)[0].groups("expert" / "expert_tensor" / "expert_data")``.

Last run (2026-12-02, torch 2.13.0 CPU, the full grid, no ``--quick``), each ending "identical":
* 2025-12 at 64dc922fc: 3094 configurations (1200 accepted, 1894 refused), 57185 groups; with ep > 1, the Layout's
  expert groups are torchtitan's expert meshes in 685 configurations, 19026 groups (543 s).
* 2026-01 at 183a0d2e7: 3094 configurations (1589 accepted, 1505 refused), 154318 groups; expert meshes in 1074
  configurations, 31419 groups (1512 s).
* 2026-08 at 253a12a2a (both spmd backends): 1935 configurations (1111 accepted, 824 refused), 103889 groups;
  expert meshes in 789 configurations, 23713 groups (1865 s).
"""

from __future__ import annotations

import itertools
import os
import sys
import types
import warnings

import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from fastdist_lab.conventions import torchtitan
from fastdist_lab.errors import ConventionError


def their_groups(ParallelDims, version: str, degrees: dict, world: int) -> dict[str, set] | str:
    """Every group of every 1-d mesh torchtitan builds (both spmd backends for 2026-08), or its refusal."""
    found: dict[str, set] = {}
    backends = ("spmd_types", "partial_dtensor") if version == "2026-08" else (None,)
    for backend in backends:
        for rank in range(world):
            dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
            try:
                kwargs = dict(degrees, world_size=world)
                if backend:
                    kwargs["spmd_backend"] = backend
                dims = ParallelDims(**kwargs)
                mesh = dims.build_mesh()
                if version == "2025-12":
                    names = list(mesh.mesh_dim_names or ()) + ["dp", "dp_shard_cp", "dp_cp", "ep"]
                    meshes = {}
                    for name in names:
                        try:
                            meshes[name] = mesh[name]
                        except (KeyError, RuntimeError, ValueError):
                            pass
                else:
                    meshes = dict(getattr(dims, "_single_axis_meshes", None) or dims._meshes)
                if dims.ep > 1:
                    for dim, sub in expert_meshes(dims, mesh, version).items():
                        meshes[f"Layout {dim}"] = sub
                for name, sub in meshes.items():
                    members = (rank,) if sub is None else tuple(sub.mesh.flatten().tolist())
                    found.setdefault(name, set()).add(members)
            except (AssertionError, ValueError, RuntimeError) as error:
                return f"{type(error).__name__}: {error}"
            finally:
                dist.destroy_process_group()
    return found


def expert_meshes(dims, mesh, version: str) -> dict:
    """The meshes torchtitan's ``parallelize`` gives the experts, by the Layout's expert dim (``None``: a single
    rank): ``ep``; the expert TP mesh (``etp``; 2025-12: ``tp`` when etp = tp; none when etp = 1 or in 2026-08); the
    expert FSDP mesh with dp_replicate before it (``dp_mod_ep`` in 2025-12, ``["dp_replicate", "efsdp"]`` or
    ``"efsdp"`` after), sliced as torchtitan's ``models/*/parallelize.py`` slice them."""
    if version == "2025-12":
        names = mesh.mesh_dim_names or ()
        data = tuple(n for n in ("dp_replicate", "dp_shard_mod_ep") if n in names)
        tensor = mesh["tp"] if dims.etp == dims.tp and "tp" in names else None
        return {"expert": mesh["ep"], "expert_tensor": tensor, "expert_data": mesh[data]}
    data = ["dp_replicate", "efsdp"] if dims.dp_replicate_enabled else ["efsdp"]
    tensor = dims.get_optional_mesh("etp") if version == "2026-01" else None
    return {"expert": dims.get_mesh("ep"), "expert_tensor": tensor, "expert_data": dims.get_mesh(data)}


def configurations(version: str, quick: bool):
    sizes = (1, 2) if quick else (1, 2, 3, 4)
    eps = (1, 2, 4) if quick else (1, 2, 3, 4, 6, 8)
    for dpr, dps, cp, tp, pp in itertools.product(sizes, (-1, *sizes), sizes, sizes, (1, 2)):
        world = dpr * max(dps, 1) * cp * tp * pp * (2 if dps == -1 else 1)
        if world > (16 if quick else 32):
            continue
        for ep in eps:
            for etp in (None,) if version == "2026-08" else sorted({1, tp}):
                degrees = dict(dp_replicate=dpr, dp_shard=dps, cp=cp, tp=tp, pp=pp, ep=ep)
                if etp is not None:
                    degrees["etp"] = etp
                yield world, degrees
    # worlds the degrees do not fill, degrees < 1, an etp torchtitan does not support
    yield 12, dict(dp_replicate=1, dp_shard=4, cp=1, tp=2, pp=1, ep=1, **({} if version == "2026-08" else {"etp": 1}))
    yield 8, dict(dp_replicate=0, dp_shard=-1, cp=1, tp=2, pp=1, ep=1, **({} if version == "2026-08" else {"etp": 1}))
    yield 4, dict(dp_replicate=1, dp_shard=-1, cp=1, tp=8, pp=1, ep=1, **({} if version == "2026-08" else {"etp": 1}))
    if version != "2026-08":
        yield 16, dict(dp_replicate=1, dp_shard=-1, cp=1, tp=4, pp=1, ep=2, etp=2)


def load_parallel_dims(tree: str):
    """torchtitan's ``ParallelDims`` from the source tree ``tree``, its code untouched; the package's
    ``__init__`` (which registers quantization converters and so imports triton and tokenizers) is not run."""
    package = types.ModuleType("torchtitan")
    package.__path__ = [os.path.join(tree, "torchtitan")]
    sys.modules["torchtitan"] = package
    from torchtitan.distributed.parallel_dims import ParallelDims

    return ParallelDims


def main(argv: list[str]) -> int:
    warnings.simplefilter("ignore")
    version, tree = argv[0], argv[1]
    ParallelDims = load_parallel_dims(tree)

    configs = accepted = refused = groups = experts = expert_groups = 0
    for world, degrees in configurations(version, "--quick" in argv):
        configs += 1
        theirs = their_groups(ParallelDims, version, degrees, world)
        try:
            ours = torchtitan(**degrees, version=version, world_size=world)
        except ConventionError as error:
            if not isinstance(theirs, str):
                print(f"MISMATCH {version} world={world} {degrees}: we refuse ({error}), torchtitan accepts")
                return 1
            refused += 1
            continue
        if isinstance(theirs, str):
            print(f"MISMATCH {version} world={world} {degrees}: torchtitan refuses ({theirs}), we accept")
            return 1
        mine = {name: {tuple(int(x) for x in row) for row in rows} for name, rows in ours.named_groups().items()}
        if ours.degrees["ep"] > 1:
            layout, why = ours.layout_equivalent()
            if not layout.has_experts:
                print(f"NO EXPERTS {version} world={world} {degrees}: {why}")
                return 1
            for dim in ("expert", "expert_tensor", "expert_data"):
                rows = {tuple(int(x) for x in row) for row in layout.groups(dim)}
                if rows != theirs.pop(f"Layout {dim}"):
                    print(f"EXPERTS {version} world={world} {degrees} {dim}: the Layout's {sorted(rows)[:4]}")
                    return 1
                expert_groups += len(rows)
            experts += 1
        for name in sorted(set(mine) | set(theirs)):
            if name not in theirs and all(len(g) == 1 for g in mine[name]):
                continue  # a dim of size 1, which torchtitan leaves out of its mesh
            if mine.get(name) != theirs.get(name):
                print(
                    f"GROUPS {version} world={world} {degrees} {name}: ours {sorted(mine.get(name, ()))[:4]} "
                    f"theirs {sorted(theirs.get(name, ()))[:4]}"
                )
                return 1
            groups += len(theirs[name])
        accepted += 1
    print(
        f"identical to torchtitan's ParallelDims ({version}): {configs} configurations ({accepted} accepted, "
        f"{refused} refused), {groups} groups; with ep > 1, the Layout's expert groups are torchtitan's expert "
        f"meshes in {experts} configurations, {expert_groups} groups"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
