"""Cross-check ``fastdist_lab.conventions.torchtitan(..., version=...)`` against torchtitan's own ``ParallelDims``,
built for every rank of each world on torch's fake process group (CPU only).

Not collected by pytest (torchtitan is not a dependency). Run it by hand, one torchtitan vintage at a time, with a
torchtitan source tree at the matching commit (64dc922fc for "2025-12", 183a0d2e7 for "2026-01", 253a12a2a or
later for "2026-08"), e.g.::

    git clone https://github.com/pytorch/torchtitan /tmp/tt && git -C /tmp/tt checkout 64dc922fc
    pip install torch numpy pandas tyro tokenizers spmd-types -e .   # what torchtitan's modules import
    python tests/conventions/crosscheck_torchtitan.py 2025-12 /tmp/tt [--quick]

For every set of degrees (worlds up to 32; dp_replicate, dp_shard (explicit or -1), cp, tp, pp, ep and, where
the vintage has it, etp) it compares, without patching torchtitan: whether ``ParallelDims`` (and ``build_mesh``)
refuses, and every group of every one-dimensional mesh, read back from the built meshes (``mesh[name].mesh``).
"""

from __future__ import annotations

import itertools
import sys
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
                for name, sub in meshes.items():
                    found.setdefault(name, set()).add(tuple(sub.mesh.flatten().tolist()))
            except (AssertionError, ValueError, RuntimeError) as error:
                return f"{type(error).__name__}: {error}"
            finally:
                dist.destroy_process_group()
    return found


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


def main(argv: list[str]) -> int:
    warnings.simplefilter("ignore")
    version, tree = argv[0], argv[1]
    sys.path.insert(0, tree)
    from torchtitan.distributed.parallel_dims import ParallelDims

    configs = accepted = refused = groups = 0
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
        f"{refused} refused), {groups} groups"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
