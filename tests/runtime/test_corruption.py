"""A verification that cannot fail is worthless: one group is corrupted in ONE rank's pool, in every cluster mode,
and the ``Verification`` must report exactly that (dim, group), name that rank, and pass every other group.

The corruption is installed by a function run on the ranks first (``cluster.run``): on the chosen rank only, it
replaces that rank's pool's ``get_process_group`` / ``create_group`` (instance attributes) so that they misbehave
for one member list; then ``apply(layout)`` builds ``Distributed`` from that pool as always.

- wrong member: the pool hands out a group created for a member list with one rank swapped;
- wrong group rank: the pool's group gives the rank another group rank than its slot;
- reused across dims: the pool hands out another dim's group of the same size.

Threads and fake worlds create the corrupted group for real (a threaded / fake group of the wrong members or group
rank). A real gloo group cannot be created that way without a hang: its creation is a rendezvous of exactly its
members at exactly their group ranks, so a group of a swapped member list or a duplicated group rank waits for
ranks that never come. In processes mode the corrupted rank therefore joins the true group's rendezvous and the
pool then hands out (wrong member) that group recorded as created for the swapped list, or (wrong group rank) that
group behind a stand-in whose ``rank()`` lies. The apply (``runtime.pool.rank_identity``) finds both without
communication, and every member skips the group in the collective check, so nothing waits.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fastdist_lab import Layout, LocalCluster, SimulatedCluster
from fastdist_lab.checks import verify_groups
from fastdist_lab.config import DIM_NAMES
from fastdist_lab.runtime.members import member_tuple

WORLD = 8
RANK = 5
LAYOUT = Layout(world_size=WORLD, local_world_size=WORLD, tensor_parallel=2, pipeline_parallel=2)
CORRUPTIONS = {
    # kind: (dim, rank 5's true group of that dim, what the pool hands out instead, the problem reported)
    "wrong_member": ("model_and_sequence_data", (0, 1, 4, 5), (2, 1, 4, 5), "created for members [2, 1, 4, 5]"),
    "wrong_group_rank": ("tensor_and_data", (4, 5, 6, 7), 2, "its group gives it group rank 2, expected 1"),
    "reused_across_dims": ("pipeline", (1, 5), (5, 7), "its group was created for members [5, 7]"),
}


class LyingGroup:
    """A real process group whose ``rank()`` says ``rank`` (everything else is the group's)."""

    def __init__(self, group: Any, rank: int):
        self._group, self._rank = group, rank

    def rank(self) -> int:
        return self._rank

    def __getattr__(self, name: str) -> Any:
        return getattr(self._group, name)


def corrupt_pool(ctx: Any, rank: int, kind: str, target: tuple[int, ...], other: Any, real_rendezvous: bool) -> bool:
    """On ``rank`` only: make its pool misbehave (``kind``) for the member list ``target``. ``real_rendezvous``:
    the groups are real gloo groups, whose creation every member must join (see the module docstring)."""
    if ctx.rank != rank:
        return False
    pool = ctx.pool
    original_get, original_create = pool.get_process_group, pool.create_group

    def creating(replacement: Any) -> Any:
        def create(members: tuple[int, ...], group_rank: int, name: str) -> Any:
            del pool.create_group  # once
            return replacement(members, group_rank, name)

        return create

    def get(global_ranks: Any, group_rank: int) -> Any:
        if member_tuple(global_ranks) != target:
            return original_get(global_ranks, group_rank)
        if kind == "wrong_member":
            if not real_rendezvous:
                return original_get(other, group_rank)
            true_group = original_get(global_ranks, group_rank)
            pool.create_group = creating(lambda *_: true_group)
            return original_get(other, group_rank)
        if kind == "wrong_group_rank":
            if real_rendezvous:
                pool.create_group = creating(lambda m, g, n: LyingGroup(original_create(m, g, n), other))
            else:
                pool.create_group = creating(lambda m, g, n: original_create(m, other, n))
            return original_get(global_ranks, group_rank)
        assert kind == "reused_across_dims"
        original_get(global_ranks, group_rank)  # its true group is created too (a rendezvous for real groups)
        return original_get(other, other.index(rank))

    pool.get_process_group = get
    return True


def assert_only(verification: Any, dim: str, members: tuple[int, ...], problem: str) -> None:
    """``verification`` failed exactly the group ``members`` of ``dim``, naming ``RANK`` and ``problem``."""
    assert not verification.ok
    failures = verification.failures()
    assert [(row["dim"], tuple(row["members"])) for row in failures] == [(dim, members)], failures
    assert failures[0]["detail"].startswith(f"rank {RANK}: ") and problem in failures[0]["detail"], failures
    assert sum(row["ok"] for row in verification.rows) == len(verification.rows) - 1
    assert verification.results.ok and verification.seeds_ok  # every rank answered; only that group is wrong
    assert f"rank {RANK}" in verification.to_text()


def test_the_corruptions_target_groups_of_rank_5_no_other_dim_shares():
    for dim, target, _, _ in CORRUPTIONS.values():
        assert tuple(LAYOUT.group_of(dim, RANK)) == target
        sharing = [name for name in DIM_NAMES if tuple(LAYOUT.group_of(name, RANK)) == target]
        assert sharing == [dim]


def _corrupted_apply(cluster: Any, kind: str, real_rendezvous: bool) -> Any:
    dim, target, other, _ = CORRUPTIONS[kind]
    installed = cluster.run(corrupt_pool, RANK, kind, target, other, real_rendezvous)
    assert installed.values == [rank == RANK for rank in range(WORLD)]
    return cluster.apply(LAYOUT)


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_processes_report_exactly_the_corrupted_group(kind):
    # A cluster of its own for each corruption: no group of the layout exists yet in any pool.
    dim, target, _, problem = CORRUPTIONS[kind]
    with LocalCluster(WORLD, backend="gloo", local_world_size=WORLD, timeout=60, progress=False) as cluster:
        assert_only(_corrupted_apply(cluster, kind, real_rendezvous=True), dim, target, problem)
        cluster.restart()  # fresh workers, the layout applied again: the corruption was the only thing wrong
        assert cluster.apply(LAYOUT).ok


@pytest.mark.parametrize("mode", ["threads", "fake"])
@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_simulated_worlds_report_exactly_the_corrupted_group(mode, kind):
    dim, target, _, problem = CORRUPTIONS[kind]
    with SimulatedCluster(WORLD, mode, local_world_size=WORLD, timeout=30, progress=False) as cluster:
        verification = _corrupted_apply(cluster, kind, real_rendezvous=False)
        assert verification.mode == mode
        assert_only(verification, dim, target, problem)
        cluster.restart()
        assert cluster.apply(LAYOUT).ok


def falsify_reduction(ctx: Any, rank: int, target: tuple[int, ...], term: int, delta: int) -> None:
    """On ``rank`` only: the group of ``target`` its pool creates adds ``delta`` to term ``term`` of what this rank
    contributes to the group's all-reduce (``checks.group_check.REDUCTION_TERMS``)."""
    if ctx.rank != rank:
        return
    pool = ctx.pool
    original_create = pool.create_group

    def create(members: tuple[int, ...], group_rank: int, name: str) -> Any:
        group = original_create(members, group_rank, name)
        if members == target:
            allreduce = group.allreduce

            def falsified(tensors: list[torch.Tensor], *args: Any, **kwargs: Any) -> Any:
                tensors[0][term] += delta
                return allreduce(tensors, *args, **kwargs)

            group.allreduce = falsified
        return group

    pool.create_group = create


@pytest.mark.parametrize(
    ("term", "delta", "problem"),
    [
        (1, 1, "all-reduce gave ranks summing to 29 with 8 at their slot, expected 28, all"),
        (2, -1, "all-reduce gave ranks summing to 28 with 7 at their slot, expected 28, all"),
        (7, 3, "all-reduce shows members checking different groups (first_lo differ)"),
    ],
    ids=["rank", "at_slot", "first_lo"],
)
def test_threads_catch_one_ranks_falsified_all_reduce_terms_by_the_sums(term, delta, problem):
    # The world group (8 members) is wider than the threads' gather limit: the sums alone must catch it.
    world = tuple(range(WORLD))
    with SimulatedCluster(WORLD, "threads", local_world_size=WORLD, timeout=30, progress=False) as cluster:
        cluster.run(falsify_reduction, RANK, world, term, delta)
        verification = verify_groups(cluster, LAYOUT)
    failures = verification.failures()
    assert [(row["dim"], row["group"]) for row in failures] == [("world", 0)], failures
    assert failures[0]["detail"].startswith(f"rank 0: {problem}"), failures[0]["detail"]
    world_rows = [row for row in verification.results[RANK].value["dims"] if row["dim"] == "world"]
    assert "gathered" not in world_rows[0]


def test_distributed_raises_on_a_group_of_the_wrong_group_rank_unless_told_not_to_be_strict():
    from fastdist_lab.runtime.inprocess import FakeGroupPool, fake_group, fake_store
    from fastdist_lab.runtime.pool import Distributed

    config_of = Layout(**dict(LAYOUT.fields(), backend="gloo")).config

    def lying_pool() -> FakeGroupPool:
        pool = FakeGroupPool(RANK, WORLD, WORLD, 30, store=fake_store(), shared={})
        pool.create_group = lambda members, group_rank, name: fake_group((group_rank + 1) % len(members), len(members))
        return pool

    with pytest.raises(RuntimeError, match="expected size 8 rank 5"):  # the world group comes first
        Distributed(config_of(RANK), use_cpu=True, pool=lying_pool())
    relaxed = Distributed(config_of(RANK), use_cpu=True, pool=lying_pool(), strict=False)
    assert relaxed.mismatched == [name for name in DIM_NAMES if len(LAYOUT.group_of(name, RANK)) > 1]
