"""Helpers shared by the runtime tests."""

from __future__ import annotations

from fastdist_lab import Layout

WORLD = 8
"""Ranks of the shared cluster."""


def layout_of(**kwargs: object) -> Layout:
    """A one-node layout of ``WORLD`` ranks with the given parallel factors."""
    fields = {"world_size": WORLD, "local_world_size": WORLD, **kwargs}
    return Layout(**fields)  # type: ignore[arg-type]
