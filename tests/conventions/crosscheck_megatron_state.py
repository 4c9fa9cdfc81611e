"""Cross-check ``MegatronParallelState`` (our ``initialize_model_parallel``) against Megatron-Core's own
``initialize_model_parallel``, run for every rank of each world on torch's fake process group (CPU only).

Not collected by pytest (Megatron-LM is not a dependency). Run it by hand with a Megatron-LM source tree, e.g.::

    git clone --depth 1 https://github.com/NVIDIA/Megatron-LM /tmp/mlm
    python -m venv /tmp/xvenv && . /tmp/xvenv/bin/activate
    pip install torch numpy pandas einops packaging pyyaml -e .   # plus whatever megatron.core imports
    PYTHONPATH=/tmp/mlm python tests/conventions/crosscheck_megatron_state.py [--quick]

For every configuration (world sizes up to 32; tensor, pipeline, context, expert and expert-tensor sizes;
default, tp-pp-dp and unusual orders; 1 or 2 distributed-optimizer instances; a virtual pipeline;
hierarchical context parallelism) it compares, without patching Megatron: whether Megatron refuses (and that our
refusal quotes its reason), and every group of every rank, read back from Megatron's module globals with
``torch.distributed.get_process_group_ranks``.
"""

from __future__ import annotations

import itertools
import sys
import warnings

import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from fastdist_lab.conventions import MegatronParallelState
from fastdist_lab.errors import ConventionError

GLOBALS = {
    "TENSOR_MODEL_PARALLEL_GROUP": "_TENSOR_MODEL_PARALLEL_GROUP",
    "PIPELINE_MODEL_PARALLEL_GROUP": "_PIPELINE_MODEL_PARALLEL_GROUP",
    "DATA_PARALLEL_GROUP": "_DATA_PARALLEL_GROUP",
    "CONTEXT_PARALLEL_GROUP": "_CONTEXT_PARALLEL_GROUP",
    "DATA_PARALLEL_GROUP_WITH_CP": "_DATA_PARALLEL_GROUP_WITH_CP",
    "MODEL_PARALLEL_GROUP": "_MODEL_PARALLEL_GROUP",
    "TENSOR_AND_CONTEXT_PARALLEL_GROUP": "_TENSOR_AND_CONTEXT_PARALLEL_GROUP",
    "TENSOR_AND_DATA_PARALLEL_GROUP": "_TENSOR_AND_DATA_PARALLEL_GROUP",
    "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP": "_TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP",
    "EMBEDDING_GROUP": "_EMBEDDING_GROUP",
    "POSITION_EMBEDDING_GROUP": "_POSITION_EMBEDDING_GROUP",
    "INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP": "_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP",
    "EXPERT_MODEL_PARALLEL_GROUP": "_EXPERT_MODEL_PARALLEL_GROUP",
    "EXPERT_TENSOR_PARALLEL_GROUP": "_EXPERT_TENSOR_PARALLEL_GROUP",
    "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP": "_EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP",
    "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP": "_EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP",
    "EXPERT_DATA_PARALLEL_GROUP": "_EXPERT_DATA_PARALLEL_GROUP",
    "INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP": "_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP",
    "INTER_PARTIAL_EXPERT_DATA_PARALLEL_GROUP": "_INTER_PARTIAL_EXPERT_DATA_PARALLEL_GROUP",
    "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP": "_INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP",
}


def megatron_groups(ps, world: int, kwargs: dict) -> dict[str, set[tuple[int, ...]]] | str:
    """Every group Megatron builds, by our name (a set of member tuples), or its refusal message."""
    found: dict[str, set[tuple[int, ...]]] = {}
    for rank in range(world):
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
        try:
            ps.initialize_model_parallel(create_gloo_process_groups=False, **kwargs)
        except (AssertionError, RuntimeError, ValueError) as error:
            ps.destroy_model_parallel()
            dist.destroy_process_group()
            return str(error) or type(error).__name__
        try:
            for name, attribute in GLOBALS.items():
                group = getattr(ps, attribute)
                if group is None:
                    continue
                found.setdefault(name, set()).add(tuple(dist.get_process_group_ranks(group)))
            for level, group in enumerate(ps._HIERARCHICAL_CONTEXT_PARALLEL_GROUPS or ()):
                name = f"HIERARCHICAL_CONTEXT_PARALLEL_GROUP_L{level}"
                found.setdefault(name, set()).add(tuple(dist.get_process_group_ranks(group)))
        finally:
            ps.destroy_model_parallel()
            dist.destroy_process_group()
    return found


