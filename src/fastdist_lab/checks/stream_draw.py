"""``draw_streams``: every rank's generator streams drawn for real on a running cluster, and ``compare_streams``, the
comparison with the prediction (``streams.predict``).

On each rank its own ``Distributed`` (built by ``cluster.apply(layout)``) provides the generators.
Nothing the user holds is disturbed: every draw is made from a *copy* of a generator's state (a fresh
generator on the same device with ``set_state``), and the pp/tp generators get their state back after
``set_step``. What is drawn:

- ``pp`` / ``tp``: the first values after ``distributed.set_step(step, phase)``;
- ``pp_init`` / ``tp_init`` / ``default_cpu``: the first values after ``Distributed`` construction seeded them:
  from the generator's current state when it is still untouched since its last ``manual_seed`` (its state
  equals that of a generator freshly seeded with its ``initial_seed()``); else, when something already drew
  from it (typically torch's global default generator), from a fresh generator seeded with the generator's own
  ``initial_seed()``. ``StreamReport.origins`` says which, per cell (``"set_step"``, ``"untouched"``,
  ``"initial_seed"``).

The seed of each cell is read back from the generator itself (``initial_seed()``), not recomputed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import PhaseType
from ..seeds import GENERATORS, device_type
from ..streams import StreamReport, predict
from ..streams.draws import check_draws, draw_values

if TYPE_CHECKING:
    import pandas as pd
    import torch

_ATTRIBUTES = {name: f"{name}_generator" for name in ("default_cpu", "pp_init", "tp_init", "pp", "tp")}
"""Generator name -> attribute of ``Distributed``."""


def _copy(generator: torch.Generator) -> torch.Generator:
    import torch

    return torch.Generator(device=generator.device).set_state(generator.get_state())


def _untouched(generator: torch.Generator) -> bool:
    import torch

    fresh = torch.Generator(device=generator.device).manual_seed(generator.initial_seed())
    return bool(torch.equal(fresh.get_state(), generator.get_state()))


def rank_streams(ctx: Any, step: int, phase: str, draws: int) -> dict[str, Any]:
    """On one worker: seed, device, first ``draws`` values and origin of each generator of ``ctx.distributed``."""
    import torch

    distributed = ctx.distributed
    if distributed is None:
        raise RuntimeError(f"rank {ctx.rank} has no Distributed: apply a layout to the cluster first")
    generators = {name: getattr(distributed, attribute) for name, attribute in _ATTRIBUTES.items()}
    seeds, devices, origins, values = [], [], [], []

    saved = {name: generators[name].get_state() for name in ("pp", "tp")}
    try:
        distributed.set_step(step, PhaseType.parse(phase))
        stepped = {name: (_copy(generators[name]), generators[name].initial_seed()) for name in ("pp", "tp")}
    finally:
        for name, state in saved.items():
            generators[name].set_state(state)

    for name in GENERATORS:
        generator = generators[name]
        if name in stepped:
            twin, seed = stepped[name]
            origin = "set_step"
        else:
            seed = generator.initial_seed()
            if _untouched(generator):
                twin, origin = _copy(generator), "untouched"
            else:
                twin, origin = torch.Generator(device=generator.device).manual_seed(seed), "initial_seed"
        seeds.append(int(seed))
        devices.append(device_type(generator.device))
        origins.append(origin)
        values.append(draw_values(twin, draws))
    return {"rank": ctx.rank, "seeds": seeds, "devices": devices, "origins": origins, "values": np.stack(values)}


def draw_streams(
    cluster: Any, step: int = 0, phase: PhaseType | str = "training", draws: int = 4, timeout: float | None = None
) -> StreamReport:
    """Every rank's generator seeds and first ``draws`` values, drawn by the cluster's ranks (``source="real"``).

    The cluster must have a layout applied (``cluster.apply(layout)``). See the module docstring for what
    "first values" means per generator; the user's generators are left as they were.
    """
    count = check_draws(draws)
    phase = PhaseType.parse(phase)
    layout = getattr(cluster, "layout", None)
    if layout is None:
        raise RuntimeError("the cluster has no layout applied; call cluster.apply(layout) first")
    results = cluster.run(rank_streams, int(step), phase.name, count, timeout=timeout)
    results.raise_first()
    rows = list(results.values)
    answered = [row["rank"] for row in rows]
    if answered != list(range(layout.world_size)):
        raise RuntimeError(f"expected one answer per rank 0..{layout.world_size - 1}, got ranks {answered}")
    devices = {tuple(row["devices"]) for row in rows}
    if len(devices) != 1:
        raise RuntimeError(f"ranks disagree on their generators' device types: {sorted(devices)}")
    seeds = np.array([row["seeds"] for row in rows], dtype=np.uint64)
    values, origins = np.stack([row["values"] for row in rows]), np.array([row["origins"] for row in rows], object)
    return StreamReport(layout, step, phase, seeds, devices.pop(), values, source="real", origins=origins)


def compare_streams(
    cluster: Any, step: int = 0, phase: PhaseType | str = "training", draws: int = 4, timeout: float | None = None
) -> pd.DataFrame:
    """Draw on ``cluster`` and compare with the prediction for its layout on the workers' device type.

    Returns ``predicted.compare(real)``: one row per (rank, generator) with the device, seed and draws of
    both, ``ok`` and ``differs``; ``frame.attrs`` holds ``matches`` (whether every row is ok), ``step`` and
    ``phase``; ``streams.comparison_text(frame)`` says it in a few lines. For the two ``StreamReport`` objects
    themselves, call ``draw_streams`` and ``streams.predict`` directly.
    """
    real = draw_streams(cluster, step, phase, draws, timeout=timeout)
    device = real.devices[real.generator_index("pp")]
    predicted = predict(real.layout, step, phase, draws, device=device)
    frame = predicted.compare(real)
    frame.attrs.update(matches=predicted.matches(real), step=int(step), phase=PhaseType.parse(phase).name)
    return frame
