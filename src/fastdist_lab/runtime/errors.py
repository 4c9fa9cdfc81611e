"""Errors of the process-group runtime: ``ClusterError``, its timeout flavour ``ClusterTimeout``, and
``BackendUnavailable`` for a backend this machine cannot run; ``first_line`` for quoting torch's errors."""

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


class BackendUnavailable(ClusterError):
    """The requested backend cannot run here (e.g. NCCL without one GPU per rank).

    The message is worded for Python and command-line users alike ("use the gloo backend"); ``alternative``
    names the backend that would work, so a command line can add its own flag for it.
    """

    def __init__(self, message: str, backend: str, alternative: str = "gloo"):
        super().__init__(message)
        self.backend = backend
        self.alternative = alternative


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (torch's C++ errors go on with a stack of frames), or its type name."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
