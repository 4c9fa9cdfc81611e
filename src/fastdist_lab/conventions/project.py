"""This project's own layout as a ``Convention``: tensor fastest, then sequence-data, batch-data, pipeline
(data-first) or pipeline, sequence-data, batch-data (pipeline-first); the nine named dims are aliases."""

from __future__ import annotations

from typing import Any

from ..layout import DIM_AXES
from .base import Convention

LAYOUT_DIM_AXES = DIM_AXES
"""The axes of each of the nine named dims (``fastdist_lab.layout.DIM_AXES``)."""

DATA_FIRST_AXES = ("tensor", "sequence_data", "batch_data", "pipeline")
"""Axes of a data-first layout, fastest first."""

PIPELINE_FIRST_AXES = ("tensor", "pipeline", "sequence_data", "batch_data")
"""Axes of a pipeline-first layout, fastest first."""


class LayoutConvention(Convention):
    """A ``Layout`` seen as a convention; ``groups(dim)`` equals ``Layout.groups(dim)`` for the nine dims."""

    kind = "fastdist"

    def __init__(self, tensor: int, sequence_data: int, batch_data: int, pipeline: int, pipeline_first: bool):
        sizes = {"tensor": tensor, "sequence_data": sequence_data, "batch_data": batch_data, "pipeline": pipeline}
        axes = PIPELINE_FIRST_AXES if pipeline_first else DATA_FIRST_AXES
        order = "pipeline-first" if pipeline_first else "data-first"
        aliases = {dim: axes_ for dim, axes_ in LAYOUT_DIM_AXES.items() if dim not in axes}
        super().__init__(axes, [sizes[a] for a in axes], name=f"fastdist {order}", aliases=aliases)
        self.pipeline_first = pipeline_first

    def default_mapping_to(self, other: Convention) -> dict[str, Any] | None:
        """Identity on the four axes when ``other`` names them the same way (e.g. the DeviceMesh export)."""
        if set(self.axes) <= set(other.axes):
            return {a: a for a in self.axes}
        return None


def layout_convention(layout: Any) -> LayoutConvention:
    """``layout`` (a ``Layout``) as a ``LayoutConvention``."""
    return LayoutConvention(
        tensor=layout.tensor_parallel,
        sequence_data=layout.sequence_data_parallel,
        batch_data=layout.batch_data_parallel,
        pipeline=layout.pipeline_parallel,
        pipeline_first=layout.pipeline_first,
    )