REASONS = {
    "is not divisible by": "is not divisible by",
    "interleaved schedule": "interleaved schedule",
    "haven't": "does not name",
    "pp-last rank ordering": "pp-last rank ordering",
    "Pipeline parallel groups are expected": "Pipeline parallel groups are expected",
    "partial DistOpt shard factor": "partial DistOpt shard factor",
    "AssertionError": "hierarchical",  # a bare assert: np.prod(hierarchical sizes) == context_parallel_size
}


def same_reason(theirs: str, ours: str) -> bool:
    """Whether our refusal gives Megatron's reason (its key phrase; word for word where Megatron has words)."""
    for phrase, counterpart in REASONS.items():
        if phrase in theirs:
            return counterpart in ours and (phrase != "is not divisible by" or theirs.split(" by ")[0] in ours)
    return False


def configurations(quick: bool):
    sizes = (1, 2) if quick else (1, 2, 3, 4)
    orders = ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "tp-pp-cp-ep-dp", "tp-dp-cp-ep-pp")
    for tp, pp, cp, ep, etp, dp in itertools.product(sizes, sizes, sizes, sizes, (None, 1, 2), (1, 2, 3)):
        world = tp * pp * cp * dp
        if world > (16 if quick else 32):
            continue
        for order in orders:
            kwargs = dict(
                tensor_model_parallel_size=tp,
                pipeline_model_parallel_size=pp,
                context_parallel_size=cp,
                expert_model_parallel_size=ep,
                expert_tensor_parallel_size=etp,
                order=order,
            )
            yield world, kwargs
    # optimizer instances, virtual pipeline, hierarchical context parallelism, worlds that do not divide
    yield 16, dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, num_distributed_optimizer_instances=2)
    yield 16, dict(tensor_model_parallel_size=2, context_parallel_size=2, num_distributed_optimizer_instances=4)
    yield 16, dict(tensor_model_parallel_size=1, expert_model_parallel_size=4, num_distributed_optimizer_instances=2)
    yield 16, dict(expert_model_parallel_size=8, num_distributed_optimizer_instances=4)
    yield 12, dict(context_parallel_size=2, num_distributed_optimizer_instances=4)
    yield 8, dict(pipeline_model_parallel_size=1, virtual_pipeline_model_parallel_size=2)
    yield 8, dict(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2)
    yield 16, dict(context_parallel_size=8, hierarchical_context_parallel_sizes=[2, 4])
    yield 16, dict(context_parallel_size=4, hierarchical_context_parallel_sizes=[2, 4])
    yield 12, dict(tensor_model_parallel_size=8)
    yield 12, dict(tensor_model_parallel_size=2, expert_model_parallel_size=4)


def main(argv: list[str]) -> int:
    warnings.simplefilter("ignore")
    import megatron.core.parallel_state as ps

    quick = "--quick" in argv
    configs = accepted = refused = groups_checked = 0
    for world, kwargs in configurations(quick):
        configs += 1
        theirs = megatron_groups(ps, world, kwargs)
        try:
            ours = MegatronParallelState(world, **kwargs)
        except ConventionError as error:
            if not isinstance(theirs, str):
                print(f"MISMATCH world={world} {kwargs}: we refuse ({error}), Megatron accepts")
                return 1
            if not same_reason(theirs, str(error)):
                print(f"REASON world={world} {kwargs}: Megatron says {theirs!r}, we say {error}")
                return 1
            refused += 1
            continue
        if isinstance(theirs, str):
            print(f"MISMATCH world={world} {kwargs}: Megatron refuses ({theirs}), we accept")
            return 1
        mine = {name: {tuple(int(x) for x in row) for row in rows} for name, rows in ours.named_groups().items()}
        mine = {name: rows for name, rows in mine.items() if name in theirs or len(next(iter(rows))) > 1}
        for name in sorted(set(mine) | set(theirs)):
            if mine.get(name) != theirs.get(name):
                print(
                    f"GROUPS world={world} {kwargs} {name}: ours {sorted(mine.get(name, ()))[:4]} "
                    f"theirs {sorted(theirs.get(name, ()))[:4]}"
                )
                return 1
            groups_checked += len(theirs[name])
        accepted += 1
    print(
        f"identical to Megatron-Core's initialize_model_parallel: {configs} configurations "
        f"({accepted} accepted, {refused} refused with the same reason), {groups_checked} groups"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
