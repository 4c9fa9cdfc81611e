"""Other frameworks' rank conventions side by side with this project's layout (the names: README.md, "Public API").

A ``Convention`` is a list of named axes with sizes, fastest-varying first; from it follow every rank's
coordinates and the groups of any set of axes. ``equivalent(a, b, mapping)`` says whether the mapped axes give the
same groups and shows the first group that differs; ``load_config`` reads a framework's config file or launch line
(``fastdist_lab.errors.WorldSizeNeeded`` when it gives no world size and none is passed). Pure numpy, no torch (the
real ``DeviceMesh`` check on a running cluster is ``fastdist_lab.checks.device_mesh_check``).
"""

from __future__ import annotations

from ..lazy import lazy_attributes
from .base import Convention
from .device_mesh import (
    DeepSpeed,
    DeviceMesh,
    layout_device_mesh,
    layout_mesh_dims,
    picotron,
)
from .equivalence import Equivalence, GroupDifference, SubsetResult, compare_groups, equivalent
from .framework_seeds import (
    EXPERT_STREAMS,
    STREAMS,
    expert_seed_streams,
    expert_sharing_table,
    megatron_expert_seeds,
    megatron_seeds,
    seed_streams,
    sharing_table,
    stream_groups,
    torchtitan_seeds,
)
from .loaders import FRAMEWORKS, LoadedConfig, detect_framework, load_config
from .megatron import LAYOUT_DIM_TOKENS, LAYOUT_TO_MEGATRON, MEGATRON_GROUPS, Megatron, megatron_dim_table
from .megatron_state import EXPERT_GROUPS, MegatronParallelState
from .project import LayoutConvention, as_convention
from .torchtitan_dims import TORCHTITAN_VERSIONS, TorchtitanMesh, torchtitan

__all__ = [
    "Convention",
    "DeepSpeed",
    "DeviceMesh",
    "EXPERT_GROUPS",
    "EXPERT_STREAMS",
    "Equivalence",
    "FRAMEWORKS",
    "GroupDifference",
    "LAYOUT_DIM_TOKENS",
    "LAYOUT_TO_MEGATRON",
    "LayoutConvention",
    "LoadedConfig",
    "MEGATRON_GROUPS",
    "Megatron",
    "MegatronParallelState",
    "STREAMS",
    "SubsetResult",
    "TORCHTITAN_VERSIONS",
    "TorchtitanMesh",
    "as_convention",
    "compare_groups",
    "detect_framework",
    "equivalent",
    "expert_seed_streams",
    "expert_sharing_table",
    "layout_device_mesh",
    "layout_mesh_dims",
    "load_config",
    "megatron_dim_table",
    "megatron_expert_seeds",
    "megatron_seeds",
    "picotron",
    "seed_streams",
    "sharing_table",
    "stream_groups",
    "torchtitan",
    "torchtitan_seeds",
]

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {},
    __all__,
    deprecated={
        name: ("..errors", f"fastdist_lab.errors.{name}")
        for name in ("ConventionError", "ConventionWorldSizeNeeded", "WorldSizeNeeded")
    },
)
"""``dir()`` is ``__all__``; the exceptions this package held before ``fastdist_lab.errors`` still work, with a
``DeprecationWarning`` naming their new spelling, for one release."""
