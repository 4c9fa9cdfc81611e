"""Every exception fastdist_lab raises, in one place (as ``pandas.errors``): catch them from here.

Bad input is a ``ValueError``: ``LayoutError`` (a layout, a config or its fields), ``ConventionError`` (another
framework's numbering or config), ``CostError`` (a model, training set-up or hardware). A failure of running ranks
is a ``ClusterError`` (a ``RuntimeError``) carrying what the ranks returned. Pure Python: importing this module
imports nothing else, so ``dir()`` shows the exceptions and ``__all__`` names them all.
"""


class LayoutError(ValueError):
    """An invalid layout or config; the message names the field(s) and the numbers."""


class WorldSizeNeeded(LayoutError):
    """A config or command line that gives no world size, read without one: pass ``world_size=...``
    (``--world-size``). Every config reader raises it (the readers of other frameworks raise
    ``ConventionWorldSizeNeeded``), so a caller that has a world to offer (the lab's layout panel) can catch it and
    retry."""


class ConventionError(ValueError):
    """An invalid convention, axis name or mapping; the message names the input and the numbers."""


class ConventionWorldSizeNeeded(ConventionError, WorldSizeNeeded):
    """A Megatron-LM or torchtitan input that gives no world size, read without one: both a ``ConventionError``
    and a ``WorldSizeNeeded`` (catch the latter for every framework)."""


class CostError(ValueError):
    """A model, training set-up or hardware value the cost model cannot use; the message names field and value."""


class ClusterError(RuntimeError):
    """A runtime failure of a cluster: a rank raised, died or could not start.

    ``results`` holds the ``RankResults`` of the call when there are any (else ``None``); ``ranks`` names the
    ranks at fault.
    """

    def __init__(self, message: str, results: object = None, ranks: list[int] | None = None):
        super().__init__(message)
        self.results = results
        self.ranks = list(ranks or [])


class ClusterTimeout(ClusterError, TimeoutError):
    """A call passed its deadline; ``ranks`` did not answer and ``stacks`` maps each of them to its Python stack."""

    def __init__(
        self,
        message: str,
        results: object = None,
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


class CapacityError(ClusterError):
    """A world does not fit on this machine; ``problems`` names each shortfall, ``alternative`` a mode that
    would run it (``"threads"``, ``"fake"``, or ``None``)."""

    def __init__(self, message: str, problems: list[str], alternative: str | None):
        super().__init__(message)
        self.problems = problems
        self.alternative = alternative


class InProcessUnavailable(ClusterError):
    """This torch lacks (or changed) the in-process process groups that simulated worlds are built on."""


class PipeliningUnavailable(ClusterError):
    """This torch lacks (or changed) what the training check uses of ``torch.distributed.pipelining`` / c10d."""


class ProtocolError(ClusterError):
    """A peer of a cluster's control channel sent a message of a kind the receiver did not expect at that point."""


class RemoteTraceback(Exception):
    """The traceback of an exception raised on a rank, attached as ``__cause__`` by ``RankResults.raise_first``."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n" + self.text


class WrongAnswer(AssertionError):
    """An exercise's answer that is not right yet (``fastdist_lab.exercises``); the message is a hint."""


__all__ = [
    "BackendUnavailable",
    "CapacityError",
    "ClusterError",
    "ClusterTimeout",
    "ConventionError",
    "ConventionWorldSizeNeeded",
    "CostError",
    "InProcessUnavailable",
    "LayoutError",
    "PipeliningUnavailable",
    "ProtocolError",
    "RemoteTraceback",
    "WorldSizeNeeded",
    "WrongAnswer",
]
