"""What each rank of a running cluster says about itself: run on every rank, read in a table.

These functions travel to the workers by reference (cloudpickle pickles importable functions by name), so this
module stays light: importing it on a worker imports nothing beyond the package's lower layers.
"""

from __future__ import annotations

import os
from typing import Any


def rank_summary(ctx: Any) -> str:
    """Run on every rank after ``apply``: prints the rank's coordinates; returns the sizes of its real groups."""
    config, dist = ctx.config, ctx.distributed
    groups = {name: dist.group(name) for name in ("tensor", "pipeline", "data")}
    sizes = [f"{name} group {1 if group is None else group.size()}" for name, group in groups.items()]
    print(f"rank {ctx.rank} (pid {os.getpid()}): t{config.tensor_rank} d{config.data_rank} p{config.pipeline_rank}")
    return ", ".join(sizes)
