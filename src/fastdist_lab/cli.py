"""The fastdist-lab command line: layout, check, streams, cost, search and train-step.

Bad input prints one line on stderr naming the problem and exits with code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from .commands import check, cost, layout, search, streams, train_step
from .errors import LayoutError

COMMANDS: dict[str, ModuleType] = {
    "layout": layout,
    "check": check,
    "streams": streams,
    "cost": cost,
    "search": search,
    "train-step": train_step,
}
"""Sub-command name -> module (each has ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``)."""

USAGE_ERROR = 2

DESCRIPTION = (
    "See, check and compare the parallel layouts of large-model training (tensor, pipeline and sequence-data "
    "parallel), with the numbering and seeds of ServiceNow's Fast-LLM. Run 'fastdist-lab COMMAND --help' for a "
    "command's flags."
)


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit code 2, and whose help shows defaults."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # type: ignore[override]
        """Print ``message`` as one line on stderr and exit with code 2."""
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(USAGE_ERROR)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every sub-command registered."""
    parser = OneLineParser(prog="fastdist-lab", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser, metavar="COMMAND")
    for name, module in COMMANDS.items():
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(run_command=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.run_command(args))
    except LayoutError as error:
        sys.stderr.write(f"fastdist-lab {args.command}: error: {error}\n")
        return USAGE_ERROR
    except KeyboardInterrupt:
        sys.stderr.write(f"fastdist-lab {args.command}: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
