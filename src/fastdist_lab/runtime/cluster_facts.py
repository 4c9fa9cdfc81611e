"""What every kind of cluster says about itself: its sizes, backend, default deadline and applied layout, its life
as a context manager, and how it shows in a notebook (``ClusterFacts``, the base of ``cluster.Cluster``)."""

from __future__ import annotations

import contextlib
import html
from typing import TypeVar

from ..layout import Layout

_Facts = TypeVar("_Facts", bound="ClusterFacts")


class ClusterFacts:
    """The facts a cluster's subclass sets (``_world_size``, ``_local_world_size``, ``_timeout``, ``_backend``,
    ``_layout``, ``_closed``) as properties, and its life as a context manager: ``start()`` on entry when closed,
    ``close()`` on exit and when collected."""

    _world_size: int
    _local_world_size: int
    _timeout: float
    _layout: Layout | None
    _closed: bool
    _backend: str

    def start(self: _Facts) -> _Facts:
        """Start the ranks (the subclass's)."""
        raise NotImplementedError

    def close(self) -> None:
        """End the ranks (the subclass's)."""
        raise NotImplementedError

    @property
    def running(self) -> bool:
        """Whether the ranks are ready for the next call (the subclass's)."""
        raise NotImplementedError

    def _state(self) -> str:
        return "closed" if self._closed else "running" if self.running else "stopped (restarts on the next call)"

    def _repr_html_(self) -> str:
        name = type(self).__name__
        text = html.escape(repr(self)[len(name) :])
        return f"<div class='fastdist-cluster'><b>{name}</b> {text}</div>"

    def __enter__(self: _Facts) -> _Facts:
        if self._closed:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return self._world_size

    @property
    def local_world_size(self) -> int:
        """Ranks per (emulated) node."""
        return self._local_world_size

    @property
    def timeout(self) -> float:
        """Default deadline of a call, in seconds."""
        return self._timeout

    @property
    def backend(self) -> str:
        """The groups' backend: ``"gloo"`` or ``"nccl"`` (processes, launched jobs), ``"threaded"`` or ``"fake"``
        (simulated worlds)."""
        return self._backend

    @property
    def device_type(self) -> str:
        """Where the ranks' tensors live: ``"cuda"`` for NCCL, else ``"cpu"``."""
        return "cuda" if self._backend == "nccl" else "cpu"

    @property
    def layout(self) -> Layout | None:
        """The layout applied last, as it was given (the ranks run it with the cluster's backend), or ``None``."""
        return self._layout
