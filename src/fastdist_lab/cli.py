"""The fastdist-lab command line: layout, check, streams, cost, search and train-step.

Bad input prints one line on stderr naming the problem and exits with code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import re
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


class DefaultsOnceFormatter(argparse.HelpFormatter):
    """Help that shows each flag's default once: ``(default: X)`` is added where the help does not already say
    what the default is, and never for a default of ``None``, ``False`` or ``[]`` (a flag that is off, a value
    computed when absent, a repeatable flag: its help says how)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        nothing = default is None or default is False or default is argparse.SUPPRESS or default == []
        if "default" in text or nothing or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit code 2, and whose help shows each default
    once."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", DefaultsOnceFormatter)
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
        command.set_defaults(run_command=module.run, command_parser=command)
    return parser


def unrecognized(extras: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """The error for arguments ``parser`` does not know: the first unknown flag with the closest flag it has, as
    for a misspelt field in a YAML config or in ``Layout(...)``."""
    flags = list(dict.fromkeys(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", parser.format_help())))
    for word in extras:
        if word.startswith("-"):
            flag = word.partition("=")[0]
            close = difflib.get_close_matches(flag, flags, n=1, cutoff=0.75)
            hint = f" (did you mean {close[0]}?)" if close else ""
            return f"unrecognized argument {flag}{hint}"
    return f"unrecognized argument {extras[0]!r}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    args, extras = build_parser().parse_known_args(argv)
    if extras:
        args.command_parser.error(unrecognized(extras, args.command_parser))
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
