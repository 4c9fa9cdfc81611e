"""How far to trust a prediction: an error band from the validation runs nearest to it (issue 27, item 5).

``TRUST_RUNS`` (the data file ``trust_table.json`` beside this module, written by ``python -m
fastdist_lab.cost.evidence.trust_table --write``, read on first use) holds one ``TrustRun`` per validated run: its
engine, hardware family, kind of parallelism (``setup_kind``), GPUs, the model's error on it (``accuracy.validate``),
the MFU it measured and its sequence length. ``band_for(engine, family, kind,
gpus, seq_length=...)`` gives the ``ErrorBand`` of a set-up from them, fast (no model is run):

- the runs it rests on: those of the same engine (or its versions, ``engines.BAND_ENGINES``), hardware family and
  kind, the nearest in scale (log2 GPUs) first, ``NEAREST`` of them (and any as near as the last); with no run of
  that kind, the nearest kind's (fewest sizes that differ, a dense kind and a mixture of experts' apart), and the
  set-up is *outside* what was validated;
- the band: where the measured step fell around the prediction on those runs, ``measured / predicted - 1``, from
  the lowest to the highest, widened to at least ``BAND_FLOOR`` either side;
- ``validated`` is false, with a one-line ``reason``, for an engine or hardware family without validated runs, a
  kind none was run with, or a scale more than ``SCALE_REACH`` times beyond the largest (or below the smallest);
  and for sequences more than ``SEQUENCE_REACH`` times longer than the longest validated with that engine on that
  family (or shorter than the shortest): attention's share of a step grows with the sequence, and off the validated
  lengths the model errs more (llm-foundry's MPT runs of 8K to 64K tokens ran 17-28% slower than predicted on average,
  docs/validation.md, "What the model does not capture").

``mfu_ceiling(family)`` is the highest MFU measured on a family: a predicted MFU above it is flagged
(``mfu_flagged``), as the search and ``StepTime`` show it. The rule and its reasons: docs/validation.md, "Trust".
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...setup import DEFAULT_ENGINE, KIND_DIMS, band_engines, kind_codes
from ...setup.parallelism import kind_of_code
from .trust_table import table_rows

NEAREST = 5
"""Validation runs a band rests on: the nearest in scale of the same engine, family and kind (more when tied)."""

BAND_FLOOR = 0.03
"""The narrowest half-width of a band: published step times are rounded, and repeated runs differ by a few percent."""

SCALE_REACH = 2.0
"""How far beyond the validated GPU counts (a factor, either way) a set-up still counts as validated."""

SEQUENCE_REACH = 2.0
"""How far beyond the validated sequence lengths of an engine on a hardware family (a factor, either way) a set-up
still counts as validated."""

TRUST_COLUMNS: tuple[str, ...] = ("band_low", "band_high", "validated", "tie", "mfu_flag")
"""Columns ``search`` adds to its frame: the ``ErrorBand`` of each row, whether its step ties the best one's (their
bands overlap), and whether its MFU is above every run measured on the hardware's family."""


@dataclass(frozen=True)
class TrustRun:
    """One validated run as the bands read it: ``run`` (its name), ``engine``, hardware ``family``, ``kind``
    (``setup_kind``), ``gpus``, the model's ``error`` (predicted / measured - 1), the ``mfu`` it measured and its
    ``seq_length`` in tokens (``0``: not known, never out of reach)."""

    run: str
    engine: str
    family: str
    kind: str
    gpus: int
    error: float
    mfu: float
    seq_length: int = 0


@functools.cache
def trust_runs() -> tuple[TrustRun, ...]:
    """The validated runs (``trust_table.json``, read once on first use)."""
    return tuple(TrustRun(*row) for row in table_rows())


def __getattr__(name: str) -> Any:
    """``TRUST_RUNS``, read from the table on first use (importing this module reads no file)."""
    if name == "TRUST_RUNS":
        return trust_runs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _parts(kind: str) -> set[str]:
    return set() if kind == "single" else set(kind.split("+"))


def _kind_distance(mine: set[str], kind: str) -> int:
    """The sizes that differ between two kinds; a dense set-up and a mixture of experts count as far apart (the
    experts' grouped GEMMs and all-to-all err differently), so a dense band rests on a dense run where there is one."""
    theirs = _parts(kind)
    return len(mine ^ theirs) + (len(KIND_DIMS) if ("ep" in mine) != ("ep" in theirs) else 0)


