"""``predict``: every rank's generator streams computed on paper, one draw per distinct stream."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..config import DistributedConfig, PhaseType
from ..layout import Layout
from ..seeds import GENERATORS, device_type, number_streams, stream_keys
from .draws import MT_MAX_DRAWS, check_draws, cpu_draws, draw_seeds
from .stream_report import StreamReport

logger = logging.getLogger(__name__)


SAMPLE = 8
"""Streams of each closed-form CPU prediction that are also drawn with torch, to confirm the closed form."""


def _draw(seeds: np.ndarray, device: str, draws: int) -> np.ndarray:
    """The first ``draws`` values of each seed's stream on ``device``: closed form on the CPU (checked), else torch."""
    if device_type(device) != "cpu" or draws > MT_MAX_DRAWS or seeds.size <= SAMPLE:
        return draw_seeds(seeds, device, draws)
    values = cpu_draws(seeds, draws)
    sample = np.unique(np.linspace(0, seeds.size - 1, SAMPLE).astype(np.int64))
    if np.array_equal(values[sample], draw_seeds(seeds[sample], device, draws)):
        return values
    logger.warning("torch's CPU generator no longer matches the closed form; drawing every stream with torch")
    return draw_seeds(seeds, device, draws)


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
    the CPU. The seeds come from ``Layout.seed_table`` (exact uint64); each distinct stream is drawn once, as
    ``torch.rand(draws, dtype=float64)`` from a freshly seeded generator gives it, and shared by every cell
    that has it (CPU streams in closed form for all seeds at once, confirmed on a sample against torch).
    For init generators and the default CPU generator these are the first values drawn
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
    ids, first, counts = number_streams(stream_keys(seeds, devices), codes)
    flat_seeds, flat_codes = seeds.ravel(), codes.ravel()
    values = np.empty((first.size, count), dtype=np.float64)
    for code, name in enumerate(names):
        streams = np.flatnonzero(flat_codes[first] == code)
        if streams.size:
            target = device if device_type(device) == name else name
            values[streams] = _draw(flat_seeds[first[streams]], str(target), count)
    return StreamReport(
        layout, step, phase, seeds, devices, values[ids], source="predicted", numbering=(ids, first, counts)
    )
