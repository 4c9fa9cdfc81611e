"""The checks of a single value every layer makes of its inputs, written once: an integer (never a bool) in a range,
a finite positive number, a flag, one of some choices, and the bounds of a config's text (``read_text``,
``check_text``, ``check_digits``: its size, its encoding, its integers; ``MAX_NESTING`` and ``MAX_VALUES`` for the
parsers).

Each returns the value normalised (a numpy integer becomes an ``int``) or raises ``error`` (``LayoutError`` unless the
caller passes its own, e.g. ``CostError``) with one message naming the input and its value, quoted on one line
(``formatting.quoted``) however large the value is.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
from typing import Any

from .errors import LayoutError
from .formatting import clipped, format_bytes, quoted

MAX_CONFIG_BYTES = 1 << 20
"""The largest config the loaders read, in bytes of UTF-8 (1 MiB): published configs and launch scripts are a few KiB,
and a larger input is refused before it is parsed."""

MAX_NESTING = 100
"""The deepest nesting the loaders read: of YAML and TOML lists and mappings, and of a shell ``$(( ))`` expression (its
operators and parentheses). Published configs nest a few levels; parsers recurse once per level."""

MAX_VALUES = 10_000
"""The most values a config document may hold: YAML nodes (each alias counted as the values of the anchor it repeats),
TOML keys, tables and array items. Published configs hold a few hundred; a YAML anchor bomb stands for billions, and
reading each value costs microseconds in Python."""

MAX_DIGITS = 40
"""The most digits of an integer the loaders read (a YAML or TOML integer, a flag's value, a ``$(( ))`` operand or
result): a layout's size or a seed (below 2**64, 20 digits) never needs more."""

MAX_LOG_BYTES = 1 << 16
"""The most of a log (a worker server's output, a rank's stacks) an error quotes or a reader holds: its last 64 KiB."""


