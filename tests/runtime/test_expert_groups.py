"""The expert groups on real groups (issue 28, item 3): the pool builds the four expert dims' groups, the apply checks
them as the dense dims without communication, ``verify_groups`` with real collectives plus an all-to-all over every
``expert`` group; and a verification that cannot fail is worthless: one rank's expert group is corrupted (wrong
members) or its all-to-all lies, and exactly that group is reported, naming the rank. A dense layout reports exactly
the nine dense dims, as before experts."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from fastdist_lab import Layout, LocalCluster, SimulatedCluster
from fastdist_lab.checks import check_layout, verify_groups
from fastdist_lab.checks.group_check import ALL_TO_ALL_SHIFT, all_to_all_values
from fastdist_lab.config import DIM_NAMES
from fastdist_lab.experts import EXPERT_DIM_NAMES
from fastdist_lab.runtime.members import member_tuple

WORLD = 8
RANK = 5
EXPERT_LAYOUTS = [  # 8 ranks: EP 2 and 4, ETP 1 and = tensor, with and without a pipeline
    dict(tensor_parallel=2, pipeline_parallel=2, expert_parallel=2, expert_tensor_parallel=1),
    dict(tensor_parallel=2, pipeline_parallel=2, expert_parallel=2),
    dict(tensor_parallel=1, pipeline_parallel=2, expert_parallel=4),
    dict(tensor_parallel=2, pipeline_parallel=1, expert_parallel=4, expert_tensor_parallel=1),
    dict(tensor_parallel=2, pipeline_parallel=2, expert_parallel=2, expert_tensor_parallel=1, pipeline_first=True),
]
BROKEN = Layout(
    world_size=WORLD, local_world_size=WORLD, tensor_parallel=2, expert_parallel=2, expert_tensor_parallel=2
)
TARGET = (5, 7)
"""Rank 5's expert group in ``BROKEN``, which no other dim of rank 5 shares."""
OTHER = (5, 6)
"""The members the corrupted pool hands out instead."""


def layout_of(factors: dict[str, Any]) -> Layout:
    return Layout(world_size=WORLD, local_world_size=WORLD, **factors)


def assert_expert_rows(verification: Any, layout: Layout) -> None:
    """Every group of every dim of ``layout.group_dims`` is in ``verification`` and passed; every member of every
    ``expert`` group ran the all-to-all and got every value right."""
    assert verification.ok, verification.failures()
    assert [dim for dim in dict.fromkeys(row["dim"] for row in verification.rows)] == list(layout.group_dims)
    for dim in layout.group_dims:
        expected = layout.groups(dim).tolist()
        assert [row["members"] for row in verification.rows if row["dim"] == dim] == expected
    for record in verification.results:
        rows = {row["dim"]: row for row in record.value["dims"]}
        expert = rows["expert"]
        if expert["size"] > 1:
            assert expert["all_to_all"] == expert["size"] and expert["all_to_all_wrong"] == []
        assert all("all_to_all" not in row for dim, row in rows.items() if dim != "expert")


def test_the_corrupted_group_is_one_no_other_dim_of_rank_5_shares():
    assert tuple(BROKEN.group_of("expert", RANK)) == TARGET
    assert [dim for dim in BROKEN.group_dims if tuple(BROKEN.group_of(dim, RANK)) == TARGET] == ["expert"]


def test_all_to_all_values_name_sender_and_receiver():
    sent = all_to_all_values([3, 9], 4)
    assert [divmod(value, ALL_TO_ALL_SHIFT) for value in sent] == [(4, 3), (4, 9)]
    assert all_to_all_values([4], 3) == [3 * ALL_TO_ALL_SHIFT + 4]  # what 3 sends 4 is what 4 expects from 3


def test_gloo_processes_check_every_expert_group_with_an_all_to_all():
    with LocalCluster(WORLD, backend="gloo", local_world_size=WORLD, timeout=60, progress=False) as cluster:
        for factors in EXPERT_LAYOUTS:
            layout = layout_of(factors)
            assert layout.has_experts
            assert_expert_rows(verify_groups(cluster, layout), layout)
        result = check_layout(cluster, layout)  # the main job too: the streams, and the text names the expert dims
        assert result.ok
        text = result.to_text()
        assert "all-to-all" in text and all(f"\n{dim} " in text for dim in EXPERT_DIM_NAMES)
        dense = layout_of(dict(tensor_parallel=2, pipeline_parallel=2))
        verification = verify_groups(cluster, dense)
        dense_text = check_layout(cluster, dense).to_text()
    assert verification.ok and list(dict.fromkeys(row["dim"] for row in verification.rows)) == list(DIM_NAMES)
    assert all("all_to_all" not in row for record in verification.results for row in record.value["dims"])
    assert "all-to-all" not in dense_text and "expert" not in dense_text


