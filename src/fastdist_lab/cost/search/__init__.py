"""Which layout should I run: the search over every layout and training set-up of a model on some GPUs.

``candidates`` enumerates what a search tries (its ``LIMITS``, from the layout's dims and each ``Training`` field's
``Setting``), ``bounds`` the floors that let it skip whole schedule tables, ``layout_search`` runs the formulas on
the rest and ranks them (``search``, ``LayoutSearch``), and ``ranking`` reads its rows as aligned text for
``fastdist-lab search`` and the lab's Advisor. The rows carry the error band of the validated runs nearest to them
(``evidence.trust``), attached here where they are shown.
"""

from __future__ import annotations

from .candidates import LIMITS, SETUP_COLUMNS, divisors
from .layout_search import LayoutSearch, search

__all__ = ["LIMITS", "SETUP_COLUMNS", "LayoutSearch", "divisors", "search"]
