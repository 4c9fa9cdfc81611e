"""The vocabulary of a training set-up, below every layer that reads one: what is trained (``Transformer`` and its
presets), how (``Training``, each field declared once with its ``Setting``), by which engine (``Engine`` records in
``ENGINE_REGISTRY``) and pipeline schedule (``ScheduleKind`` records in ``SCHEDULE_KINDS``), on what (``Hardware`` and
its presets) and with which model constants (``Efficiency``).

Pure Python and numpy: it imports neither the cost formulas nor the evidence they are checked against, so the
training step (``checks``), the commands and the panels take their vocabulary from here without loading either.
``fastdist_lab.cost`` re-exports these names for the estimates that take them.
"""

from __future__ import annotations

from ..lazy import lazy_attributes
from .efficiency import DEFAULT_EFFICIENCY, Efficiency
from .engines import (
    BAND_ENGINES,
    DEFAULT_ENGINE,
    ENGINE_REGISTRY,
    ENGINE_TRAITS,
    ENGINES,
    Engine,
    EngineTraits,
    band_engines,
    check_engine,
    engine_record,
)
from .hardware import DEFAULT_HARDWARE, HARDWARE_PRESETS, SUSTAINED, Hardware
from .model_presets import PRESETS
from .parallelism import KIND_DIMS, kind_codes, setup_kind
from .schedule_kinds import SCHEDULE_KINDS, SCHEDULES, ScheduleKind, check_schedule, schedule_kind
from .settings import Setting, setting, settings_of
from .training import RECOMPUTE, TRAINING_SETTINGS, Training
from .transformer import VOCAB_PADDING, Transformer

__all__ = [
    "BAND_ENGINES", "DEFAULT_EFFICIENCY", "DEFAULT_ENGINE", "DEFAULT_HARDWARE", "ENGINES", "ENGINE_REGISTRY",
    "ENGINE_TRAITS", "HARDWARE_PRESETS", "KIND_DIMS", "PRESETS", "RECOMPUTE", "SCHEDULES", "SCHEDULE_KINDS",
    "SUSTAINED", "TRAINING_SETTINGS", "VOCAB_PADDING", "Efficiency", "Engine", "EngineTraits", "Hardware",
    "ScheduleKind", "Setting", "Training", "Transformer", "band_engines", "check_engine", "check_schedule",
    "engine_record", "kind_codes", "schedule_kind", "setting", "settings_of", "setup_kind",
]  # fmt: skip

__getattr__, __dir__ = lazy_attributes(__name__, {}, __all__)
"""``dir()`` is ``__all__``: the modules of the package stay out of it."""
