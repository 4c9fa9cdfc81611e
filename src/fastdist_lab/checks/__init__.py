"""Checks that drive a running cluster: each runs a function on every rank and compares what the ranks saw
with what the layout predicts.

``check_layout(cluster, layout)`` is the main job (``fastdist-lab check``): every group verified with real
collectives (``verify_groups``: ``cluster.apply`` builds the groups, then the collective check), then every rank's
real generator streams compared with the prediction.

``check_training(cluster, layout, training=Training(...))`` runs one real training step of a small GPT
(``TinyGPT``) on the layout's groups (tensor, sequence-tensor, pipeline with torch's schedules, sequence-data and
data parallel) and the same step in one process, and compares every rank's gradients and updated weights
(``TrainingCheck``); the set-up is a ``cost.Training`` (the schedules of ``cost.SCHEDULE_KINDS``, ZeRO 0-3,
recompute), the one an Advisor row gives; ``TrainingFault`` breaks one thing on purpose. ``SCHEDULES`` is
deprecated (``cost.SCHEDULE_KINDS``). These names import torch, so they are served on first use.

``draw_streams(cluster)`` draws every rank's real generator streams, ``compare_streams(cluster)`` compares them with
``streams.predict``. ``replay(cluster, layout, model)`` issues a training step's collectives (the rows of
``cost.estimate``) on the real groups and ``bandwidth(cluster, dim)`` sweeps a dim's groups like nccl-tests (they
import torch: served on first use).

``device_mesh_check(cluster)`` builds torch's real ``DeviceMesh`` from ``Layout.device_mesh_spec()`` on every rank
and checks each named dim's mesh group with a real collective; ``rank_summary`` is what the cluster panel asks
every rank after an apply.
"""

from __future__ import annotations

from ..lazy import lazy_attributes
from .device_mesh_check import device_mesh_check
from .group_check import verify_groups
from .layout_check import LayoutCheck, check_layout
from .ranks import rank_summary
from .stream_draw import compare_streams, draw_streams

_LAZY: dict[str, str] = {
    "bandwidth": ".step_replay",
    "replay": ".step_replay",
    "TinyGPT": ".tiny_gpt",
    "TrainingCheck": ".train_step",
    "TrainingFault": ".train_rank",
    "check_training": ".train_step",
}
"""The public names that import torch and their modules (served on first use)."""

__all__ = [
    "LayoutCheck",
    "TinyGPT",
    "TrainingCheck",
    "TrainingFault",
    "bandwidth",
    "check_layout",
    "check_training",
    "compare_streams",
    "device_mesh_check",
    "draw_streams",
    "rank_summary",
    "replay",
    "verify_groups",
]


__getattr__, __dir__ = lazy_attributes(
    __name__,
    _LAZY,
    __all__,
    deprecated={"SCHEDULES": (".pipeline_carrier", "fastdist_lab.cost.SCHEDULE_KINDS (name -> .torch_class)")},
)
