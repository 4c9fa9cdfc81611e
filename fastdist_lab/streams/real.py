"""``draw``: every rank's generator streams drawn for real by the workers of a ``LocalCluster``."""

from __future__ import annotations

from typing import Any

from ..config import PhaseType
from .draws import check_draws


def draw(cluster: Any, step: int = 0, phase: PhaseType | str = "training", draws: int = 4) -> Any:
    """Placeholder until the runtime lands."""
    raise NotImplementedError


def compare_on_cluster(cluster: Any, step: int = 0, phase: PhaseType | str = "training", draws: int = 4) -> Any:
    """Placeholder until the runtime lands."""
    check_draws(draws)
    raise NotImplementedError
