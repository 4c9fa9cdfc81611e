"""``UnitFrame``: a pandas DataFrame that keeps its numbers and shows them in units.

The package's tables of bytes, seconds, bandwidths and parameter counts (``CostReport.memory``, ``.communication``,
``.time()``, ``compare``, the replay and bandwidth frames) are ``UnitFrame``s: every value stays a number (sort,
sum, plot, ``to_csv`` and ``to_dict`` see raw bytes and seconds), and what a person sees is formatted: the
notebook display (``_repr_html_``) and ``repr`` show ``formatting.column_unit``'s unit per column (``6.28 GiB``,
``14.97 ms``, ``4.31 B``, ``450 GB/s``); ``to_text(width)`` is the same as text, wide tables split into blocks of
at most ``width`` characters (the CLI prints them at 120); ``formatted()`` is the shown table as a plain DataFrame
of text. Imported only where a table is built, so ``import fastdist_lab`` stays free of pandas.
"""

from __future__ import annotations

import pandas as pd

from .formatting import TEXT_WIDTH, column_unit, format_value


class UnitFrame(pd.DataFrame):
    """A DataFrame of numbers whose display formats each column in its unit (see the module docstring).

    Everything a DataFrame does works unchanged, and frames derived from it (a selection, a sort, a copy) are
    ``UnitFrame``s too; ``pd.DataFrame(frame)`` gives a plain DataFrame.
    """

    @property
    def _constructor(self) -> type[UnitFrame]:
        return UnitFrame

    def formatted(self) -> pd.DataFrame:
        """The table as shown: a plain DataFrame in which every column with a unit is text in that unit."""
        shown = pd.DataFrame(self, copy=True)
        for position, name in enumerate(shown.columns):
            unit = column_unit(str(name))
            column = shown.iloc[:, position]
            if unit is not None and pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
                shown.isetitem(position, column.map(lambda value, unit=unit: format_value(value, unit)))
        return shown

    def to_text(self, width: int = TEXT_WIDTH, index: bool = True) -> str:
        """The formatted table as text; a table wider than ``width`` is split into blocks of columns."""
        return self.formatted().to_string(index=index, line_width=width)

    def __repr__(self) -> str:
        return repr(self.formatted())

    def _repr_html_(self) -> str | None:
        return self.formatted()._repr_html_()