@pytest.mark.parametrize("mode", ["threads", "fake"])
def test_simulated_worlds_build_and_check_the_expert_groups(mode):
    with SimulatedCluster(WORLD, mode, local_world_size=WORLD, timeout=60, progress=False) as cluster:
        for factors in EXPERT_LAYOUTS:
            layout = layout_of(factors)
            verification = verify_groups(cluster, layout)
            if mode == "threads":
                assert_expert_rows(verification, layout)
            else:  # no collective ran: membership alone
                assert verification.ok and {row["dim"] for row in verification.rows} == set(layout.group_dims)


@pytest.mark.parametrize(("mode", "world", "factors"), [
    ("threads", 2048, dict(tensor_parallel=4, pipeline_parallel=8, expert_parallel=8, expert_tensor_parallel=1)),
    ("fake", 16384, dict(tensor_parallel=8, pipeline_parallel=4, sequence_data_parallel=2, expert_parallel=16,
                         expert_tensor_parallel=2)),
])  # fmt: skip
def test_a_wider_world_checks_its_expert_groups(mode, world, factors):
    # 2,048 threads take about 30 s on 2 cores, 16,384 fake ranks about 20 s; 4,096 threads (about 70 s) run in
    # `fastdist-lab check --simulate threads --world-size 4096 --tp 4 --pp 8 --ep 8 --etp 1` (README).
    layout = Layout(world_size=world, local_world_size=8, **factors)
    with SimulatedCluster(world, mode, local_world_size=8, progress=False) as cluster:
        verification = verify_groups(cluster, layout)
    assert verification.ok, verification.failures()[:3]
    assert {row["dim"] for row in verification.rows} == set(layout.group_dims)


def corrupt_expert_group(ctx: Any, rank: int, real_rendezvous: bool) -> bool:
    """On ``rank`` only: its pool hands out, for ``TARGET``, a group created for ``OTHER`` (a real gloo group
    cannot be created for members that never come: then the true group, recorded as created for ``OTHER``; see
    ``tests/runtime/test_corruption.py``)."""
    if ctx.rank != rank:
        return False
    pool = ctx.pool
    original_get, original_create = pool.get_process_group, pool.create_group

    def get(global_ranks: Any, group_rank: int) -> Any:
        if member_tuple(global_ranks) != TARGET:
            return original_get(global_ranks, group_rank)
        if real_rendezvous:
            true_group = original_get(global_ranks, group_rank)

            def create(members: tuple[int, ...], group_rank: int, name: str) -> Any:
                pool.create_group = original_create
                return true_group

            pool.create_group = create
        return original_get(OTHER, group_rank)

    pool.get_process_group = get
    return True


def assert_only_the_expert_group(verification: Any, problem: str, reporter: int = RANK) -> None:
    failures = verification.failures()
    assert [(row["dim"], tuple(row["members"])) for row in failures] == [("expert", TARGET)], failures
    assert failures[0]["detail"].startswith(f"rank {reporter}: ") and problem in failures[0]["detail"], failures
    assert verification.results.ok and verification.seeds_ok


def test_processes_report_a_wrong_expert_group():
    with LocalCluster(WORLD, backend="gloo", local_world_size=WORLD, timeout=60, progress=False) as cluster:
        cluster.run(corrupt_expert_group, RANK, True)
        assert_only_the_expert_group(verify_groups(cluster, BROKEN), "created for members [5, 6]")


@pytest.mark.parametrize("mode", ["threads", "fake"])
def test_simulated_worlds_report_a_wrong_expert_group(mode):
    with SimulatedCluster(WORLD, mode, local_world_size=WORLD, timeout=30, progress=False) as cluster:
        cluster.run(corrupt_expert_group, RANK, False)
        assert_only_the_expert_group(verify_groups(cluster, BROKEN), "created for members [5, 6]")
        cluster.restart()
        assert verify_groups(cluster, BROKEN).ok


