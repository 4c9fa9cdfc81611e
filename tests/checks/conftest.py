"""Clusters shared by the training-check tests: one gloo cluster of 8 processes (a worker's first step imports
torch's pipelining, the slow part), started on first use and closed at the end of the session."""

from __future__ import annotations

import pytest

from fastdist_lab import LocalCluster


@pytest.fixture(scope="session")
def gloo():
    with LocalCluster(8, backend="gloo", timeout=90, progress=False) as cluster:
        yield cluster
