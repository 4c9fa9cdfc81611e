"""Checks that drive a running cluster: each runs a function on every rank and compares what the ranks saw
with what the layout predicts (the names: README.md, "Public API").

``check_layout(cluster, layout)`` is the main job (``fastdist-lab check``): every group verified with real
collectives (``verify_groups``), then every rank's real generator streams compared with the prediction.
``check_training(cluster, layout, training=Training(...))`` runs one real training step of a small GPT on the
layout's groups against the same step in one process (``TrainingCheck``; ``TrainingFault`` breaks one thing on
purpose); ``SCHEDULES`` is deprecated (``cost.SCHEDULE_KINDS``). The names that import torch are served on first use.
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
    "LayoutCheck", "check_layout", "compare_streams", "device_mesh_check", "draw_streams", "rank_summary",
    "verify_groups", *_LAZY,
]  # fmt: skip


__getattr__, __dir__ = lazy_attributes(
    __name__,
    _LAZY,
    __all__,
    deprecated={"SCHEDULES": (".pipeline_carrier", "fastdist_lab.cost.SCHEDULE_KINDS (name -> .torch_class)")},
)
