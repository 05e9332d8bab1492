"""The `isr` command (README, "Commands"): gathers the commands of
isr/commands/, one module each with its parser and its function."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from isr import __version__, signals

# Exit codes: 0 done, 1 the job failed, 2 a user's mistake (one line),
# 3 replay or verify accepted no event at all, 130 stopped by Ctrl-C / SIGTERM.


def build_parser() -> argparse.ArgumentParser:
    from isr.commands import (check_config, demo, files, replay, run, schema, simulate, tap,
                              verify)

    commands = (replay, run, demo, simulate, tap, verify, schema, files, check_config)  # --help's
    parser = argparse.ArgumentParser(
        prog="isr",
        description="Kafka ISR monitor: re-computes each partition leader's ISR decisions "
                    "from replica fetch-state events.")
    parser.add_argument("--version", action="version", version=f"isr {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands:
        command.add_parser(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    # Signals are handled from the first line: importing the commands takes
    # seconds on a busy machine, and a SIGTERM then must not kill (-15).
    try:
        with signals.handled("isr"):
            return _main(argv)
    except KeyboardInterrupt:
        return 130


def _main(argv: Optional[Sequence[str]]) -> int:
    from isr.commands.options import command_label
    from isr.config import ConfigError

    args = build_parser().parse_args(argv)
    label = command_label(args)
    try:
        with signals.handled(label):  # SIGTERM stops the command as Ctrl-C does
            return args.func(args)
    except ConfigError as exc:
        print(f"{label}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except OSError as exc:  # a file the user named, going wrong during the work
        where = f": {exc.filename}" if exc.filename else ""
        print(f"{label}: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