def read_tail(path: str | os.PathLike, limit: int = MAX_LOG_BYTES, *, start: int = 0) -> str:
    """The last ``limit`` bytes of the log at ``path`` from byte ``start`` on, as text (undecodable bytes replaced),
    after a line saying how many bytes came before when there were more; ``""`` when it cannot be read. Reads no more
    than ``limit`` bytes however long the log grew."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            skipped = max(0, size - start - limit)
            handle.seek(start + skipped)
            data = handle.read(limit)
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return f"[... {skipped:,} bytes before]\n{text}" if skipped else text


def is_bool(value: Any) -> bool:
    """Whether ``value`` is a Python or numpy bool (which an integer field refuses)."""
    return isinstance(value, bool) or type(value).__name__ in ("bool_", "bool") and hasattr(value, "dtype")


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    error: type[Exception] = LayoutError,
) -> int:
    """``value`` as an ``int`` (a Python or numpy integer, not a bool) within ``[minimum, maximum]``.

    Raises ``error`` naming ``name`` and ``value``: ``world_size=0 must be > 0``, ``tp=True must be an integer, not
    a bool``, ``step=-1 must be >= 0``.
    """
    number = value
    if type(number) is not int:  # the common case needs no more checks
        if is_bool(value):
            raise error(f"{name}={quoted(value)} must be an integer, not a bool")
        try:
            number = operator.index(value)
        except TypeError:
            raise error(f"{name}={quoted(value)} must be an integer") from None
    if minimum is not None and number < minimum:
        raise error(f"{name}={quoted(number)} must be {'> 0' if minimum == 1 else f'>= {minimum}'}")
    if maximum is not None and number > maximum:
        raise error(f"{name}={quoted(number)} must be <= {maximum}")
    return number


def check_number(name: str, value: Any, *, error: type[Exception] = LayoutError, unit: str = "") -> float:
    """``value`` as a finite ``float`` > 0 (an int or a float, not a bool); else ``error`` naming ``name`` and
    ``value`` (and the ``unit``, e.g. ``"seconds"``)."""
    what = f"a finite number of {unit} > 0" if unit else "a finite number > 0"
    if is_bool(value) or not isinstance(value, numbers.Real) or not (value > 0 and math.isfinite(value)):
        raise error(f"{name}={quoted(value)} must be {what}")
    return float(value)


def check_flag(name: str, value: Any, *, error: type[Exception] = LayoutError) -> bool:
    """``value`` as a ``bool``: ``True`` / ``False`` (or a numpy bool; not 0 or 1); else ``error``."""
    if is_bool(value):
        return bool(value)
    raise error(f"{name}={quoted(value)} must be True or False")


def check_choice(name: str, value: Any, choices: tuple[str, ...], *, error: type[Exception] = LayoutError) -> str:
    """``value`` if it is one of ``choices``, else ``error`` listing them."""
    if value not in choices:
        raise error(f"{name}={quoted(value)} must be one of {', '.join(map(repr, choices))}")
    return str(value)


def env_int(name: str, default: int | None = None) -> int | None:
    """The integer in environment variable ``name`` (torchrun's ``WORLD_SIZE``, ``RANK``, ...), ``default`` when it is
    unset or empty; ``LayoutError`` naming it when it is not an integer."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    check_digits(f"environment variable {name}", raw)
    try:
        return int(raw)
    except ValueError:
        raise LayoutError(f"environment variable {name}={quoted(raw)} is not an integer") from None


def check_digits(name: str, text: str, *, error: type[Exception] = LayoutError) -> str:
    """``text``, an integer as a config writes it (``8``, ``-1``, ``1_000``), unless it has more than ``MAX_DIGITS``
    decimal digits: then ``error`` naming ``name``, the count and the limit, before anything converts it (Python
    refuses past 4,300 digits, and converting fewer still costs). Text that is no integer passes, for the caller's
    conversion to refuse in its own words."""
    digits = sum(character.isdigit() for character in text)
    if digits > MAX_DIGITS:
        raise error(f"{name}: an integer of {digits:,} digits (more than MAX_DIGITS={MAX_DIGITS}); no layout needs one")
    return text


def read_text(path: str | os.PathLike, name: str | None = None, *, error: type[Exception] = LayoutError) -> str:
    """The text of the config file at ``path`` (``name``, one short line, in messages: the file's name by default),
    refused in one line (``error``) when it cannot be read, holds more than ``MAX_CONFIG_BYTES`` or is not UTF-8 text
    (the byte offset of the first bad byte). No more than ``MAX_CONFIG_BYTES`` are read (a device or a growing file is
    no exception); a UTF-8 byte-order mark is dropped."""
    name = name or clipped(os.path.basename(os.fspath(path)))
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
            size = max(len(data), os.fstat(handle.fileno()).st_size)
    except OSError as failure:
        raise error(f"cannot read {name}: {failure.strerror or failure}") from None
    _check_size(name, size, error)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as failure:
        utf16 = " (a UTF-16 byte-order mark: save it as UTF-8)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise error(f"{name}: not UTF-8 text at byte {failure.start:,} ({failure.reason}){utf16}") from None
    return check_text(text.removeprefix("\ufeff"), name, error=error)


def check_text(text: str, name: str, *, error: type[Exception] = LayoutError) -> str:
    """``text``, a config's text given as a string, unless it holds more than ``MAX_CONFIG_BYTES`` in UTF-8, is not
    UTF-8 text (a lone surrogate: undecodable bytes of a command line) or holds a NUL character (binary data): then
    ``error`` naming ``name`` and where."""
    if len(text) > MAX_CONFIG_BYTES:  # at least a byte per character: no need to encode it
        _check_size(name, len(text), error, "characters")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as failure:
        bad = f"{quoted(failure.object[failure.start : failure.end])}: {failure.reason}"
        raise error(f"{name}: not UTF-8 text at character {failure.start:,} ({bad})") from None
    _check_size(name, size, error)
    if "\0" in text:
        raise error(f"{name}: a NUL character at character {text.index(chr(0)):,}: binary data, not a config")
    return text


def _check_size(name: str, size: int, error: type[Exception], unit: str = "bytes") -> None:
    if size > MAX_CONFIG_BYTES:
        found = f"{size:,} {unit}" + (f" ({format_bytes(size)})" if unit == "bytes" else "")
        limit = f"MAX_CONFIG_BYTES={MAX_CONFIG_BYTES:,} ({format_bytes(MAX_CONFIG_BYTES)})"
        raise error(f"{name}: {found}, more than {limit}; not a config")
