"""Generator streams: predict every rank's random streams, check the seed design, and say which ranks share them.

``predict(layout, step, phase)`` computes, for every rank and every generator of ``Distributed``
(``default_cpu``, ``pp_init``, ``tp_init``, ``pp``, ``tp``), the seed and the first draws of a torch generator
so seeded. It returns a ``StreamReport`` (sharing, invariant checks, real-vs-predicted comparison, pictures);
``comparison_text`` reads a comparison frame in a few lines. Drawing the same numbers from a running cluster's real
generators is a check that drives the cluster: ``fastdist_lab.checks.draw_streams`` and ``compare_streams`` (the
old spellings ``streams.draw`` and ``streams.compare_on_cluster`` still work for one release, deprecated).

This package imports numpy and pandas; torch is imported inside the functions that draw, and matplotlib only inside
the functions that need it.
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