@dataclass(frozen=True)
class ErrorBand:
    """Where the measured step may fall around a prediction: from ``seconds * (1 + low)`` to ``seconds * (1 +
    high)`` (``low`` <= -``BAND_FLOOR`` < ``BAND_FLOOR`` <= ``high``), as it did on ``runs``, the validation runs
    it rests on, at most ``distance`` log2 GPUs away. ``validated``: whether the set-up is inside what was
    validated; ``reason`` says why not (empty when it is)."""

    low: float
    high: float
    runs: tuple[str, ...]
    distance: float
    validated: bool
    reason: str = ""

    def range(self, seconds: float) -> tuple[float, float]:
        """The lowest and highest step ``seconds`` may measure."""
        return seconds * (1 + self.low), seconds * (1 + self.high)

    def short(self) -> str:
        """The band in a table cell: ``-4/+6%``."""
        return f"{self.low * 100:+.0f}/{self.high * 100:+.0f}%"

    def text(self) -> str:
        """``-4% / +6%, 7 validated runs nearby``, or ``outside validated runs: <reason>`` and the nearest band."""
        band = f"{self.low:+.0%} / {self.high:+.0%}"
        if self.validated:
            return f"{band}, {len(self.runs)} validated run{'s' if len(self.runs) != 1 else ''} nearby"
        return f"outside validated runs: {self.reason}; {band} on the nearest"


def _scale(gpus: int, pool: list[TrustRun], where: str) -> str:
    largest, smallest = max(run.gpus for run in pool), min(run.gpus for run in pool)
    if gpus > SCALE_REACH * largest:
        return f"{gpus:,} GPUs is {gpus / largest:.0f}x beyond the largest validated run {where} ({largest:,})"
    if gpus * SCALE_REACH < smallest:
        return f"{gpus:,} GPUs is {smallest / gpus:.0f}x below the smallest validated run {where} ({smallest:,})"
    return ""


def _sequence(seq_length: int, pool: list[TrustRun], where: str) -> str:
    known = [run.seq_length for run in pool if run.seq_length > 0]
    if not known:
        return ""
    longest, shortest = max(known), min(known)
    if seq_length > SEQUENCE_REACH * longest:
        return (f"{seq_length:,}-token sequences are {seq_length / longest:.0f}x longer than the longest validated "
                f"{where} ({longest:,})")  # fmt: skip
    if seq_length * SEQUENCE_REACH < shortest:
        return (f"{seq_length:,}-token sequences are {shortest / seq_length:.0f}x shorter than the shortest "
                f"validated {where} ({shortest:,})")  # fmt: skip
    return ""


