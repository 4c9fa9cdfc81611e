"""``python -m fastdist_lab.worker``: verify a layout with real process groups under torchrun (any number of nodes).

Example: ``torchrun --nproc-per-node 8 -m fastdist_lab.worker --tp 2 --pp 2 --sdp 2 --report out.json``.

Every rank builds ``Distributed`` for the layout, checks each group with real collectives and its generator seeds,
and sends its result to rank 0 through the launcher's store; rank 0 prints the verification table and writes the
JSON report (``fastdist_lab.load_report`` reads it). Exit code 0 when every group passed, 1 when one failed, 2 for
bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .commands.common import add_layout_arguments, layout_from_args
from .config import DistributedConfig, LayoutError
from .runtime.errors import BackendUnavailable, ClusterError
from .runtime.pool import resolve_backend
from .runtime.torchrun import verify_this_rank

PROG = "python -m fastdist_lab.worker"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="verify a layout with real process groups on every rank (run under torchrun)"
    )
    add_layout_arguments(parser)
    parser.set_defaults(world_size=None)
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for the rendezvous and each collective")
    parser.add_argument("--report", default=None, help="write the JSON report here (rank 0)")
    return parser


def _fail(message: str) -> int:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Verify the layout of the flags on this rank; see the module docstring."""
    args = _parser().parse_args(argv)
    env_world = DistributedConfig.default_world_size()
    if args.world_size is None:
        args.world_size = env_world
    elif "WORLD_SIZE" in os.environ and args.world_size != env_world:
        return _fail(f"--world-size={args.world_size} but WORLD_SIZE={env_world}")
    if args.local_world_size is None:
        args.local_world_size = DistributedConfig.default_local_world_size()
    if not args.timeout > 0:
        return _fail(f"--timeout={args.timeout} must be > 0")
    try:
        backend = resolve_backend(args.backend, args.local_world_size)
        layout = layout_from_args(args, backend=backend, timeout=args.timeout)
    except BackendUnavailable as error:
        return _fail(f"{error} (--backend {error.alternative})")
    except (LayoutError, ClusterError) as error:
        return _fail(str(error))
    record, verification = verify_this_rank(layout, args.timeout)
    if verification is None:
        return 0 if record.ok else 1
    if args.report:
        verification.save(args.report)
    print(verification.to_text())
    return 0 if verification.ok else 1


if __name__ == "__main__":
    sys.exit(main())
