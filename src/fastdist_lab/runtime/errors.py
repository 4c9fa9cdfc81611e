"""Errors of the process-group runtime: ``ClusterError`` and its timeout flavour ``ClusterTimeout``."""

from __future__ import annotations

from typing import Any


class ClusterError(RuntimeError):
    """A runtime failure of a cluster: a rank raised, died or could not start.

    ``results`` holds the ``RankResults`` of the call when there are any (else ``None``); ``ranks`` names the
    ranks at fault.
    """

    def __init__(self, message: str, results: Any = None, ranks: list[int] | None = None):
        super().__init__(message)
        self.results = results
        self.ranks = list(ranks or [])


class ClusterTimeout(ClusterError, TimeoutError):
    """A call passed its deadline; ``ranks`` did not answer and ``stacks`` maps each of them to its Python stack."""

    def __init__(
        self,
        message: str,
        results: Any = None,
        ranks: list[int] | None = None,
        stacks: dict[int, str] | None = None,
    ):
        super().__init__(message, results, ranks)
        self.stacks = dict(stacks or {})
