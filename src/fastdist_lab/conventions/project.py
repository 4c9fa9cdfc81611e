"""This project's own layout as a ``Convention``: the layout's own axes and numbering (``Layout.rank_grid``), with
the nine named dims as aliases; and ``as_convention``, which takes either."""

from __future__ import annotations

from typing import Any

from ..errors import ConventionError
from ..layout import DIM_AXES, Layout
from .base import Convention


class LayoutConvention(Convention):
    """A ``Layout`` seen as a convention; ``groups(dim)`` equals ``Layout.groups(dim)`` for the nine dims."""

    def __init__(self, layout: Layout):
        sizes = layout.axis_sizes()
        axes = tuple(sizes)
        order = "pipeline-first" if layout.pipeline_first else "data-first"
        aliases = {dim: spanned for dim, spanned in DIM_AXES.items() if dim not in axes}
        super().__init__(axes, tuple(sizes.values()), name=f"fastdist {order}", aliases=aliases)
        self.pipeline_first = layout.pipeline_first

    def default_mapping_to(self, other: Convention) -> dict[str, Any] | None:
        """Identity on the four axes when ``other`` names them the same way (e.g. the DeviceMesh export)."""
        if set(self.axes) <= set(other.axes):
            return {a: a for a in self.axes}
        return None


def as_convention(obj: object) -> Convention:
    """``obj`` as a ``Convention``: a convention itself, or a ``Layout`` as its ``LayoutConvention``."""
    if isinstance(obj, Convention):
        return obj
    if isinstance(obj, Layout):
        return LayoutConvention(obj)
    raise ConventionError(f"{obj!r} is neither a Convention nor a Layout")
