"""Benchmark of the first ``fastdist_lab.lab()`` call in a fresh interpreter (what a new notebook pays).

Target: the first ``lab()`` builds every panel without importing torch in the calling thread (< 2 s on a laptop CPU;
its prewarm imports torch in a background thread once the panels are built). The streams panel
predicts the streams at once; the prediction is computed in closed form on the CPU and is confirmed against torch's
generator only once torch is imported anyway (``streams.predict``), so the first call no longer pays for importing
torch, which took most of its 5.4 s.

Baseline, measured in the same run: the same first call in a fresh interpreter that also imports torch inside the
timed section (what the prediction cost when it drew a sample with torch). Each figure is the median of ``--repeat``
fresh interpreters; the ratio is baseline / ours (> 1: ours is faster).

Run: ``python benchmarks/bench_lab.py`` (``--repeat 5`` by default).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

FIRST_CALL = """
import sys, threading, time
seen = []
class Watch:  # which thread imports torch (lab's prewarm may, in the background, once the panels are built)
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            seen.append(threading.current_thread() is threading.main_thread())
sys.meta_path.insert(0, Watch())
import fastdist_lab
start = time.perf_counter()
{extra}
app = fastdist_lab.lab()
took = time.perf_counter() - start
print(took, any(seen))
"""


def first_call(extra: str = "") -> tuple[float, bool]:
    """Seconds of the first ``lab()`` in a fresh interpreter (``extra`` runs inside the timed section first), and
    whether the calling thread imported torch."""
    out = subprocess.run(
        [sys.executable, "-c", FIRST_CALL.format(extra=extra)], capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), out[1] == "True"


def main() -> None:
    """Print the median first-call time, the baseline's and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="fresh interpreters per figure")
    args = parser.parse_args()
    ours, baseline, torch_seen = [], [], set()
    for _ in range(args.repeat):  # interleaved: the machine's load affects both alike
        seconds, imported = first_call()
        ours.append(seconds)
        torch_seen.add(imported)
        baseline.append(first_call("import torch")[0])
    mine, base = statistics.median(ours), statistics.median(baseline)
    print(f"first lab() in a fresh interpreter: {mine:.2f} s")
    print(f"  torch imported by the calling thread: {sorted(torch_seen)}")
    print(f"baseline, the same call paying for import torch: {base:.2f} s")
    print(f"ratio baseline / ours: {base / mine:.1f}x")


if __name__ == "__main__":
    main()
