"""Progress of slow cluster work (start-up, calls on big worlds): a ``tqdm.auto`` bar, a callback, or nothing.

``tqdm.auto`` shows the notebook bar in a Jupyter kernel and a one-line bar on a terminal. A bar appears only once
the work has taken ``BAR_DELAY`` seconds (``FASTDIST_LAB_BAR_DELAY`` in the environment overrides it, e.g. ``0`` to
see a bar at once), so quick work stays quiet.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

ProgressCallback = Callable[[int, int, str], None]
"""``progress(done, total, message)``; called as work advances and every half second while it waits."""

BAR_DELAY = 1.0
"""Seconds before a bar appears: anything that takes longer shows progress."""


def bar_delay() -> float:
    """``BAR_DELAY``, or the seconds ``FASTDIST_LAB_BAR_DELAY`` gives (a number >= 0; anything else is ignored)."""
    try:
        delay = float(os.environ.get("FASTDIST_LAB_BAR_DELAY", BAR_DELAY))
    except ValueError:
        return BAR_DELAY
    return delay if delay >= 0 else BAR_DELAY


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (ipykernel's shell is active)."""
    if "ipykernel" not in sys.modules:
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def interactive() -> bool:
    """Whether someone is watching: a notebook kernel, or stderr is a terminal."""
    return in_notebook() or bool(getattr(sys.stderr, "isatty", lambda: False)())


@functools.lru_cache(maxsize=1)
def _bar_class() -> type:
    from tqdm.auto import tqdm

    class Bar(tqdm):  # type: ignore[misc, valid-type]
        monitor_interval = 0  # no monitor thread: a cluster leaves no thread behind

    return Bar


class ProgressBar:
    """A ``tqdm.auto`` bar fed with ``(done, total, message)``; it appears after ``delay`` seconds (``bar_delay()``
    when not given), closes at the end.

    ``leave`` keeps the finished bar on screen (start-up); calls leave nothing behind.
    """

    def __init__(self, description: str, delay: float | None = None, leave: bool = True):
        self.description = description
        self.delay = bar_delay() if delay is None else delay
        self.leave = leave
        self._begin = time.monotonic()
        self._bar: Any = None

    def __call__(self, done: int, total: int, message: str) -> None:
        finished = done >= total
        if self._bar is None:
            if finished or time.monotonic() - self._begin < self.delay:
                return
            self._bar = _bar_class()(
                total=total,
                desc=self.description,
                leave=self.leave,
                file=sys.stderr,
                dynamic_ncols=True,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n}/{total} [{elapsed}]{postfix}",
            )
        bar = self._bar
        bar.total = total
        bar.set_postfix_str(message, refresh=False)
        bar.update(done - bar.n)
        bar.refresh()
        if finished:
            self.close()

    def close(self) -> None:
        """Close the bar if it is shown (idempotent)."""
        bar, self._bar = self._bar, None
        if bar is not None:
            bar.close()


def resolve_progress(
    progress: ProgressCallback | bool | None, description: str = "cluster", leave: bool = True
) -> ProgressCallback | None:
    """The progress reporter an option stands for.

    ``None``: a bar when someone watches (a notebook, or a terminal on stderr), else silent; ``True``: always a
    bar; ``False``: silent; a callable: itself.
    """
    if progress is False:
        return None
    if progress is True or (progress is None and interactive()):
        return ProgressBar(description, leave=leave)
    if progress is None:
        return None
    if not callable(progress):
        raise TypeError(f"progress={progress!r} must be None, True, False or a callable(done, total, message)")
    return progress


def finish(progress: ProgressCallback | None) -> None:
    """Close a bar that may still be shown (after a failure); nothing for callbacks."""
    if isinstance(progress, ProgressBar):
        progress.close()


def check_progress(progress: Any) -> None:
    """``TypeError`` unless ``progress`` is ``None``, a bool or a callable(done, total, message)."""
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise TypeError(f"progress={progress!r} must be None, True, False or a callable(done, total, message)")
