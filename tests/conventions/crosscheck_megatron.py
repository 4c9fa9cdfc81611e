"""Cross-check ``fastdist_lab.conventions.Megatron`` against Megatron-Core's own ``RankGenerator``.

Not collected by pytest (Megatron-Core is not a dependency). Run it by hand, e.g.::

    pip download megatron-core --no-deps -d /tmp/mcore
    python -m zipfile -e /tmp/mcore/megatron_core-*.whl /tmp/mcore/ext
    PYTHONPATH=/tmp/mcore/ext python tests/conventions/crosscheck_megatron.py

It enumerates every size combination with tp, cp, ep, dp, pp in 1..3 (ep or cp == 1, as Megatron requires),
several orders each, and every token (non-empty subset of the five tokens, in a shuffled order), and
compares ``get_ranks`` exactly (group order and member order).
"""

from __future__ import annotations

import itertools
import random
import sys
import warnings

from fastdist_lab.conventions import Megatron

TOKENS = ("tp", "cp", "ep", "dp", "pp")


def main(seed: int = 0) -> int:
    warnings.simplefilter("ignore")
    from megatron.core.parallel_state import RankGenerator

    rng = random.Random(seed)
    configurations = comparisons = 0
    for tp, cp, ep, dp, pp in itertools.product(range(1, 4), repeat=5):
        if ep > 1 and cp > 1:
            continue
        sizes = {"tp": tp, "cp": cp, "ep": ep, "dp": dp, "pp": pp}
        orders = {"tp-cp-ep-dp-pp", "tp-pp-cp-ep-dp"}
        for _ in range(3):
            needed = [t for t in TOKENS if sizes[t] > 1]
            extra = [t for t in TOKENS if sizes[t] == 1 and rng.random() < 0.5]
            chosen = needed + extra
            rng.shuffle(chosen)
            if chosen:
                orders.add("-".join(chosen))
        for order in sorted(orders):
            theirs = RankGenerator(tp=tp, ep=ep, dp=dp, pp=pp, cp=cp, order=order)
            ours = Megatron(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, order=order)
            assert ours.order == theirs.order, (ours.order, theirs.order)
            configurations += 1
            for k in range(1, 6):
                for subset in itertools.combinations(TOKENS, k):
                    token = list(subset)
                    rng.shuffle(token)
                    token = "-".join(token)
                    expected = theirs.get_ranks(token)
                    got = ours.get_ranks(token)
                    if got != expected:
                        print(f"MISMATCH sizes={sizes} order={order} token={token}: {got} != {expected}")
                        return 1
                    comparisons += 1
    print(f"identical to Megatron-Core's RankGenerator: {configurations} configurations, {comparisons} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