@functools.lru_cache(maxsize=1024)
def band_for(engine: str = DEFAULT_ENGINE, family: str = "hopper", kind: str = "tp+pp+dp", gpus: int = 8,
             runs: tuple[TrustRun, ...] | None = None, seq_length: int | None = None) -> ErrorBand:  # fmt: skip
    """The ``ErrorBand`` of a set-up of ``kind`` (``setup_kind``) on ``gpus`` GPUs of ``family`` run by
    ``engine`` with sequences of ``seq_length`` tokens (``None``: not checked), from ``runs`` (``TRUST_RUNS`` by
    default; the module docstring gives the rule).

    >>> band = band_for("megatron", "ampere", "tp+pp+dp", 1024)
    >>> band.validated, band.low < 0 < band.high, len(band.runs)
    (True, True, 5)
    >>> band_for("megatron", "blackwell", "tp+pp+dp", 1024).reason
    'no validated run on blackwell'
    >>> band_for("megatron", "ampere", "tp+pp+dp", 1024, seq_length=32768).reason
    '32,768-token sequences are 16x longer than the longest validated with megatron on ampere (2,048)'
    """
    table = trust_runs() if runs is None else runs
    engines = band_engines(engine)  # an engine's versions share their runs (engines.BAND_ENGINES)
    pool = [run for run in table if run.engine in engines and run.family == family]
    reasons = []
    if not pool:
        if any(run.family == family for run in table):
            reasons.append(f"no validated run with {engine} on {family}")
        elif any(run.engine in engines for run in table):
            reasons.append(f"no validated run on {family}")
        else:
            reasons.append(f"no validated run with {engine}, none on {family}")
        pool = [run for run in table if run.family == family] or [run for run in table if run.engine in engines]
        pool = pool or list(table)
    if not pool:
        return ErrorBand(-1.0, math.inf, (), math.inf, False, "no validated run at all")
    unrun = bool(reasons)  # no run of this engine on this family: the reasons above say so, nothing more
    if seq_length is not None and not unrun:
        sequence = _sequence(int(seq_length), pool, f"with {engine} on {family}")
        reasons += [sequence] if sequence else []
    same = [run for run in pool if run.kind == kind]
    if not same:
        mine = _parts(kind)
        nearest = min(_kind_distance(mine, run.kind) for run in pool)
        same = [run for run in pool if _kind_distance(mine, run.kind) == nearest]
        if not unrun:
            kinds = ", ".join(sorted({run.kind for run in same}))
            reasons.append(f"no validated run of {kind} on {family} (nearest: {kinds})")
    elif not unrun:
        scale = _scale(gpus, same, f"of {kind} on {family}")
        reasons += [scale] if scale else []
    far = sorted(same, key=lambda run: abs(math.log2(gpus) - math.log2(run.gpus)))
    cut = abs(math.log2(gpus) - math.log2(far[min(NEAREST, len(far)) - 1].gpus))
    chosen = [run for run in far if abs(math.log2(gpus) - math.log2(run.gpus)) <= cut]
    ratios = [1 / (1 + run.error) - 1 for run in chosen]
    return ErrorBand(
        low=min(min(ratios), -BAND_FLOOR), high=max(max(ratios), BAND_FLOOR), runs=tuple(run.run for run in chosen),
        distance=cut, validated=not reasons, reason="; ".join(reasons),
    )  # fmt: skip


def mfu_ceiling(family: str) -> float | None:
    """The highest MFU measured on ``family`` among ``TRUST_RUNS`` (``None`` without runs there).

    >>> 0.3 < mfu_ceiling("hopper") < 0.6, mfu_ceiling("blackwell")
    (True, None)
    """
    measured = [run.mfu for run in trust_runs() if run.family == family]
    return max(measured) if measured else None


def mfu_flagged(family: str, mfu: Any) -> Any:
    """Whether ``mfu`` (a number or an array) is above every MFU measured on ``family`` (never without runs)."""
    ceiling = mfu_ceiling(family)
    return np.asarray(mfu) > (np.inf if ceiling is None else ceiling)


def outside_reason(frame: Any, engine: str, family: str, gpus: int, seq_length: int | None = None) -> str:
    """Why the first row of a search frame that ``frame_bands`` marks outside every validated run is outside (its
    band's ``reason``); empty when every row is inside."""
    codes = kind_codes(frame)
    inside = np.asarray(frame["validated"], dtype=bool)
    if inside.all():
        return ""
    code = int(codes[np.argmin(inside)])
    return band_for(engine, family, kind_of_code(code), gpus, seq_length=seq_length).reason


def frame_bands(frame: Any, engine: str, family: str, gpus: int,
                seq_length: int | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """``TRUST_COLUMNS`` for the rows of a search frame (best first; one ``band_for`` per kind of row, of sequences
    of ``seq_length`` tokens):
    ``tie`` where a row's band overlaps the best row's (per sequence, as the search ranks); the best row is the
    reference, never a tie itself, so a row's columns do not depend on how many rows were asked for."""
    codes = kind_codes(frame)
    n = len(codes)
    low, high, validated = np.empty(n), np.empty(n), np.empty(n, dtype=bool)
    for code in np.unique(codes):
        band = band_for(engine, family, kind_of_code(int(code)), gpus, seq_length=seq_length)
        rows = codes == code
        low[rows], high[rows], validated[rows] = band.low, band.high, band.validated
    per = np.asarray(frame["seconds"], dtype=float) / np.maximum(np.asarray(frame["global_batch_size"]), 1)
    tie = np.zeros(n, dtype=bool)
    if n:
        tie = per * (1 + low) <= per[0] * (1 + high[0])
        tie[0] = False
    flag = mfu_flagged(family, np.asarray(frame["mfu"], dtype=float))
    return {"band_low": low, "band_high": high, "validated": validated, "tie": tie, "mfu_flag": flag}
