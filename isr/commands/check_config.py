"""`isr check-config`: validate the configuration and print it."""

from __future__ import annotations

import argparse
import json
import sys

from isr.commands import options
from isr.config import resolve_config_path


def add_parser(sub) -> None:
    p = sub.add_parser("check-config", help="validate the configuration and print it",
                       description="Validate the configuration (file, ISR_* environment, --set) "
                                   "and print the effective settings.")
    options.add_config_options(p)
    p.set_defaults(func=cmd_check_config)


def cmd_check_config(args: argparse.Namespace) -> int:
    from isr import preflight
    from isr.config import redacted

    settings = options.settings(args)
    preflight.kafka_client_config(settings)
    path = resolve_config_path(args.config)
    print(json.dumps(redacted(settings.model_dump(mode="json")), indent=2))
    source = f"file {path}" if path else "no file (defaults)"
    print(f"configuration OK: {source}, then ISR_* environment variables, then --set "
          "(secrets shown as ***)", file=sys.stderr)
    return 0
