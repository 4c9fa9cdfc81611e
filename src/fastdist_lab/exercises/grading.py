"""How every exercise answers: ``correct`` prints one line, ``wrong`` raises ``WrongAnswer`` with a hint."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import WrongAnswer


def correct(message: str) -> None:
    """Print ``correct: message`` (what the right answer shows, in a sentence)."""
    print(f"correct: {message}")


def wrong(hint: str) -> None:
    """Raise ``WrongAnswer`` carrying ``hint`` (what to look at again, never the answer itself)."""
    raise WrongAnswer(f"not yet: {hint}")


def answered(name: str, value: Any) -> Any:
    """``value``, or ``WrongAnswer`` when it is still the stub's ``...`` (or ``None``)."""
    if value is Ellipsis or value is None:
        wrong(f"{name} is still `...`: replace it with your answer")
    return value


def numbers(name: str, value: Any) -> np.ndarray:
    """``value`` (a number, nested lists, a numpy array or a CPU tensor) as a float64 array, or a hint."""
    answered(name, value)
    try:
        if hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        wrong(f"{name}={value!r} is not a number or a list of numbers")
    raise AssertionError("unreachable")  # pragma: no cover


def number(name: str, value: Any) -> float:
    """``value`` as one float, or a hint naming ``name``."""
    array = numbers(name, value)
    if array.size != 1:
        wrong(f"{name} should be one number, got {array.size} of them")
    return float(array.reshape(-1)[0])


def close(answer: float, truth: float, relative: float = 0.01) -> bool:
    """Whether ``answer`` is within ``relative`` of ``truth`` (or exactly 0 when ``truth`` is)."""
    return abs(answer - truth) <= relative * abs(truth) + 1e-12
