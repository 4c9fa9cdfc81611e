"""``python -m fastdist_lab.worker``: verify a layout with real process groups under torchrun (any number of nodes).

Example: ``torchrun --nproc-per-node 8 -m fastdist_lab.worker --tp 2 --pp 2 --sdp 2 --report out.json``.

The same checks as ``fastdist-lab check`` (``checks.check_layout``), rank 0 driving the others through the
launcher's store (``runtime.torchrun.LaunchedCluster``): every rank builds ``Distributed`` for the layout and checks
each group as its pool holds it, then with real collectives, and its generator seeds; then every rank's real
generator streams are drawn and compared with the prediction. Rank 0 prints the result and writes the group
verification as a JSON report (``fastdist_lab.runtime.load_report`` reads it). Exit code 0 when everything matched,
1 when something failed, 2 for bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .checks import check_layout
from .cli import OneLineParser, unrecognized
from .commands.flags import add_layout_arguments, layout_from_args
from .config import DistributedConfig
from .errors import BackendUnavailable, ClusterError, LayoutError
from .formatting import first_line
from .runtime.backends import resolve_backend
from .runtime.torchrun import LaunchedCluster

PROG = "python -m fastdist_lab.worker"


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG, description="verify a layout with real process groups on every rank (run under torchrun)"
    )
    add_layout_arguments(parser, launcher=True)
    parser.add_argument(
        "--backend", choices=("auto", "gloo", "nccl"), default="auto", help="auto: NCCL with a GPU per rank, else gloo"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for the rendezvous and each collective")
    parser.add_argument("--report", default=None, help="write the JSON report here (rank 0)")
    return parser


def _fail(message: str) -> int:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Verify the layout of the flags on this rank; see the module docstring."""
    parser = _parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        parser.error(unrecognized(extras, parser))
    for name, variable, default in (
        ("world_size", "WORLD_SIZE", DistributedConfig.default_world_size),
        ("local_world_size", "LOCAL_WORLD_SIZE", DistributedConfig.default_local_world_size),
    ):
        from_env = default()  # torchrun's variable, read where every default of the project reads it
        if getattr(args, name) is None:
            setattr(args, name, from_env)
        elif variable in os.environ and getattr(args, name) != from_env:
            return _fail(f"--{name.replace('_', '-')}={getattr(args, name)} but {variable}={from_env}")
    if not args.timeout > 0:
        return _fail(f"--timeout={args.timeout} must be > 0")
    try:
        backend = resolve_backend(args.backend, args.local_world_size)
        layout = layout_from_args(args, experts=True, backend=backend, timeout=args.timeout)
    except BackendUnavailable as error:
        return _fail(f"{error} (--backend {error.alternative})")
    except (LayoutError, ClusterError) as error:
        return _fail(str(error))
    try:
        cluster = LaunchedCluster(layout, args.timeout)
    except ValueError as error:  # the launcher's environment is incomplete (no MASTER_ADDR, ...)
        return _fail(first_line(error))
    except BackendUnavailable as error:
        return _fail(f"{error} (--backend {error.alternative})")
    except RuntimeError as error:  # the rendezvous failed (torch's store errors are RuntimeErrors)
        sys.stderr.write(f"{PROG}: rendezvous failed: {first_line(error)}\n")
        return 1
    with cluster:
        try:
            if cluster.rank != 0:
                cluster.serve()
                return 0
            result = check_layout(cluster, layout, timeout=args.timeout)
        except ClusterError as error:  # a serving rank's error names its rank; rank 0's is the check's
            sys.stderr.write(f"{PROG}: {'' if cluster.rank else 'check failed: '}{error}\n")
            return 1
    if args.report:
        result.verification.save(args.report)
    print(result.to_text(verbose=True))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
