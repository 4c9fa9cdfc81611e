"""How a group, a set of ranks, a count, a number in its unit or an error reads as text, written once for the CLI, the
panels and the reports.

A group's members print as ``[0, 2, 4, 6]`` (``[0, 1, ..., 7, ..., 63] (64 ranks)`` when long); a set of ranks as
``ranks 0-4, 6, 7``; a count as ``1 group`` / ``3 groups``; bytes in binary units (``6.28 GiB``), seconds in s / ms /
µs / ns, counts such as parameters as ``4.31 B``, bandwidths in GB/s, ratios as ``1.04x``; a value an error message
quotes as one line of at most ``QUOTE_LIMIT`` characters (``quoted``, ``clipped``); ``column_unit`` reads a
table column's unit from its name (``*_bytes*``, ``seconds*``, ``*_GBps``, ``parameters``, ``*_over_*``), so every
table (``unit_frame.UnitFrame``) formats alike; ``wrap_lines`` keeps a line within the CLI's ``TEXT_WIDTH``. Pure
Python.
"""

from __future__ import annotations

import itertools
import math
import reprlib
import textwrap
from collections.abc import Iterable, Sequence

MEMBERS_SHOWN = 16
"""Members of a group listed whole; a longer group shows its first ``MEMBERS_SHOWN // 2``, ``...`` and its last."""


def plural(count: int, word: str, many: str | None = None) -> str:
    """``"1 group"``, ``"3 groups"``, ``"16,384 ranks"`` (``many``: the plural when not ``word + "s"``)."""
    return f"{count:,} {word if count == 1 else (many or word + 's')}"


