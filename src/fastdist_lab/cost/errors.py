"""The one error type of ``fastdist_lab.cost`` and the small validators that raise it."""

from __future__ import annotations

import numbers
from typing import Any


class CostError(ValueError):
    """A model, training set-up or hardware value the cost model cannot use; the message names field and value."""


def positive_int(name: str, value: Any) -> int:
    """``value`` as an int >= 1, else ``CostError`` naming ``name`` and ``value``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise CostError(f"{name}={value!r} must be an integer >= 1")
    return int(value)


def positive_number(name: str, value: Any) -> float:
    """``value`` as a float > 0 (finite), else ``CostError`` naming ``name`` and ``value``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < float(value) < float("inf"):
        raise CostError(f"{name}={value!r} must be a finite number > 0")
    return float(value)


def flag(name: str, value: Any) -> bool:
    """``value`` as a bool (only ``True``/``False`` accepted), else ``CostError``."""
    if not isinstance(value, bool):
        raise CostError(f"{name}={value!r} must be True or False")
    return value


def choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``, else ``CostError`` listing them."""
    if value not in choices:
        raise CostError(f"{name}={value!r} must be one of {', '.join(map(repr, choices))}")
    return str(value)
