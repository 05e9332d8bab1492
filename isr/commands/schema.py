"""`isr schema`: the JSON Schemas of input and output records."""

from __future__ import annotations

import argparse
import json

from isr.config import ConfigError


def add_parser(sub) -> None:
    p = sub.add_parser("schema", help="print the JSON Schemas of input and output records",
                       description="Print the JSON Schema of every input event and output "
                                   "record type, or of one with --type.")
    p.add_argument("--type", metavar="NAME", help="one record type, e.g. fetch or isr_change")
    p.set_defaults(func=cmd_schema)


def cmd_schema(args: argparse.Namespace) -> int:
    from isr.contract import json_schemas

    schemas = json_schemas()
    if args.type:
        merged = {**schemas["input"], **schemas["output"]}
        if args.type not in merged:
            raise ConfigError(f"unknown record type {args.type!r}; one of {sorted(merged)}")
        schemas = merged[args.type]
    print(json.dumps(schemas, indent=2, sort_keys=False))
    return 0