def members_text(members: Sequence[int], limit: int = MEMBERS_SHOWN) -> str:
    """A group's members in group-rank order: ``[0, 2, 4, 6]``, or past ``limit`` members the first ``limit // 2``,
    ``...`` and the last with the size: ``[0, 1, 2, 3, 4, 5, 6, 7, ..., 63] (64 ranks)``."""
    size = len(members)
    if size <= limit:
        return "[" + ", ".join(str(int(member)) for member in members) + "]"
    head = ", ".join(str(int(members[index])) for index in range(max(limit // 2, 1)))
    return f"[{head}, ..., {int(members[size - 1])}] ({size:,} ranks)"


def ranks_text(ranks: Iterable[int]) -> str:
    """A set of ranks, sorted, runs of three or more written as a span: ``"rank 3"``, ``"ranks 0-4, 6, 7"``."""
    ordered = sorted({int(rank) for rank in ranks})
    parts: list[str] = []
    for _, pairs in itertools.groupby(enumerate(ordered), lambda pair: pair[1] - pair[0]):  # runs of consecutive ranks
        run = [rank for _, rank in pairs]
        parts.append(f"{run[0]}-{run[-1]}" if len(run) >= 3 else ", ".join(map(str, run)))
    return ("rank " if len(ordered) == 1 else "ranks ") + ", ".join(parts)


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (torch's C++ errors go on with a stack of frames), or its type name."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


QUOTE_LIMIT = 80
"""Characters of a value that an error message quotes, at most: one line, whatever the value's size."""


class _Quoter(reprlib.Repr):
    """``reprlib``'s shortened ``repr``, which cuts strings and containers before writing them out, and never writes
    out a huge integer (Python refuses to write more than 4,300 digits, and writing fewer still costs)."""

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 4 * self.maxlong:  # more digits than shown: only the count
            return f"<an integer of about {int(x.bit_length() * math.log10(2)) + 1:,} digits>"
        return super().repr_int(x, level)


_QUOTER = _Quoter()
_QUOTER.maxstring = _QUOTER.maxother = _QUOTER.maxlong = QUOTE_LIMIT
_QUOTER.maxlist = _QUOTER.maxtuple = _QUOTER.maxdict = _QUOTER.maxset = _QUOTER.maxfrozenset = 8
_QUOTER.maxlevel = 3


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``value`` as an error message quotes it: its ``repr`` on one line of at most ``limit`` characters, cut with
    ``...`` (``'ab...yz'``, ``[1, 2, ...]``). Strings, containers and integers are cut before they are written out, so
    quoting a value of any size (a YAML anchor bomb, a megabyte line) costs little."""
    text = " ".join(_QUOTER.repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clipped(text: str, limit: int = QUOTE_LIMIT) -> str:
    """A name from the input (a key, a flag, a word) as a message names it: as it is when it is one printable line of
    at most ``limit`` characters, else ``quoted``."""
    return text if len(text) <= limit and text.isprintable() else quoted(text, limit)


UNITS: tuple[str, ...] = ("bytes", "seconds", "count", "rate", "ratio")
"""The units ``format_value`` knows."""

TEXT_WIDTH = 120
"""Characters per line of the package's text output (the CLI's tables and lines)."""


def wrap_lines(text: str, width: int = TEXT_WIDTH, indent: str = "    ") -> list[str]:
    """``text`` cut into lines of at most ``width`` characters at blanks (never inside ``data-first``), every line
    after the first indented by ``indent``."""
    return textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False) or [""]


def format_bytes(value: float) -> str:
    """``value`` bytes in binary units, e.g. ``'1.50 GiB'`` (``'512 B'`` below one KiB)."""
    value = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_seconds(value: float) -> str:
    """``value`` seconds with three significant digits in s, ms, µs or ns, e.g. ``'14.97 ms'``, ``'755 ns'``."""
    value = float(value)
    size = abs(value)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if size >= scale:
            return f"{_three_digits(value / scale)} {unit}"
    if size == 0:
        return "0 s"
    return f"{_three_digits(value / 1e-9)} ns"


def format_count(value: float) -> str:
    """A count such as a number of parameters, e.g. ``'4.31 B'``, ``'131 M'``, ``'12.3 K'``, ``'512'``."""
    value = float(value)
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= scale:
            return f"{_three_digits(value / scale)} {unit}"
    return f"{value:.0f}" if value == int(value) else f"{value:.3g}"


def format_rate(value: float) -> str:
    """A bandwidth in GB/s (10**9 bytes per second, nccl-tests' unit), e.g. ``'450 GB/s'``, ``'0.0136 GB/s'``."""
    return f"{float(value):.3g} GB/s"


def format_ratio(value: float) -> str:
    """A ratio such as measured over predicted, e.g. ``'1.04x'``, ``'33,158x'``."""
    value = float(value)
    return f"{value:,.0f}x" if abs(value) >= 1000 else f"{value:.3g}x"


def column_unit(name: str) -> str | None:
    """The unit of a table column, read from its name (``None``: a plain number or not a number).

    ``parameters`` -> count; a name with the word ``bytes`` (``peak_bytes``, ``bytes_per_step``) or named
    ``size`` -> bytes; with the word ``seconds`` -> seconds; ending in ``_GBps`` -> rate; holding ``_over_`` ->
    ratio.
    """
    words = name.split("_")
    if name == "parameters" or name.endswith("_parameters"):
        return "count"
    if "bytes" in words or name == "size":
        return "bytes"
    if "seconds" in words:
        return "seconds"
    if name.endswith("_GBps"):
        return "rate"
    if "_over_" in name:
        return "ratio"
    return None


def format_value(value: object, unit: str) -> str:
    """``value`` in ``unit`` (one of ``UNITS``); a missing value (NaN, None) is empty, anything else not a number
    is shown as it is."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        return str(value)
    formatter = _FORMATTERS.get(unit)
    if formatter is None:
        raise ValueError(f"unit={unit!r}; use one of {', '.join(UNITS)}")
    return formatter(float(value))  # type: ignore[arg-type]


def _three_digits(value: float) -> str:
    """Three significant digits: ``4.31``, ``43.1``, ``431``, ``4,312`` (``0.3``, ``0.00123`` below one)."""
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


_FORMATTERS = dict(zip(UNITS, (format_bytes, format_seconds, format_count, format_rate, format_ratio)))
