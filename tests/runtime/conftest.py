"""Fixtures of the runtime tests: one shared 8-rank gloo cluster (real processes, real groups over loopback)."""

from __future__ import annotations

import pytest
from runtime_helpers import WORLD, layout_of


@pytest.fixture(scope="session")
def cluster():
    """The shared 8-rank gloo cluster with the default layout (tp 2, pp 2, sdp 2) applied."""
    from fastdist_lab import LocalCluster

    with LocalCluster(WORLD, backend="gloo", timeout=60, progress=False) as shared:
        verification = shared.apply(layout_of(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2))
        assert verification.ok, verification
        yield shared
