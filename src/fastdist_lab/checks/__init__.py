"""Checks that drive a running cluster: each runs a function on every rank and compares what the ranks saw
with what the layout predicts.

``check_layout(cluster, layout)`` is the main job (``fastdist-lab check``): every group verified with real
collectives, then every rank's real generator streams compared with the prediction.

``device_mesh_check(cluster)`` builds torch's real ``DeviceMesh`` from ``Layout.device_mesh_spec()`` on every rank
and checks each named dim's mesh group with a real collective; ``rank_summary`` is what the cluster panel asks
every rank after an apply.
"""

from __future__ import annotations

from .device_mesh_check import device_mesh_check
from .layout_check import LayoutCheck, check_layout
from .ranks import rank_summary

__all__ = ["LayoutCheck", "check_layout", "device_mesh_check", "rank_summary"]
