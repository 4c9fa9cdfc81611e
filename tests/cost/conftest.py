"""Fixtures of the cost tests: ``validate()``'s table of every published run, computed once for the session (the
files that compare it with their bounds and with the document read it and never change it)."""

from __future__ import annotations

import pandas as pd
import pytest

from fastdist_lab.cost import validate


@pytest.fixture(scope="session")
def validated() -> pd.DataFrame:
    """``validate()`` on ``PUBLISHED_RUNS``, shared by ``test_validation.py`` and ``test_validation_rankings.py``."""
    return validate()
