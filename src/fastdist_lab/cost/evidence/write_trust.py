"""The command that writes the table of validated runs (``trust_table.json``) from the model's own predictions of the
published runs (``accuracy.trust_rows``)::

    python -m fastdist_lab.cost.evidence.write_trust [--check]

``--check`` writes nothing and exits 1 when the table on disk differs from what the model gives now (slow: it prices
every published run); ``trust_table.stale()`` is the quick check.
"""

from __future__ import annotations

import argparse
import sys

from . import trust_table
from .accuracy import trust_rows


def main(argv: list[str] | None = None) -> int:
    """Write (or ``--check``) the table; 0 on success, 1 when ``--check`` finds it differs."""
    parser = argparse.ArgumentParser(prog="python -m fastdist_lab.cost.evidence.write_trust", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare with the table on disk; write nothing")
    args = parser.parse_args(argv)
    rows = [tuple(row) for row in trust_rows()]
    if args.check:
        same = rows == trust_table.table_rows() and not trust_table.stale()
        print(f"{trust_table.TABLE.name}: {'up to date' if same else 'differs from the model: run without --check'}")
        return 0 if same else 1
    trust_table.write(rows)
    print(f"wrote {len(rows)} rows to {trust_table.TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
