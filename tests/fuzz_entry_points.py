"""What the fuzz of every public entry point draws and how it judges a call (``tests/test_fuzz_entry_points.py``).

A value is drawn from what a field takes (its declaration: ``setup.TRAINING_SETTINGS``, a layout's sizes, a model's),
from the boundary values people mistype (0, -1, huge, NaN, infinities) and from garbage (strings, bools, tuples,
``None``, bytes). A call keeps the promise when it ends within ``DEADLINE`` seconds in a result, or in the project's
own error (``fastdist_lab.errors``) of one line that names a field of the call; a command line, when it exits 0 or 1,
or 2 with one line on stderr, never a traceback.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from hypothesis import strategies as st

from fastdist_lab import cli
from fastdist_lab.errors import ConventionError, CostError, LayoutError
from fastdist_lab.setup import TRAINING_SETTINGS, Setting

DEADLINE = 5.0
"""Seconds a call may take."""

MESSAGE_LIMIT = 600
"""The most characters an error's line may have (a ``Layout`` names every broken rule of its fields in one line)."""

PROJECT_ERRORS = (LayoutError, CostError, ConventionError)

BOUNDARY = [0, -1, 1, 2, 3, 7, 8, 64, 2**14 + 1, 2**20 + 1, 2**24 + 1, 2**31, 2**63, 10**30, -(10**30)]
"""Sizes people mistype, and sizes past every bound."""

GARBAGE = st.one_of(
    st.none(), st.booleans(), st.sampled_from(BOUNDARY), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.binary(max_size=6), st.tuples(st.integers(-3, 64)),
    st.lists(st.integers(0, 9), max_size=3),
    st.just(float("nan")), st.just(float("inf")), st.just("4"), st.just("False"), st.just(()), st.just({}),
)  # fmt: skip
"""Values no field takes (or a few that some do)."""


def of_setting(spec: Setting) -> st.SearchStrategy[Any]:
    """Values a field declared with ``spec`` takes."""
    if spec.kind == "flag":
        return st.booleans()
    if spec.kind == "choice":
        return st.sampled_from(spec.choices or ())
    if spec.kind == "number":
        return st.floats(min_value=spec.minimum or 0.0, max_value=min(spec.maximum or 10.0, 10.0))
    if spec.kind == "counts":
        return st.none()
    low = int(spec.minimum or 0)
    values = st.integers(low, low + 8)
    return st.one_of(st.none(), values) if spec.kind == "optional int" else values


def field_values(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's value: valid six times in seven, else a boundary value or garbage (a call of several fields has one
    bad field about as often as none)."""
    return st.integers(0, 6).flatmap(lambda pick: GARBAGE if pick == 0 else valid)  # one_of would flatten GARBAGE


def training_fields() -> st.SearchStrategy[dict[str, Any]]:
    """Some of ``Training``'s fields, each valid or not."""
    return st.fixed_dictionaries(
        {}, optional={name: field_values(of_setting(spec)) for name, spec in TRAINING_SETTINGS.items()}
    )


LAYOUT_SIZES = st.sampled_from([1, 2, 4, 8])


def layout_fields() -> st.SearchStrategy[dict[str, Any]]:
    """A ``Layout``'s fields: mostly small worlds that split, sometimes not, sometimes garbage."""
    return st.fixed_dictionaries(
        {"world_size": field_values(st.sampled_from([1, 2, 4, 8, 16, 32, 64]))},
        optional={
            "local_world_size": field_values(st.sampled_from([1, 2, 4, 8])),
            "tensor_parallel": field_values(LAYOUT_SIZES),
            "pipeline_parallel": field_values(LAYOUT_SIZES),
            "sequence_data_parallel": field_values(st.sampled_from([1, 2])),
            "pipeline_first": field_values(st.booleans()),
            "expert_parallel": field_values(st.sampled_from([1, 2, 4])),
            "seed": field_values(st.integers(0, 2**32)),
        },
    )


def model_fields() -> st.SearchStrategy[dict[str, Any]]:
    """A small ``Transformer``'s fields, each valid or not."""
    return st.fixed_dictionaries(
        {
            "hidden_size": field_values(st.sampled_from([64, 128, 256])),
            "num_layers": field_values(st.sampled_from([2, 4, 8])),
            "num_attention_heads": field_values(st.sampled_from([4, 8])),
            "vocab_size": field_values(st.sampled_from([100, 1000])),
            "seq_length": field_values(st.sampled_from([64, 128, 256])),
        },
        optional={
            "ffn_hidden_size": field_values(st.sampled_from([256, 512])),
            "num_query_groups": field_values(st.sampled_from([1, 2, 4])),
            "swiglu": field_values(st.booleans()),
            "normalization": field_values(st.sampled_from(["LayerNorm", "RMSNorm"])),
            "num_experts": field_values(st.sampled_from([0, 4, 8])),
            "experts_per_token": field_values(st.sampled_from([1, 2])),
        },
    )


