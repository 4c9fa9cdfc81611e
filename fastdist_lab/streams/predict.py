"""``predict``: every rank's generator streams computed on paper, one draw per distinct stream."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config import DistributedConfig, PhaseType
from ..layout import Layout
from ..seeds import GENERATORS
from .draws import check_draws, device_type, draw_seeds, stream_ids, stream_keys
from .report import StreamReport


def predicted_devices(device: Any = "cpu") -> tuple[str, ...]:
    """The device type of each generator when the pool runs on ``device``: ``default_cpu`` is always on the CPU."""
    kind = device_type(device)
    return tuple("cpu" if name == "default_cpu" else kind for name in GENERATORS)


def predict(
    layout: Layout | DistributedConfig,
    step: int = 0,
    phase: PhaseType | str = "training",
    draws: int = 4,
    device: Any = "cpu",
) -> StreamReport:
    """Every rank's generator seeds after ``Distributed.set_step(step, phase)`` and their first ``draws`` values.

    ``device`` is the pool's device (``"cpu"`` for gloo, ``"cuda"`` for NCCL; CPU and CUDA generators give
    different numbers for one seed): the pp/tp and init generators live there, torch's default generator on
    the CPU. The seeds come from ``Layout.seed_table`` (exact uint64); each distinct (device, seed) stream is
    drawn once with ``torch.rand(draws, dtype=float64)`` from a freshly seeded generator, and shared by every
    cell that has it. For init generators and the default CPU generator these are the first values drawn
    after ``Distributed`` construction; for pp/tp the first values after ``set_step(step, phase)``.
    """
    if isinstance(layout, DistributedConfig):
        layout = Layout.from_config(layout)
    count = check_draws(draws)
    phase = PhaseType.parse(phase)
    seeds = layout.seed_table(step, phase)[list(GENERATORS)].to_numpy(dtype=np.uint64)
    devices = predicted_devices(device)
    names = sorted(set(devices))
    codes = np.broadcast_to(np.array([names.index(d) for d in devices], dtype=np.int64), seeds.shape)
    ids, first, counts = stream_ids(stream_keys(seeds, devices), codes)
    flat_seeds, flat_codes = seeds.ravel(), codes.ravel()
    values = np.empty((first.size, count), dtype=np.float64)
    for code, name in enumerate(names):
        streams = np.flatnonzero(flat_codes[first] == code)
        if streams.size:
            target = device if device_type(device) == name else name
            values[streams] = draw_seeds(flat_seeds[first[streams]], str(target), count)
    report = StreamReport(layout, step, phase, seeds, devices, values[ids], source="predicted")
    report.__dict__["_ids"] = (ids, first, counts)  # already computed: prime the cached property
    return report
