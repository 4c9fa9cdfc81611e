"""The runtime's side of a job started by a launcher (torchrun, any number of nodes): this rank verifies a layout.

``verify_this_rank`` builds the pool from ``env://``, applies the layout and runs the same per-rank checks as a
local cluster's ``apply`` (all-gather and all-reduce in every group, generator seeds); rank 0 gathers every rank's
result through the launcher's store and returns the ``Verification``. The command line around it is
``python -m fastdist_lab.worker``.
"""

from __future__ import annotations

import json
import time

from ..config import DistributedConfig
from ..layout import Layout
from .channel import outcome_to_result
from .pool import ProcessGroupPool
from .results import RankResult, RankResults
from .verification import Verification
from .verify import rank_coordinates, verification_of
from .worker import RankContext, applier, execute

REPORT_PREFIX = "fastdist_report"
"""Store keys under which each rank leaves its result for rank 0."""


def verify_this_rank(layout: Layout, timeout: float) -> tuple[RankResult, Verification | None]:
    """Verify ``layout`` on this rank of a launched job (rank, world and rendezvous from the environment).

    ``layout.backend`` must already be resolved (``resolve_backend``). Returns this rank's ``RankResult`` and, on
    rank 0, the ``Verification`` of every rank (``None`` on the others).
    """
    rank = DistributedConfig.default_rank()
    use_cpu = layout.backend.value == "gloo"
    begin = time.perf_counter()
    pool = ProcessGroupPool(rank, layout.world_size, layout.local_world_size, timeout, use_cpu, backend=layout.backend)
    ctx = RankContext(rank, layout.world_size, pool)
    try:
        record = outcome_to_result(rank, execute(ctx, applier(layout.fields(), use_cpu), ()))
        records = _gather(pool, record, layout.world_size)
        if records is None:
            return record, None
        results = RankResults(records, rank_coordinates(layout), label="verify", world_size=layout.world_size)
        return record, verification_of(layout, results, time.perf_counter() - begin)
    finally:
        ctx.distributed = None
        pool.shutdown()


def _gather(pool: ProcessGroupPool, record: RankResult, world_size: int) -> list[RankResult] | None:
    """Every rank's result on rank 0 (through the store); ``None`` on the other ranks."""
    store = pool.store
    if store is None:  # a world of one
        return [record]
    store.set(f"{REPORT_PREFIX}/{record.rank}", json.dumps(record.to_dict()))
    if record.rank != 0:
        store.get(f"{REPORT_PREFIX}/done")
        return None
    records = [RankResult.from_dict(json.loads(store.get(f"{REPORT_PREFIX}/{other}"))) for other in range(world_size)]
    store.set(f"{REPORT_PREFIX}/done", "1")
    return records
