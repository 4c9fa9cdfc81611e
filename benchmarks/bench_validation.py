"""Validation of the step-time model: its prediction next to every measured published run (issue 21, item 7).

Prints one row per run (source, layout, settings the source leaves out and the model chose, measured and predicted
seconds, error), then the mean and worst absolute error of the calibration runs and of the held-out runs. ``--markdown``
prints the tables of ``docs/validation.md`` (the dense runs', then the mixture of experts'); ``--moe`` takes the
mixture-of-experts runs alone (``PUBLISHED_MOE_RUNS``, all held out; with ``--markdown``, the tables of
docs/validation.md's "Mixture of experts"); ``--collectives`` the table of published collective bus bandwidths against
the collective model (``docs/step_time.md``, issue 27); ``--rankings`` the published comparisons of layouts as ranking
rows (``validate_rankings``: measured-fastest, predicted-fastest, hit, regret; with ``--markdown``, the table of
docs/validation.md's "Rankings"); ``--calibrate`` fits the calibrated constants again on the calibration runs (a minute)
and prints them; ``--write-trust`` writes ``src/fastdist_lab/cost/evidence/trust_table.json``, the validation errors the
error bands rest on (``cost.band_for``), from every run, dense and mixture of experts (the package's own command,
``python -m fastdist_lab.cost.evidence.write_trust``); ``--write-docs`` rewrites every table of docs/validation.md and
docs/step_time.md that these options print (what the tests compare the documents with). The performance figure: the time
to validate every run, with a ratio against a baseline measured in the same run (one run, all its candidate settings,
one by one).

Run: python benchmarks/bench_validation.py [--markdown] [--moe] [--rankings] [--collectives] [--calibrate]
     [--write-trust] [--write-docs]
"""

from __future__ import annotations

import argparse
import pathlib
import time

from fastdist_lab.cost import (
    PUBLISHED_MOE_RUNS,
    PUBLISHED_RUNS,
    calibrate,
    error_breakdown,
    error_summary,
    predict,
    validate,
    validate_rankings,
)
from fastdist_lab.cost.evidence.published_collectives import collective_table


def _run_lines(table) -> list[str]:
    """The runs of ``table`` as the rows of a Markdown table, its header first."""
    lines = [
        "| run | source | hardware | layout | settings chosen | measured s | predicted s | error | set |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | --- |",
    ]
    for row in table.itertuples(index=False):
        lines.append(
            f"| {row.run} | {row.source} | {row.hardware} x {row.gpus:,} | {row.layout} | {row.settings or '-'} "
            f"| {row.measured_seconds:.3f} | {row.predicted_seconds:.3f} | {row.error:+.1%} "
            f"| {'calibration' if row.calibration else 'held out'} |"
        )
    return lines