def lying_all_to_all(ctx: Any, rank: int) -> None:
    """On ``rank`` only: the group of ``TARGET`` its pool creates sends its all-to-all values to the wrong members
    (the list reversed)."""
    if ctx.rank != rank:
        return
    pool = ctx.pool
    original_create = pool.create_group

    def create(members: tuple[int, ...], group_rank: int, name: str) -> Any:
        group = original_create(members, group_rank, name)
        if members == TARGET:
            alltoall = group.alltoall

            def reversed_inputs(outputs: list[torch.Tensor], inputs: list[torch.Tensor], *args: Any) -> Any:
                return alltoall(outputs, inputs[::-1], *args)

            group.alltoall = reversed_inputs
        return group

    pool.create_group = create


def test_threads_catch_one_ranks_lying_all_to_all():
    with SimulatedCluster(WORLD, "threads", local_world_size=WORLD, timeout=30, progress=False) as cluster:
        cluster.run(lying_all_to_all, RANK)
        verification = verify_groups(cluster, BROKEN)
    # Rank 5 sent rank 7's value to itself and its own to rank 7: both members see it; rank 5 reports first.
    assert_only_the_expert_group(verification, "slot 0 (rank 5) held what rank 5 meant for rank 7")
    assert (
        "rank 7: all-to-all slot 0 (rank 5) held what rank 5 meant for rank 5" in verification.failures()[0]["detail"]
    )


def test_the_check_command_takes_the_expert_sizes(capsys, tmp_path):
    from fastdist_lab.cli import main

    report = tmp_path / "check.json"
    flags = ["--world-size", "8", "--tp", "2", "--pp", "2", "--ep", "4", "--etp", "1"]
    assert main(["check", "--quiet", "--backend", "gloo", *flags, "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "expert_parallel=4, expert_tensor_parallel=1" in out and "all-to-all" in out
    assert all(f"\n{dim} " in out for dim in EXPERT_DIM_NAMES) and out.rstrip().endswith("result: OK")
    saved = json.loads(report.read_text())
    assert saved["layout"]["expert_parallel"] == 4 and {row["dim"] for row in saved["rows"]} >= set(EXPERT_DIM_NAMES)


def test_torchrun_checks_the_expert_groups(tmp_path):
    import subprocess
    import sys

    from fastdist_lab.runtime import load_report

    report = tmp_path / "report.json"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
        "-m", "fastdist_lab.worker", "--world-size", "4", "--tp", "1", "--pp", "1", "--ep", "2", "--etp", "2",
        "--backend", "gloo", "--report", str(report),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    verification = load_report(report)
    layout = Layout(world_size=4, local_world_size=4, tensor_parallel=1, expert_parallel=2, expert_tensor_parallel=2)
    assert_expert_rows(verification, layout)
    assert [row["members"] for row in verification.rows if row["dim"] == "expert"] == [[0, 2], [1, 3]]


def shared_objects(ctx: Any) -> tuple[bool, bool, int]:
    """Whether this rank's expert group is its tensor group's object and its expert-data group its data group's
    (equal members), and how many distinct groups its pool holds."""
    distributed = ctx.distributed
    expert = distributed.group("expert") is distributed.group("tensor")
    data = distributed.group("expert_data") is distributed.group("data")
    return expert, data, len({id(group) for group in ctx.pool.groups.values()})


def test_an_expert_group_with_a_dense_groups_members_is_that_group():
    layout = layout_of(EXPERT_LAYOUTS[0])  # tp 2, pp 2, EP 2, ETP 1: expert = tensor, expert-data = data groups
    assert layout.groups("expert").tolist() == layout.groups("tensor").tolist()
    assert layout.groups("expert_data").tolist() == layout.groups("data").tolist()
    with SimulatedCluster(WORLD, "threads", local_world_size=WORLD, timeout=30, progress=False) as cluster:
        verification = cluster.apply(layout)
        answers = cluster.run(shared_objects).values
    assert verification.ok
    for rank, (expert, data, held) in enumerate(answers):
        members = {tuple(int(r) for r in layout.group_of(dim, rank)) for dim in layout.group_dims}
        assert expert and data and held == len([m for m in members if len(m) > 1])  # one group per member list
    rows = [row for record in verification.results for row in record.value["dims"] if row["dim"] == "expert"]
    assert not any(row["created"] for row in rows)  # reused: the tensor dim created it
