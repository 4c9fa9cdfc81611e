"""The ``fastdist-lab`` command line: ``layout``, ``check`` and ``streams``.

Bad input prints one line on stderr naming the problem and exits with code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .config import LayoutError

COMMANDS: dict[str, str] = {
    "layout": ".commands.layout",
    "check": ".commands.check",
    "streams": ".commands.streams",
    "cost": ".commands.cost",
}
"""Sub-command name -> module (each has ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``)."""

USAGE_ERROR = 2


class _OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(USAGE_ERROR)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every sub-command registered."""
    parser = _OneLineParser(prog="fastdist-lab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(module_name, __package__)
        except ModuleNotFoundError:
            continue
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args))
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
