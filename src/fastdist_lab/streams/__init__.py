"""Generator streams: predict every rank's random streams, check the seed design, and say which ranks share them.

``predict(layout, step, phase)`` returns a ``StreamReport`` (the seed and first draws of every generator of every
rank; sharing, invariant checks, comparisons, pictures). Drawing from a running cluster's real generators is a check
(``fastdist_lab.checks.draw_streams`` / ``compare_streams``; ``streams.draw`` and ``streams.compare_on_cluster``
still work for one release, deprecated). numpy and pandas; torch and matplotlib only inside the functions that need
them.
"""

from __future__ import annotations

from ..lazy import lazy_attributes
from .draws import DRAW_FUNCTION, draw_values
from .predict import predict
from .stream_report import StreamReport, comparison_text

__all__ = [
    "DRAW_FUNCTION",
    "StreamReport",
    "comparison_text",
    "draw_values",
    "predict",
]

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {},
    __all__,
    deprecated={
        "draw": (None, "fastdist_lab.checks.draw_streams"),
        "compare_on_cluster": (None, "fastdist_lab.checks.compare_streams"),
    },
)
"""``dir()`` is ``__all__``: the modules of the package stay out of it, as ``from __future__`` names do."""
