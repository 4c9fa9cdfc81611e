"""Numbers in their units (``formatting``: bytes, seconds, counts, GB/s, ratios, wrapped lines) and tables that keep
numbers but show units (``UnitFrame``)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastdist_lab.formatting import (
    column_unit,
    format_bytes,
    format_count,
    format_ratio,
    format_seconds,
    format_value,
    plural,
    wrap_lines,
)
from fastdist_lab.unit_frame import UnitFrame

_SECONDS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}
_BYTES = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_COUNTS = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def _read(text: str, units: dict[str, float]) -> float:
    number, _, unit = text.partition(" ")
    return float(number.replace(",", "")) * units[unit]


@pytest.mark.parametrize(
    "value, text",
    [(7.545778e-07, "755 ns"), (0.02502, "25.0 ms"), (0.01497, "15.0 ms"), (1.5, "1.50 s"), (0, "0 s"),
     (74.6e-6, "74.6 µs"), (3600.0, "3,600 s")],
)  # fmt: skip
def test_seconds(value, text):
    assert format_seconds(value) == text


@pytest.mark.parametrize(
    "value, text", [(4.31e9, "4.31 B"), (6_738_415_616, "6.74 B"), (131e6, "131 M"), (12_345, "12.3 K"), (512, "512")]
)
def test_counts(value, text):
    assert format_count(value) == text


def test_bytes_ratios_plurals():
    assert format_bytes(1.512634e11) == "140.88 GiB" and format_bytes(512) == "512 B"
    assert format_ratio(33157.87) == "33,158x" and format_ratio(1.04) == "1.04x"
    assert plural(1, "group") == "1 group" and plural(2048, "group") == "2,048 groups"
    assert plural(1, "rank") == "1 rank" and plural(0, "entry", "entries") == "0 entries"


@given(st.floats(min_value=1e-12, max_value=1e5))
def test_seconds_read_back_within_one_percent(value):
    text = format_seconds(value)
    assert re.fullmatch(r"[0-9,.]+ (s|ms|µs|ns)", text), text
    assert abs(_read(text, _SECONDS) - value) <= 0.01 * value


@given(st.integers(min_value=0, max_value=1 << 45))
def test_bytes_read_back_within_one_percent(value):
    text = format_bytes(value)
    assert abs(_read(text, _BYTES) - value) <= 0.01 * value + 0.5


@given(st.integers(min_value=1, max_value=10**14))
def test_counts_read_back_within_one_percent(value):
    text = format_count(value)
    number, _, unit = text.partition(" ")
    assert abs(float(number.replace(",", "")) * _COUNTS[unit] - value) <= 0.01 * value


def test_the_unit_of_a_column_comes_from_its_name():
    units = {name: column_unit(name) for name in (
        "parameters", "weights_bytes", "bytes_per_call", "bus_bytes_per_step", "peak_bytes", "size", "seconds",
        "predicted_seconds", "seconds_per_call", "algbw_GBps", "measured_over_predicted", "group_size", "dim",
        "calls_per_step", "inter_node",
    )}  # fmt: skip
    assert units == {
        "parameters": "count", "weights_bytes": "bytes", "bytes_per_call": "bytes", "bus_bytes_per_step": "bytes",
        "peak_bytes": "bytes", "size": "bytes", "seconds": "seconds", "predicted_seconds": "seconds",
        "seconds_per_call": "seconds", "algbw_GBps": "rate", "measured_over_predicted": "ratio",
        "group_size": None, "dim": None, "calls_per_step": None, "inter_node": None,
    }  # fmt: skip
    assert format_value(float("nan"), "bytes") == "" and format_value("n/a", "seconds") == "n/a"
    with pytest.raises(ValueError, match="unit='furlongs'"):
        format_value(1.0, "furlongs")


@given(st.text(alphabet="ab -", min_size=0, max_size=400), st.integers(20, 130))
def test_wrapped_lines_fit_and_keep_every_word(text, width):
    lines = wrap_lines(text, width)
    assert all(len(line) <= width for line in lines if " " in line.strip())
    assert " ".join(line.strip() for line in lines).split() == text.split()


def _table() -> UnitFrame:
    frame = UnitFrame(
        {
            "dim": ["tensor", "data"],
            "parameters": [4_310_000_000, 131_000_000],
            "bytes_per_step": [2_181_038_080, 6_744_440_832],
            "seconds": [7.545778e-07, 0.01497],
            "inter_node": [False, True],
        }
    ).set_index("dim")
    frame.attrs["hardware"] = "dgx-h100"
    return frame


def test_a_unit_frame_keeps_numbers_and_shows_units():
    frame = _table()
    assert frame["bytes_per_step"].dtype.kind == "i" and frame["seconds"].dtype.kind == "f"  # numbers stay numbers
    assert frame["bytes_per_step"].sum() == 8_925_478_912 and frame.to_dict()["seconds"]["tensor"] == 7.545778e-07
    text = repr(frame)
    assert "2.03 GiB" in text and "755 ns" in text and "4.31 B" in text and "15.0 ms" in text
    assert "e-07" not in text and "2181038080" not in text
    html = frame._repr_html_()
    assert "6.28 GiB" in html and "131 M" in html and "<table" in html
    derived = frame.sort_values("seconds").head(1)
    assert isinstance(derived, UnitFrame) and "755 ns" in repr(derived)  # a selection displays alike
    assert type(pd.DataFrame(frame)) is pd.DataFrame
    assert frame.copy().attrs == {"hardware": "dgx-h100"} and isinstance(frame.copy(), UnitFrame)


def test_a_wide_unit_frame_splits_into_blocks_that_fit():
    wide = UnitFrame(np.full((3, 14), 123456789.0), columns=[f"column_{i}_bytes_per_step" for i in range(14)])
    text = wide.to_text(120)
    assert max(map(len, text.splitlines())) <= 120 and text.count("117.74 MiB") == 42
    assert max(map(len, wide.to_text(200).splitlines())) <= 200
