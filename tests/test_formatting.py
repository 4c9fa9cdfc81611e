"""Texts and value checks written once for every layer: ``fastdist_lab.formatting`` and ``fastdist_lab.validation``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastdist_lab.errors import CostError, LayoutError
from fastdist_lab.formatting import (
    MEMBERS_SHOWN,
    QUOTE_LIMIT,
    clipped,
    first_line,
    members_text,
    plural,
    quoted,
    ranks_text,
)
from fastdist_lab.validation import MAX_LOG_BYTES, check_choice, check_flag, check_int, check_number, env_int, read_tail


def test_a_group_prints_the_same_way_everywhere():
    assert members_text([0, 2, 4, 6]) == "[0, 2, 4, 6]"
    assert members_text(np.arange(64)) == "[0, 1, 2, 3, 4, 5, 6, 7, ..., 63] (64 ranks)"
    assert members_text(range(0, 2**30, 2)) == "[0, 2, 4, 6, 8, 10, 12, 14, ..., 1073741822] (536,870,912 ranks)"
    assert (
        plural(1, "group") == "1 group" and plural(16384, "rank") == "16,384 ranks" and plural(0, "rank") == "0 ranks"
    )
    assert first_line(RuntimeError("gloo failed\n  frame 1\n  frame 2")) == "gloo failed"
    assert first_line(RuntimeError()) == "RuntimeError"


@given(st.lists(st.integers(0, 10**6), max_size=3 * MEMBERS_SHOWN))
def test_members_text_shows_every_member_or_the_ends_and_the_size(members):
    text = members_text(members)
    if len(members) <= MEMBERS_SHOWN:
        assert text == str(members)
    else:
        head = ", ".join(map(str, members[: MEMBERS_SHOWN // 2]))
        assert text == f"[{head}, ..., {members[-1]}] ({len(members):,} ranks)"


@given(st.sets(st.integers(0, 300), min_size=1))
def test_ranks_text_names_exactly_the_ranks(ranks):
    text = ranks_text(ranks)
    assert text.startswith("rank " if len(ranks) == 1 else "ranks ")
    named = set()
    for part in text.split(" ", 1)[1].split(", "):
        low, _, high = part.partition("-")
        named |= set(range(int(low), int(high or low) + 1))
    assert named == ranks


def test_check_int_takes_integers_and_names_the_bad_value():
    assert check_int("tp", np.int64(4), minimum=1) == 4 and type(check_int("tp", np.int32(4))) is int
    for value, message in (
        (True, "tp=True must be an integer, not a bool"),
        (np.bool_(True), "tp=np.True_ must be an integer, not a bool"),
        (2.0, "tp=2.0 must be an integer"),
        ("2", "tp='2' must be an integer"),
        (0, "tp=0 must be > 0"),
    ):
        with pytest.raises(LayoutError) as caught:
            check_int("tp", value, minimum=1)
        assert str(caught.value) == message
    with pytest.raises(LayoutError, match=r"^step=-1 must be >= 0$"):
        check_int("step", -1, minimum=0)
    with pytest.raises(CostError, match=r"^zero_stage=4 must be <= 3$"):
        check_int("zero_stage", 4, minimum=0, maximum=3, error=CostError)


def test_numbers_flags_choices_and_the_environment():
    assert check_number("timeout", 60) == 60.0
    for value in (0, -1.0, math.nan, math.inf, True, "60"):
        with pytest.raises(LayoutError, match="must be a finite number of seconds > 0"):
            check_number("timeout", value, unit="seconds")
    assert check_flag("pipeline_first", np.bool_(True)) is True
    for value in (1, 0, "yes", None):
        with pytest.raises(LayoutError, match="must be True or False"):
            check_flag("pipeline_first", value)
    with pytest.raises(CostError, match="recompute='some' must be one of 'none', 'full'"):
        check_choice("recompute", "some", ("none", "full"), error=CostError)


def test_env_int(monkeypatch):
    monkeypatch.delenv("FASTDIST_LAB_TEST_INT", raising=False)
    assert env_int("FASTDIST_LAB_TEST_INT", 7) == 7
    monkeypatch.setenv("FASTDIST_LAB_TEST_INT", " 12 ")
    assert env_int("FASTDIST_LAB_TEST_INT") == 12
    monkeypatch.setenv("FASTDIST_LAB_TEST_INT", "twelve")
    with pytest.raises(LayoutError, match="FASTDIST_LAB_TEST_INT='twelve' is not an integer"):
        env_int("FASTDIST_LAB_TEST_INT")


def test_a_quoted_value_is_one_short_line_whatever_its_size():
    """An error message quotes a value in one line of at most ``QUOTE_LIMIT`` characters, cut before it is written out
    (a YAML anchor bomb, a megabyte line, an integer Python refuses to write); a short plain name stays as it is."""
    huge = [[["lol"] * 10] * 10] * 10
    for value in (huge, "x" * 10**6, 10**5000, "a\nb\u2028c", b"\x00" * 10**6):
        text = quoted(value)
        assert len(text) <= QUOTE_LIMIT and text.isprintable(), text
    with pytest.raises(LayoutError, match=r"^seed=\[\[\['lol', .*\.\.\. must be an integer$"):
        check_int("seed", huge)
    with pytest.raises(LayoutError, match=r"^seed=<an integer of about 5,001 digits> must be <= 10$"):
        check_int("seed", 10**5000, maximum=10)
    assert clipped("tensor_paralel") == "tensor_paralel" and clipped("a\nb") == "'a\\nb'"
    assert clipped("k" * 1000).startswith("'kkk") and len(clipped("k" * 1000)) == QUOTE_LIMIT


def test_a_log_is_read_from_its_end_and_never_more_than_the_limit(tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes(b"x" * (10 * MAX_LOG_BYTES) + "the last line \u00e9\n".encode() + b"\xff")
    tail = read_tail(log)
    assert tail.startswith(f"[... {9 * MAX_LOG_BYTES + 18:,} bytes before]\n") and tail.endswith("\u00e9\n\ufffd")
    assert len(tail.split("\n", 1)[1].encode("utf-8", "replace")) <= MAX_LOG_BYTES + 2  # U+FFFD: 3 bytes for 1
    assert read_tail(log, 6) == "[... 655,372 bytes before]\ne \u00e9\n\ufffd"
    log.write_text("stack of rank 0\nstack of rank 1\n")
    assert read_tail(log, start=16) == "stack of rank 1\n"  # from an offset: what came after it
    assert read_tail(tmp_path / "missing.log") == ""
