"""Results written on the rank grid (``Marks``): the verdict of a layout verification per rank, the ranks
whose real generator draws differ from the prediction, and each rank's worst error in a training step. Inputs are
duck-typed (a ``Verification``'s ``rows``, ``rank_failures()``, ``summary()``; ``StreamReport.diff``; a
``TrainingCheck``'s ``rank_errors``), so this module imports no runtime."""

from __future__ import annotations

from typing import Any

import numpy as np

from .picture import Marks

SHORT_NAMES = {
    "world": "world",
    "data": "dp",
    "pipeline": "pp",
    "tensor": "tp",
    "sequence_data": "sdp",
    "batch_data": "bdp",
    "tensor_and_sequence_data": "tp+sdp",
    "tensor_and_data": "tp+dp",
    "model_and_sequence_data": "mp+sdp",
    "seeds": "seeds",
    "no answer": "no answer",
}
"""How a cell names what failed (the dims by their usual abbreviations)."""

OK_NOTE = "\u2713 ok"
FAILED_MARK = "\u2717"
DIFFERS_MARK = "\u2260"


def verdict_note(failed: list[str]) -> str:
    """A cell's verdict: ``"✓ ok"``, or ``"✗ "`` and what failed (``"✗ tp"``, ``"✗ tp dp"``, ``"✗ tp +3"``)."""
    if not failed:
        return OK_NOTE
    short = [SHORT_NAMES.get(name, name) for name in failed]
    if len(short) > 2:
        return f"{FAILED_MARK} {short[0]} +{len(short) - 1}"
    return f"{FAILED_MARK} {' '.join(short)}"


def verdict_marks(verification: Any) -> Marks:
    """Every rank's verdict from a ``Verification``: ``✓ ok`` when each of its groups passed (and its seeds
    matched), else ``✗`` and the dims that failed; failing groups outlined in red; the summary as headline."""
    failures = verification.rank_failures()
    bad = np.array([bool(failed) for failed in failures], dtype=bool)
    red = tuple(tuple(int(r) for r in row["members"]) for row in verification.rows if not row["ok"])
    legend = (
        "\u2713: every group of the rank passed"
        if verification.ok
        else "\u2717 names what failed on the rank; failing groups outlined in red"
    )
    return Marks(
        notes=[verdict_note(failed) for failed in failures],
        bad=bad,
        red_groups=red,
        headline=f"{verification.summary()}  \u2014  {legend}",
    )


def _differs_note(generators: list[str]) -> str:
    more = f" +{len(generators) - 1}" if len(generators) > 1 else ""
    return f"{DIFFERS_MARK} {generators[0]}{more}"


def stream_marks(predicted: Any, real: Any) -> Marks:
    """Ranks whose real generator draws differ from the prediction: ``≠`` and the generators that differ
    (``= real`` on the others), from ``real.diff(predicted)``."""
    world = int(predicted.seeds.shape[0])
    differ: dict[int, list[str]] = {}
    frame = real.diff(predicted)
    for rank, generator in zip(frame["rank"].tolist(), frame["generator"].tolist()):
        differ.setdefault(int(rank), []).append(str(generator))
    notes = [_differs_note(differ[r]) if r in differ else "= real" for r in range(world)]
    bad = np.zeros(world, dtype=bool)
    bad[list(differ)] = True
    headline = (
        f"real draws differ from the prediction on {len(differ)} rank(s), marked {DIFFERS_MARK}"
        if differ
        else f"real draws of all {world} rank(s) match the prediction exactly"
    )
    return Marks(notes=notes, bad=bad, headline=headline)


def error_note(error: float, tolerance: float) -> str:
    """A cell's training verdict: ``"✓ 3e-07"`` within ``tolerance``, ``"✗ 0.2"`` outside, ``"✗ shard"`` for a rank
    that started from a wrong shard (``inf``), ``"–"`` when nothing was compared (NaN)."""
    if np.isnan(error):
        return "\u2013"
    if np.isinf(error):
        return f"{FAILED_MARK} shard"
    return f"{OK_NOTE[0] if error <= tolerance else FAILED_MARK} {error:.0e}"


def training_marks(check: Any) -> Marks:
    """Every rank coloured by its worst relative error in a training step (green within the tolerance, red
    outside), from a ``TrainingCheck`` (duck-typed: ``rank_errors``, ``tolerance``, ``ok``, ``problems``)."""
    errors = np.asarray(check.rank_errors, dtype=float)
    tolerance = float(check.tolerance)
    bad = ~(np.isnan(errors) | (errors <= tolerance))
    compared = int((~np.isnan(errors)).sum())
    if compared:
        headline = (
            f"every rank's tensors within {tolerance:g} relative of one process"
            if not bad.any()
            else f"{int(bad.sum())} rank(s) outside {tolerance:g} relative of one process, marked {FAILED_MARK}"
        )
    else:
        headline = "dropout judged on the real masks: " + ("all passed" if check.ok else check.problems[0])
    return Marks(notes=[error_note(float(e), tolerance) for e in errors], bad=bad, headline=headline)
