"""The kind of parallelism of a set-up, written once: which of tensor, pipeline, data, sequence-data and expert
parallel it uses, and whether ZeRO 3 shards its weights (``setup_kind``: ``"tp+pp+dp"``). The error bands read it
(``cost.band_for``), the validation groups its runs by it (``cost.validate``'s ``kind``) and a search's rows are
coded by it (``kind_codes``)."""

from __future__ import annotations

from typing import Any

import numpy as np

KIND_DIMS: tuple[str, ...] = ("tp", "pp", "dp", "sdp", "ep", "zero3")
"""The sizes whose being above 1 makes a set-up's kind of parallelism (``zero3``: ZeRO stage 3), in this order."""


def setup_kind(tensor: int = 1, pipeline: int = 1, data: int = 1, sequence_data: int = 1, expert: int = 1,
               zero_stage: int = 0) -> str:  # fmt: skip
    """The kind of parallelism of a set-up: the ``KIND_DIMS`` above 1 joined by ``+`` (``data`` counts the data
    ranks without ``sequence_data``), ``"single"`` for none.

    >>> setup_kind(tensor=8, pipeline=4, data=32), setup_kind(data=64, zero_stage=3), setup_kind()
    ('tp+pp+dp', 'dp+zero3', 'single')
    """
    flags = (tensor > 1, pipeline > 1, data > 1, sequence_data > 1, expert > 1, zero_stage == 3)
    return "+".join(name for name, on in zip(KIND_DIMS, flags) if on) or "single"


def kind_codes(frame: Any) -> np.ndarray:
    """``setup_kind`` of every row of a search frame as a bit mask over ``KIND_DIMS`` (vectorised)."""
    sdp = np.asarray(frame["sequence_data_parallel"])
    flags = (
        np.asarray(frame["tensor_parallel"]) > 1,
        np.asarray(frame["pipeline_parallel"]) > 1,
        np.asarray(frame["data_parallel"]) // sdp > 1,
        sdp > 1,
        np.asarray(frame["expert_parallel"]) > 1,
        np.asarray(frame["zero_stage"]) == 3,
    )
    return sum((flag.astype(np.int64) << bit for bit, flag in enumerate(flags)), np.zeros(len(sdp), np.int64))


def kind_of_code(code: int) -> str:
    """The ``setup_kind`` a ``kind_codes`` bit mask stands for.

    >>> kind_of_code(0b111), kind_of_code(0)
    ('tp+pp+dp', 'single')
    """
    return "+".join(name for bit, name in enumerate(KIND_DIMS) if code >> bit & 1) or "single"
