"""Who draws a picture for the objects that own one (``Layout.plot``, ``StreamReport.plot``, ``CostReport.plot``).

The pictures live in ``fastdist_lab.viz``, above the layers whose objects own them, which must not import it (not
even inside a function). So the package's ``__init__`` registers one painter per kind of picture in ``PAINTERS`` (each
imports ``viz``, and matplotlib, only when a picture is asked for) and the methods call ``paint``; pandas finds its
plotting backend the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PAINTERS: dict[str, Callable[..., Any]] = {}
"""Kind of picture (``"layout"``, ``"dims"``, ``"streams"``, ``"sharing"``, ``"cost"``) -> what draws it."""


def paint(kind: str, *args: Any, **kwargs: Any) -> Any:
    """The picture of ``kind`` drawn by its registered painter (a matplotlib ``Figure``)."""
    try:
        painter = PAINTERS[kind]
    except KeyError:
        raise LookupError(
            f"no painter for {kind!r} pictures is registered (import fastdist_lab registers them)"
        ) from None
    return painter(*args, **kwargs)