def _summary_lines(table, sets: tuple[str, ...]) -> list[str]:
    """The ``sets`` rows of ``error_summary(table)`` as a Markdown table."""
    summary = error_summary(table)
    lines = [
        "| set | runs | sources | mean absolute error | worst absolute error |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name in sets:
        row = summary.loc[name]
        lines.append(f"| {name} | {int(row['runs'])} | {int(row['sources'])} | {row['mean_abs_error']:.1%} "
                     f"| {row['worst_abs_error']:.1%} |")  # fmt: skip
    return lines


SETS = ("calibration", "held out", "held out, issue 21 runs", "held out, issue 27 runs", "all")
"""The rows of ``error_summary`` docs/validation.md shows."""


def _breakdown_lines(table) -> list[str]:
    """``error_breakdown(table)`` (held-out runs per engine, GPU family, parallelism kind) as a Markdown table."""
    lines = [
        "| by | group | runs | mean absolute error | worst absolute error | mean signed error |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for (by, group), row in error_breakdown(table).iterrows():
        lines.append(f"| {by} | {group} | {int(row['runs'])} | {row['mean_abs_error']:.1%} "
                     f"| {row['worst_abs_error']:.1%} | {row['mean_error']:+.1%} |")  # fmt: skip
    return lines


def markdown(table) -> str:
    """The runs, the error summary per set and the errors per kind, as the Markdown tables of docs/validation.md."""
    return "\n".join([*_run_lines(table), "", *_summary_lines(table, SETS), "", *_breakdown_lines(table)])


def rankings_markdown(frame) -> str:
    """``validate_rankings()``'s rows as the Markdown table of docs/validation.md's "Rankings", then the tally."""
    lines = [
        "| comparison | kind | layouts | measured s | predicted s | measured fastest | predicted fastest | hit "
        "| regret |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | ---: |",
    ]
    for row in frame.itertuples(index=False):
        measured = ", ".join(f"{s:.2f}" for s in row.measured_seconds)
        predicted = ", ".join(f"{s:.2f}" for s in row.predicted_seconds)
        lines.append(f"| {row.comparison} | {row.kind} | {row.layouts} | {measured} | {predicted} "
                     f"| {row.measured_fastest} | {row.predicted_fastest} | {'yes' if row.hit else 'no'} "
                     f"| {row.regret:.1%} |")  # fmt: skip
    lines.append("")
    for kind, part in [("all", frame), *frame.groupby("kind", sort=True)]:
        hits, worst, mean = int(part["hit"].sum()), part["regret"].max(), part["regret"].mean()
        lines.append(f"- {kind}: {hits} of {len(part)} hits, worst regret {worst:.1%}, mean regret {mean:.1%}")
    return "\n".join(lines)


def moe_markdown(table) -> str:
    """The mixture-of-experts runs (all held out) and their error summary, as docs/validation.md shows them."""
    return "\n".join([*_run_lines(table), "", *_summary_lines(table, ("held out",))])


def collectives_markdown(table) -> str:
    """The published collective bus bandwidths next to the model's, as the Markdown table of docs/step_time.md."""
    lines = [
        "| measurement | source | GPUs (nodes) | size | measured busbw GB/s | predicted GB/s | NCCL's choice | error |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for row in table.itertuples(index=False):
        size = f"{row.size_bytes / 2**30:g} GiB" if row.size_bytes >= 2**30 else f"{row.size_bytes / 2**20:g} MiB"
        mark = " (calibration)" if row.calibration else ""
        lines.append(
            f"| {row.measurement}{mark} | {row.source} | {row.gpus:,} ({row.nodes}) | {size} "
            f"| {row.measured_busbw_GBps:.1f} | {row.predicted_busbw_GBps:.1f} | {row.algorithm} | {row.error:+.1%} |"
        )
    held = table[~table["calibration"]]["error"].abs()
    lines += ["", f"Held out: {len(held)} measurements, mean absolute error {held.mean():.1%}, worst {held.max():.1%}."]
    return "\n".join(lines)


ROOT = pathlib.Path(__file__).resolve().parents[1]
VALIDATION_DOC = ROOT / "docs" / "validation.md"
"""The document whose tables of runs, rankings and mixture-of-experts runs ``--write-docs`` writes."""
STEP_TIME_DOC = ROOT / "docs" / "step_time.md"
"""The document whose collectives table ``--write-docs`` writes."""


def replace_block(text: str, block: str, occurrence: int = 0) -> str:
    """``text`` with its ``occurrence``-th block shaped as ``block`` replaced by it: the block starts at a line equal
    to ``block``'s first line and holds as many runs of non-blank lines, one blank line apart, as ``block`` does.
    Raises ``ValueError`` where ``text`` has no such block."""
    lines, first = text.split("\n"), block.split("\n")[0]
    starts = [i for i, line in enumerate(lines) if line == first]
    if len(starts) <= occurrence:
        raise ValueError(f"no block {occurrence} starting {first[:60]!r}")
    end = start = starts[occurrence]
    for group in range(block.count("\n\n") + 1):
        end += 1 if group else 0
        while end < len(lines) and lines[end].strip():
            end += 1
    return "\n".join([*lines[:start], *block.split("\n"), *lines[end:]])


def write_docs() -> list[str]:
    """Write the tables of docs/validation.md (the dense runs, the rankings, the mixture-of-experts runs) and
    docs/step_time.md (the collectives) as the code computes them now; returns the documents changed."""
    dense, moe = validate(PUBLISHED_RUNS), validate(PUBLISHED_MOE_RUNS)
    blocks = {VALIDATION_DOC: [(markdown(dense), 0), (rankings_markdown(validate_rankings()), 0),
                               (moe_markdown(moe), 1)],
              STEP_TIME_DOC: [(collectives_markdown(collective_table()), 0)]}  # fmt: skip
    changed = []
    for doc, replacements in blocks.items():
        text = doc.read_text()
        new = text
        for block, occurrence in replacements:
            new = replace_block(new, block, occurrence)
        if new != text:
            doc.write_text(new)
            changed.append(doc.name)
    return changed


def main() -> None:
    """Print the table (or its Markdown), the summary, and the timing ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the tables of docs/validation.md")
    parser.add_argument("--calibrate", action="store_true", help="fit the calibrated constants again")
    parser.add_argument("--collectives", action="store_true", help="print the collective table of docs/step_time.md")
    parser.add_argument("--moe", action="store_true", help="the mixture-of-experts runs (held out) instead")
    parser.add_argument("--rankings", action="store_true", help="the published comparisons of layouts (rankings)")
    parser.add_argument("--write-trust", action="store_true", help="write the trust table (the package's command)")
    parser.add_argument("--write-docs", action="store_true", help="write the tables of the two documents")
    args = parser.parse_args()
    if args.write_docs:
        print(f"rewrote the tables of {', '.join(write_docs()) or 'nothing (both documents are up to date)'}")
        return
    if args.write_trust:
        from fastdist_lab.cost.evidence.write_trust import main as write_trust

        write_trust([])
        return
    if args.rankings:
        frame = validate_rankings()
        if args.markdown:
            print(rankings_markdown(frame))
            return
        import pandas as pd

        columns = ["comparison", "measured_fastest", "predicted_fastest", "hit", "regret"]
        with pd.option_context("display.width", 250, "display.max_colwidth", 60, "display.max_columns", 10):
            print(frame[columns])
        print("\n" + rankings_markdown(frame).split("\n\n")[-1])
        return
    if args.collectives:
        print(collectives_markdown(collective_table()))
        return
    if args.calibrate:
        print(calibrate(progress=print))
        return
    runs = PUBLISHED_MOE_RUNS if args.moe else PUBLISHED_RUNS
    start = time.perf_counter()
    table = validate(runs)
    elapsed = time.perf_counter() - start
    if args.markdown:
        if args.moe:
            print(moe_markdown(table))
        else:
            print(markdown(table) + "\n\n" + moe_markdown(validate(PUBLISHED_MOE_RUNS)))
        return
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_colwidth", 48):
        print(table[["run", "layout", "settings", "measured_seconds", "predicted_seconds", "error", "calibration"]])
        print()
        print(error_summary(table))
        if not args.moe:
            print()
            print(error_breakdown(table))
    if args.moe:
        return
    run = next(r for r in PUBLISHED_RUNS if r.choices)
    base = time.perf_counter()
    predict(run)
    one = time.perf_counter() - base
    print(f"\nvalidate(): {len(table)} runs in {elapsed:.2f} s; one run with {len(run.choices)} unknown settings: "
          f"{one * 1e3:.0f} ms (ratio all / one: {elapsed / one:.1f})")  # fmt: skip


if __name__ == "__main__":
    main()
