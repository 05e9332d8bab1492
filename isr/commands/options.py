"""What every command shares: --config and --set, the settings they give, the
command's label in error lines."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from isr.config import Settings, load_settings, unknown_env_vars


def settings(args: argparse.Namespace, extra: Sequence[str] = (),
              base: Optional[dict] = None) -> Settings:
    settings = load_settings(args.config, list(extra) + list(args.set or []), base)
    for line in unknown_env_vars(settings):
        print(line, file=sys.stderr)
    return settings


def add_config_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="PATH",
                   help="TOML configuration (default: $ISR_CONFIG, else conf/isr.toml if present)")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override one setting (repeatable); wins over the file and ISR_* env vars")


def settings_once(args: argparse.Namespace):
    """The settings, loaded (and their warnings printed) once per command."""
    def load() -> Settings:
        if not hasattr(args, "_loaded_settings"):
            args._loaded_settings = settings(args)
        return args._loaded_settings
    return load


def command_label(args: argparse.Namespace) -> str:
    """The command the user ran, as every error line names it: `isr replay`,
    `isr tap server-log`."""
    label = f"isr {args.command}"
    if args.command == "tap":
        label += f" {args.source}"
    return label
