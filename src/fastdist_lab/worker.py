"""``python -m fastdist_lab.worker``: verify a layout with real process groups under torchrun (any number of nodes).

Example: ``torchrun --nproc-per-node 8 -m fastdist_lab.worker --tp 2 --pp 2 --sdp 2 --report out.json``.
See ``fastdist_lab.runtime.worker.main`` for the flags; ``fastdist_lab.load_report`` reads the report.
"""

from __future__ import annotations

import sys


def main() -> int:
    """Entry point: delegate to the runtime's worker main."""
    from .runtime.worker import main as runtime_main

    return runtime_main()


if __name__ == "__main__":
    sys.exit(main())
