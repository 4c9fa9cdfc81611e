"""The checks of a single value every layer makes of its inputs, written once: an integer (never a bool) in a range,
a finite positive number, a flag, one of some choices.

Each returns the value normalised (a numpy integer becomes an ``int``) or raises ``error`` (``LayoutError`` unless the
caller passes its own, e.g. ``CostError``) with one message naming the input and its value.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
from typing import Any

from .errors import LayoutError


def is_bool(value: Any) -> bool:
    """Whether ``value`` is a Python or numpy bool (which an integer field refuses)."""
    return isinstance(value, bool) or type(value).__name__ in ("bool_", "bool") and hasattr(value, "dtype")


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    error: type[Exception] = LayoutError,
) -> int:
    """``value`` as an ``int`` (a Python or numpy integer, not a bool) within ``[minimum, maximum]``.

    Raises ``error`` naming ``name`` and ``value``: ``world_size=0 must be > 0``, ``tp=True must be an integer, not
    a bool``, ``step=-1 must be >= 0``.
    """
    number = value
    if type(number) is not int:  # the common case needs no more checks
        if is_bool(value):
            raise error(f"{name}={value!r} must be an integer, not a bool")
        try:
            number = operator.index(value)
        except TypeError:
            raise error(f"{name}={value!r} must be an integer") from None
    if minimum is not None and number < minimum:
        raise error(f"{name}={number} must be {'> 0' if minimum == 1 else f'>= {minimum}'}")
    if maximum is not None and number > maximum:
        raise error(f"{name}={number} must be <= {maximum}")
    return number


def check_number(name: str, value: Any, *, error: type[Exception] = LayoutError, unit: str = "") -> float:
    """``value`` as a finite ``float`` > 0 (an int or a float, not a bool); else ``error`` naming ``name`` and
    ``value`` (and the ``unit``, e.g. ``"seconds"``)."""
    what = f"a finite number of {unit} > 0" if unit else "a finite number > 0"
    if is_bool(value) or not isinstance(value, numbers.Real) or not (value > 0 and math.isfinite(value)):
        raise error(f"{name}={value!r} must be {what}")
    return float(value)


def check_flag(name: str, value: Any, *, error: type[Exception] = LayoutError) -> bool:
    """``value`` as a ``bool``: ``True`` / ``False`` (or a numpy bool; not 0 or 1); else ``error``."""
    if is_bool(value):
        return bool(value)
    raise error(f"{name}={value!r} must be True or False")


def check_choice(name: str, value: Any, choices: tuple[str, ...], *, error: type[Exception] = LayoutError) -> str:
    """``value`` if it is one of ``choices``, else ``error`` listing them."""
    if value not in choices:
        raise error(f"{name}={value!r} must be one of {', '.join(map(repr, choices))}")
    return str(value)


def env_int(name: str, default: int | None = None) -> int | None:
    """The integer in environment variable ``name`` (torchrun's ``WORLD_SIZE``, ``RANK``, ...), ``default`` when it is
    unset or empty; ``LayoutError`` naming it when it is not an integer."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise LayoutError(f"environment variable {name}={raw!r} is not an integer") from None
