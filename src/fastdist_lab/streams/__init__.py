"""Generator streams: predict, draw and compare every rank's random streams, and say which ranks share them.

``predict(layout, step, phase)`` computes, for every rank and every generator of ``Distributed``
(``default_cpu``, ``pp_init``, ``tp_init``, ``pp``, ``tp``), the seed and the first draws of a torch generator
so seeded; ``draw(cluster, step, phase)`` draws the same numbers from the workers' real generators.
Both return a ``StreamReport`` (sharing, invariant checks, real-vs-predicted comparison, pictures).

This package imports numpy and pandas; torch is imported inside the functions that draw, and the runtime
and matplotlib only inside the functions that need them.
"""

from __future__ import annotations

from ..lazy import lazy_attributes
from .draws import DRAW_FUNCTION, draw_values
from .predict import predict
from .real import compare_on_cluster, comparison_text, draw
from .stream_report import StreamReport

__all__ = [
    "DRAW_FUNCTION",
    "StreamReport",
    "compare_on_cluster",
    "comparison_text",
    "draw",
    "draw_values",
    "predict",
]

__getattr__, __dir__ = lazy_attributes(__name__, {}, __all__)
"""``dir()`` is ``__all__``: the modules of the package stay out of it, as ``from __future__`` names do."""