def hardware_fields() -> st.SearchStrategy[dict[str, Any]]:
    """A ``Hardware``'s fields, each valid or not."""
    positive = st.floats(min_value=0.5, max_value=5000.0)
    return st.fixed_dictionaries(
        {"intra_node_GBps": field_values(positive), "inter_node_GBps": field_values(positive)},
        optional={
            "peak_tflops": field_values(positive), "memory_GiB": field_values(positive),
            "memory_GBps": field_values(positive), "gpus_per_node": field_values(LAYOUT_SIZES),
            "matmul_efficiency": field_values(st.floats(0.1, 1.0)), "family": field_values(st.sampled_from(
                ["ampere", "hopper", "blackwell"])), "name": field_values(st.text(max_size=10)),
        },
    )  # fmt: skip


class Tally:
    """What the calls ended in, by entry point: ``result``, ``refused`` (one line naming a field), ``broken``
    (anything else: a raw exception, a long or multi-line message, a message naming no field, past the deadline)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.broken: list[str] = []

    def call(self, entry: str, names: Iterable[str], function: Callable[[], Any]) -> Any:
        """Run ``function`` (a call of ``entry`` given the fields ``names``) and judge how it ends."""
        start = time.perf_counter()
        outcome, result = "result", None
        try:
            result = function()
        except PROJECT_ERRORS as error:
            outcome = self.judge_error(entry, str(error), names)
        except Exception as error:  # noqa: BLE001 (any other exception breaks the promise)
            outcome = f"broken: {type(error).__name__}: {str(error)[:200]}"
        took = time.perf_counter() - start
        if took > DEADLINE:
            outcome = f"broken: {took:.1f} s"
        self.record(entry, outcome, names)
        return result

    def judge_error(self, entry: str, message: str, names: Iterable[str]) -> str:
        """``refused`` for one short line naming one of ``names``, else why it breaks the promise."""
        if "\n" in message or len(message) > MESSAGE_LIMIT:
            return f"broken: a message of {len(message)} characters, {message.count(chr(10)) + 1} lines"
        if not any(name in message for name in names):
            return f"broken: a message naming no field: {message[:200]}"
        return "refused"

    def command(self, argv: list[str], *, refused: bool = False) -> None:
        """Run ``fastdist-lab ARGV`` in this process and judge its exit code and standard error (``refused``: the
        call must be refused, anything else breaks the promise)."""
        out, err = io.StringIO(), io.StringIO()
        start = time.perf_counter()
        outcome = "result"
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = cli.main(argv)
                except SystemExit as exit_:
                    code = exit_.code
        except Exception as error:  # noqa: BLE001
            code, outcome = None, f"broken: {type(error).__name__}: {str(error)[:200]}"
        text = err.getvalue()
        if outcome == "result":
            if code == 2:
                lines = text.strip().splitlines()
                outcome = "refused" if len(lines) == 1 and len(lines[0]) <= MESSAGE_LIMIT else (
                    f"broken: exit 2 with {len(lines)} lines on stderr")  # fmt: skip
            elif code not in (0, 1):
                outcome = f"broken: exit {code!r}"
            if "Traceback" in text:
                outcome = "broken: a traceback"
        took = time.perf_counter() - start
        if took > DEADLINE:
            outcome = f"broken: {took:.1f} s"
        if refused and outcome == "result":
            outcome = f"broken: exit {code} where a refusal was due"
        self.record(f"fastdist-lab {argv[0]}", outcome, argv)

    def record(self, entry: str, outcome: str, what: Any) -> None:
        """Count one call of ``entry`` that ended in ``outcome``."""
        self.counts[entry, outcome.split(":")[0]] += 1
        if outcome.startswith("broken"):
            self.broken.append(f"{entry}: {outcome} ({str(what)[:300]})")

    def total(self) -> int:
        """Calls judged."""
        return sum(self.counts.values())

    def summary(self) -> str:
        """One line per entry point: its calls and how they ended; then the totals."""
        entries = sorted({entry for entry, _ in self.counts})
        lines = []
        for entry in entries:
            ended = {outcome: n for (e, outcome), n in self.counts.items() if e == entry}
            lines.append(f"  {entry}: {sum(ended.values())} calls, " + ", ".join(f"{n} {o}" for o, n in ended.items()))
        outcomes = Counter()
        for (_, outcome), n in self.counts.items():
            outcomes[outcome] += n
        lines.append(f"{self.total()} fuzzed calls over {len(entries)} entry points: " +
                     ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())))  # fmt: skip
        return "\n".join(lines)
