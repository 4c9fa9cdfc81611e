"""Benchmark: how long ``import fastdist_lab`` and ``import fastdist_lab.widgets`` take in a fresh interpreter.

Target (issue 19): no slower than before the small top level; the package's own share of the import is what it can
change, so each import is compared with importing only the libraries it stands on, in the same run (the ratio is the
package's overhead). ``import fastdist_lab`` must import neither torch, matplotlib, ipywidgets nor pandas.

Run: python benchmarks/bench_import.py [--repeat N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CASES = {
    "fastdist_lab": "numpy",
    "fastdist_lab.widgets": "numpy, matplotlib.figure, ipywidgets, ipyevents",
}
"""What is imported -> the libraries it stands on (the baseline)."""

PROBE = "import sys, time; t = time.perf_counter(); import {}; print(time.perf_counter() - t, *sorted(sys.modules))"


def seconds(modules: str) -> tuple[float, set[str]]:
    """One import of ``modules`` in a fresh interpreter: seconds, and the modules it loaded."""
    out = subprocess.run([sys.executable, "-c", PROBE.format(modules)], capture_output=True, text=True, check=True)
    took, *names = out.stdout.split()
    return float(took), set(names)


def main() -> None:
    """Print each import's best time, its baseline's, and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    repeat = parser.parse_args().repeat
    for module, baseline in CASES.items():
        ours = base = float("inf")
        for _ in range(repeat):  # interleaved, so that a busy machine slows both alike
            took, loaded = seconds(module)
            ours, base = min(ours, took), min(base, seconds(baseline)[0])
        heavy = sorted(name for name in ("torch", "matplotlib", "ipywidgets", "pandas") if name in loaded)
        print(f"import {module}: {ours * 1000:.0f} ms (best of {repeat}); {baseline}: {base * 1000:.0f} ms; "
              f"ratio {ours / base:.2f}; heavy libraries loaded: {', '.join(heavy) or 'none'}")  # fmt: skip


if __name__ == "__main__":
    main()
