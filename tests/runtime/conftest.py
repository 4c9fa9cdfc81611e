"""Fixtures of the runtime tests: one shared 8-rank gloo cluster (real processes, real groups over loopback)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fastdist_lab import Layout

WORLD = 8


def _layout_of(**kwargs: object) -> Layout:
    fields = {"world_size": WORLD, "local_world_size": WORLD, **kwargs}
    return Layout(**fields)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def layout_of() -> Callable[..., Layout]:
    """Builds a one-node layout of the shared cluster's 8 ranks with the given parallel factors."""
    return _layout_of


@pytest.fixture(scope="session")
def cluster():
    """The shared 8-rank gloo cluster with the default layout (tp 2, pp 2, sdp 2) applied."""
    from fastdist_lab import LocalCluster

    with LocalCluster(WORLD, backend="gloo", timeout=60, progress=False) as shared:
        verification = shared.apply(_layout_of(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2))
        assert verification.ok, verification
        yield shared
