"""Beyond one machine: ``python -m fastdist_lab.worker`` under torchrun writes a report ``load_report`` reads."""

from __future__ import annotations

import subprocess
import sys

from fastdist_lab import Layout
from fastdist_lab.runtime import RankResults, Verification, load_report


def test_torchrun_standalone_four_ranks_writes_a_report(tmp_path):
    report = tmp_path / "report.json"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
        "-m", "fastdist_lab.worker", "--world-size", "4", "--tp", "2", "--pp", "2", "--sdp", "1",
        "--pipeline-first", "--backend", "gloo", "--report", str(report),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Verification OK" in done.stdout
    verification = load_report(report)
    assert isinstance(verification, Verification) and isinstance(verification.results, RankResults)
    assert verification.ok and verification.seeds_ok and verification.collectives  # checked with collectives
    layout = Layout(world_size=4, local_world_size=4, tensor_parallel=2, pipeline_parallel=2, pipeline_first=True)
    frame = verification.to_frame()
    for dim in layout.dim_names:
        assert frame[frame.dim == dim].members.tolist() == layout.groups(dim).tolist()
    assert len(verification.results) == 4 and verification.results.ok
    assert verification.layout_fields["pipeline_first"] is True


def test_worker_rejects_a_world_size_that_disagrees_with_the_launcher():
    done = subprocess.run(
        [sys.executable, "-m", "fastdist_lab.worker", "--world-size", "4", "--tp", "1", "--pp", "1", "--sdp", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "WORLD_SIZE": "2", "RANK": "0", "LOCAL_WORLD_SIZE": "2"},
    )
    assert done.returncode == 2
    assert "WORLD_SIZE=2" in done.stderr and "Traceback" not in done.stderr
