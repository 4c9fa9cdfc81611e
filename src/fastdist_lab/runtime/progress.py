"""Start-up progress of a cluster: a bar in a notebook kernel, a line on stderr in a terminal, or a callback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

ProgressCallback = Callable[[int, int, str], None]
"""``progress(done, total, message)``."""


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


class TextProgress:
    """Rewrites one line on stderr: ``fastdist-lab: [done/total] message``."""

    def __init__(self, stream: Any = None):
        self.stream = stream if stream is not None else sys.stderr

    def __call__(self, done: int, total: int, message: str) -> None:
        end = "\n" if done >= total else ""
        self.stream.write(f"\r\x1b[2Kfastdist-lab: [{done}/{total}] {message}{end}")
        self.stream.flush()


class WidgetProgress:
    """An ipywidgets progress bar with a label, displayed on first use."""

    def __init__(self) -> None:
        self._box: Any = None
        self._fallback: TextProgress | None = None

    def __call__(self, done: int, total: int, message: str) -> None:
        if self._fallback is not None:
            self._fallback(done, total, message)
            return
        try:
            import ipywidgets
        except ImportError:  # a kernel without ipywidgets: plain text instead
            self._fallback = TextProgress()
            self._fallback(done, total, message)
            return
        if self._box is None:
            from IPython.display import display

            self._bar = ipywidgets.IntProgress(min=0, max=total, description="cluster")
            self._label = ipywidgets.Label()
            self._box = ipywidgets.HBox([self._bar, self._label])
            display(self._box)
        self._bar.max = total
        self._bar.value = done
        self._label.value = message
        if done >= total:
            self._bar.bar_style = "success"


def resolve_progress(progress: ProgressCallback | bool | None) -> ProgressCallback | None:
    """``None``: auto (bar in a notebook, text on a terminal's stderr, else silent); ``False``: silent."""
    if progress is False:
        return None
    if progress is None or progress is True:
        if in_notebook():
            return WidgetProgress()
        if progress is True or (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
            return TextProgress()
        return None
    if not callable(progress):
        raise TypeError(f"progress={progress!r} must be None, False or a callable(done, total, message)")
    return progress
