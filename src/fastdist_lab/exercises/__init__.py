"""Exercises that check themselves: one ``check_...`` per exercise of the course notebooks (09, 10 and 08).

A check prints ``correct: ...`` with what the right answer shows, or raises ``WrongAnswer``
(``fastdist_lab.errors``) whose message is a hint, never the answer; a stub's ``...`` gets "replace it with your
answer". The stored notebooks hold each worked solution in a collapsed cell tagged ``solution``;
``python scripts/strip_solutions.py notebooks/X.ipynb`` writes the student's copy without them.

- collectives (09): ``check_all_reduce``, ``check_all_gather``, ``check_reduce_scatter``, ``check_all_to_all`` on
  ``collective_inputs()``, ``check_ring_cost``, ``check_ring_all_reduce``, ``check_alpha_beta``,
  ``check_tensor_collectives_per_layer``, ``check_tensor_collectives_per_step``, ``check_slowest_link``;
- memory and schedules (10): ``check_zero_bytes_per_parameter``, ``check_fewest_activations``,
  ``check_same_activations``, ``check_recompute_seconds``, ``check_global_batch``, ``check_bubble``,
  ``check_in_flight``, ``check_challenge``;
- build it, then break it (08): ``check_column_parallel``, ``check_row_parallel``, ``check_parallel_mlp``,
  ``fault_puzzle`` and ``check_diagnosis``.
"""

from __future__ import annotations

from ..lazy import lazy_attributes
from .collective_exercises import (
    check_all_gather,
    check_all_reduce,
    check_all_to_all,
    check_alpha_beta,
    check_reduce_scatter,
    check_ring_all_reduce,
    check_ring_cost,
    check_slowest_link,
    check_tensor_collectives_per_layer,
    check_tensor_collectives_per_step,
    collective_inputs,
    collective_results,
)
from .memory_exercises import (
    CHALLENGE,
    check_challenge,
    check_fewest_activations,
    check_global_batch,
    check_recompute_seconds,
    check_same_activations,
    check_zero_bytes_per_parameter,
)
from .schedule_exercises import bubble_share, check_bubble, check_in_flight, exercise_schedule
from .training_exercises import (
    FAULT_KINDS,
    FaultPuzzle,
    check_column_parallel,
    check_diagnosis,
    check_parallel_mlp,
    check_row_parallel,
    fault_puzzle,
)

__all__ = [
    "CHALLENGE",
    "FAULT_KINDS",
    "FaultPuzzle",
    "bubble_share",
    "check_all_gather",
    "check_all_reduce",
    "check_all_to_all",
    "check_alpha_beta",
    "check_bubble",
    "check_challenge",
    "check_column_parallel",
    "check_diagnosis",
    "check_fewest_activations",
    "check_global_batch",
    "check_in_flight",
    "check_parallel_mlp",
    "check_recompute_seconds",
    "check_reduce_scatter",
    "check_ring_all_reduce",
    "check_ring_cost",
    "check_row_parallel",
    "check_same_activations",
    "check_slowest_link",
    "check_tensor_collectives_per_layer",
    "check_tensor_collectives_per_step",
    "check_zero_bytes_per_parameter",
    "collective_inputs",
    "collective_results",
    "exercise_schedule",
    "fault_puzzle",
]

__getattr__, __dir__ = lazy_attributes(__name__, {}, __all__)
"""``dir()`` is ``__all__``: the modules of the package stay out of it, as ``from __future__`` names do."""
