"""Fixtures of the runtime tests: a private temporary directory for everything they start, and one shared 8-rank
gloo cluster (real processes, real groups over loopback)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fastdist_lab import Layout

WORLD = 8


def _layout_of(**kwargs: object) -> Layout:
    fields = {"world_size": WORLD, "local_world_size": WORLD, **kwargs}
    return Layout(**fields)  # type: ignore[arg-type]


@pytest.fixture(scope="session", autouse=True)
def private_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every runtime test (and every process it starts) uses a temporary directory no other program uses.

    Clusters of other programs on this machine then cannot disturb the checks that look for leftovers.
    """
    path = tmp_path_factory.mktemp("rt")
    saved_env, saved_cache = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = str(path)
    tempfile.tempdir = str(path)
    try:
        yield path
    finally:
        tempfile.tempdir = saved_cache
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env


@pytest.fixture(scope="session")
def layout_of() -> Callable[..., Layout]:
    """Builds a one-node layout of the shared cluster's 8 ranks with the given parallel factors."""
    return _layout_of


@pytest.fixture(scope="session")
def cluster(private_tmpdir: Path):
    """The shared 8-rank gloo cluster with the default layout (tp 2, pp 2, sdp 2) applied."""
    from fastdist_lab import LocalCluster

    with LocalCluster(WORLD, backend="gloo", local_world_size=WORLD, timeout=60, progress=False) as shared:
        verification = shared.apply(_layout_of(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2))
        assert verification.ok, verification
        yield shared
