"""Other frameworks' rank conventions side by side with this project's layout.

A ``Convention`` is a list of named axes with sizes, fastest-varying first; from it follow every rank's
coordinates and the groups of any set of axes. ``Megatron`` reproduces Megatron-Core's ``RankGenerator``;
``DeviceMesh`` torch's row-major ``init_device_mesh`` numbering, with ``torchtitan``, ``picotron`` and
``DeepSpeed`` presets; ``as_convention(layout)`` this project's layout. ``equivalent(a, b, mapping)`` says
whether the mapped axes give the same groups and shows the first group that differs. ``seeds`` compares
which ranks share random streams under each framework's seeding rules. Pure numpy, no torch (the real
``DeviceMesh`` check on a running cluster is ``fastdist_lab.checks.device_mesh_check``).
"""

from __future__ import annotations

from .base import Convention, ConventionError
from .device_mesh import (
    DeepSpeed,
    DeviceMesh,
    deepspeed_topology,
    device_mesh_spec,
    layout_device_mesh,
    layout_mesh_dims,
    picotron,
    torchtitan,
)
from .equivalence import Equivalence, GroupDifference, SubsetResult, compare_groups, equivalent
from .megatron import LAYOUT_DIM_TOKENS, LAYOUT_TO_MEGATRON, MEGATRON_GROUPS, Megatron, megatron_dim_table
from .project import LayoutConvention, as_convention, layout_convention
from .seeds import STREAMS, megatron_seeds, seed_streams, sharing_table, stream_groups, torchtitan_seeds

__all__ = [
    "Convention",
    "ConventionError",
    "DeepSpeed",
    "DeviceMesh",
    "Equivalence",
    "GroupDifference",
    "LAYOUT_DIM_TOKENS",
    "LAYOUT_TO_MEGATRON",
    "LayoutConvention",
    "MEGATRON_GROUPS",
    "Megatron",
    "STREAMS",
    "SubsetResult",
    "as_convention",
    "compare_groups",
    "deepspeed_topology",
    "device_mesh_spec",
    "equivalent",
    "layout_convention",
    "layout_device_mesh",
    "layout_mesh_dims",
    "megatron_dim_table",
    "megatron_seeds",
    "picotron",
    "seed_streams",
    "sharing_table",
    "stream_groups",
    "torchtitan",
    "torchtitan_seeds",
]
