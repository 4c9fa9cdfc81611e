"""``fastdist-lab layout --rank R`` with experts: the rank's expert coordinates, what it holds and its expert
groups, in every format, from the flags and from a framework's launch line."""

from __future__ import annotations

import json

import pytest

from fastdist_lab import Layout
from fastdist_lab.cli import main
from fastdist_lab.experts import EXPERT_DIM_NAMES
from fastdist_lab.formatting import members_text

FLAGS = ["layout", "--world-size", "32", "--local-world-size", "8", "--tp", "2", "--pp", "2", "--ep", "4"]
LAYOUT = Layout(world_size=32, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, expert_parallel=4)


@pytest.mark.parametrize("rank", [0, 5, 19, 31])
def test_the_rank_view_lists_the_expert_groups_and_coordinates_as_json(rank, capsys):
    assert main([*FLAGS, "--rank", str(rank), "--num-experts", "8", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    experts = doc["experts"]
    assert experts["coordinates"] == {
        "expert_rank": int(LAYOUT.dim_rank("expert")[rank]),
        "expert_tensor_rank": int(LAYOUT.dim_rank("expert_tensor")[rank]),
        "expert_data_rank": int(LAYOUT.dim_rank("expert_data")[rank]),
    }
    slot = experts["coordinates"]["expert_rank"]
    assert experts["holds"] == f"experts {2 * slot} .. {2 * slot + 1} of 8"
    assert [d["dim"] for d in experts["dims"]] == list(EXPERT_DIM_NAMES)
    for d in experts["dims"]:
        assert d["members"] == LAYOUT.group_of(d["dim"], rank).tolist()
        assert d["members"][d["rank"]] == rank
    assert doc["coordinates"]["rank"] == rank and len(doc["dims"]) == 9  # the dense view as before


def test_the_rank_view_as_a_table_and_csv(capsys):
    assert main([*FLAGS, "--rank", "5"]) == 0
    out = capsys.readouterr().out
    assert "experts: expert_rank=2, expert_tensor_rank=1, expert_data_rank=0; holds expert slot 2 of 4" in out
    assert LAYOUT.group_of("expert", 5).tolist() == [1, 3, 5, 7]
    line = next(row for row in out.splitlines() if row.startswith("expert "))
    assert line.split()[1:3] == ["4", "2"] and line.endswith(members_text([1, 3, 5, 7]))
    assert main([*FLAGS, "--rank", "5", "--format", "csv"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert 'expert_data,2,0,"[5, 13]"' in rows and len(rows) == 1 + 9 + 4


def test_a_dense_rank_view_is_unchanged_and_has_no_expert_part(capsys):
    assert main(["layout", "--world-size", "32", "--tp", "2", "--rank", "5", "--format", "json"]) == 0
    assert "experts" not in json.loads(capsys.readouterr().out)


def test_the_rank_view_of_a_megatron_moe_launch_line(capsys):
    line = (
        "torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
        "--pipeline-model-parallel-size 2 --expert-model-parallel-size 4 --num-experts 8"
    )
    assert main(["layout", "--from", line, "--rank", "3", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["experts"]["holds"] == "expert slot 1 of 4"
