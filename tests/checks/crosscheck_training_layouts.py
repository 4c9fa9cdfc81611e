"""Every layout of up to 16 ranks with tensor, pipeline, sequence-data and data factors in {1, 2, 4} trains like one
process: ``check_training`` on a simulated world of threads for each, with and without sequence-tensor parallelism,
data-first and pipeline-first, under each of torch's schedules (770 cases; ZeRO stage, recompute and micro-batch
size vary).

Not collected by pytest (about 13 minutes on 2 cores): the test suite draws a sample of these cases with
hypothesis (``test_train_step.py``). Run::

    python tests/checks/crosscheck_training_layouts.py [--tolerance 1e-5]

Exit status 0 when every case agrees within the tolerance, 1 (listing the cases that do not) otherwise; the last
line gives the largest relative error seen.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

from fastdist_lab import Layout, SimulatedCluster
from fastdist_lab.checks import TinyGPT, check_training
from fastdist_lab.cost import SCHEDULE_KINDS, SCHEDULES, Training

FACTORS = (1, 2, 4)


def cases() -> list[tuple[Layout, str]]:
    """(layout, schedule) for every layout of at most 16 ranks and every schedule."""
    out = []
    for tp, pp, sdp, bdp in itertools.product(FACTORS, repeat=4):
        world = tp * pp * sdp * bdp
        if world > 16:
            continue
        for stp, first, schedule in itertools.product((False, True), (False, True), SCHEDULES):
            if stp and tp == 1:
                continue
            layout = Layout(world_size=world, tensor_parallel=tp, pipeline_parallel=pp, sequence_data_parallel=sdp,
                            sequence_tensor_parallel=stp, pipeline_first=first, backend="gloo")  # fmt: skip
            out.append((layout, schedule))
    return sorted(out, key=lambda case: case[0].world_size)


def main(argv: list[str] | None = None) -> int:
    """Run every case; 0 when all agree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args(argv)
    worlds: dict[int, SimulatedCluster] = {}
    failed, worst, begin = [], 0.0, time.perf_counter()
    try:
        for index, (layout, schedule) in enumerate(cases()):
            cluster = worlds.get(layout.world_size)
            if cluster is None:
                cluster = worlds[layout.world_size] = SimulatedCluster(layout.world_size, progress=False)
            multi = SCHEDULE_KINDS[schedule].multi_stage
            model = TinyGPT(layers=8) if multi and layout.pipeline_parallel == 4 else None
            training = Training(schedule=schedule, virtual_pipeline_stages=2 if multi else 1, zero_stage=index % 4,
                                num_microbatches=2 * layout.pipeline_parallel, micro_batch_size=1 + (index % 3 == 0),
                                recompute=("none", "selective", "full")[index % 3])  # fmt: skip
            check = check_training(cluster, layout, training=training, model=model, tolerance=args.tolerance)
            worst = max(worst, float(check.table[["grad_rel", "weight_rel"]].max().max()))
            if not check.ok:
                failed.append(f"{layout!r} {schedule}: {check.problems[0]}")
                print(failed[-1], flush=True)
    finally:
        for cluster in worlds.values():
            cluster.close()
    total = len(cases())
    print(f"{total - len(failed)} of {total} cases agree within {args.tolerance:g}; largest relative error "
          f"{worst:.1e}; {time.perf_counter() - begin:.0f} s")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
