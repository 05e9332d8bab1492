"""`isr replay`: JSON-lines event files in, decisions out (isr/pipeline/local.py)."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext
from typing import Optional, Sequence

from rich.console import Console

from isr.commands import options
from isr.config import ConfigError

# Exit code: replay accepted no event at all (cli.py lists them all).
NOTHING_ACCEPTED = 3


def add_parser(sub) -> None:
    p = sub.add_parser("replay", help="apply a bounded event file and print the decisions",
                       description="Apply JSON-lines event files (or - for stdin) to the leader "
                                   "model and write decisions as JSON lines: isr_change (and "
                                   "isr_propagation in zk mode) in event-time order, then the "
                                   "final partition_state of every partition. A summary goes "
                                   "to stderr.")
    p.add_argument("events", nargs="+", metavar="EVENTS", help="JSON-lines file(s), - for stdin")
    p.add_argument("--policy", metavar="P[,P...]",
                   help="kafka, kip16, legacy, kip501; several run side by side")
    p.add_argument("--engine", choices=["local", "spark"], default="local",
                   help="local: the leader model in this process (default); spark: the "
                        "streaming job over the file (Trigger.AvailableNow), same decisions")
    p.add_argument("--merge", action="store_true",
                   help="interleave the files by ts (the outputs of several `isr tap`s) instead "
                        "of reading them one after the other")
    p.add_argument("--output", "-o", metavar="FILE", help="decisions file (default: stdout)")
    p.add_argument("--dead-letters", metavar="FILE",
                   help="write rejected input lines here as dead_letter records")
    p.add_argument("--no-state", action="store_true",
                   help="omit the final partition_state records")
    p.add_argument("--report", metavar="DIR",
                   help="what-if report: whatif.md, whatif.json and isr_size.png (ISR size over "
                        "time per policy where the policies differ) in DIR")
    p.add_argument("--quiet", "-q", action="store_true", help="no summary or progress on stderr")
    options.add_config_options(p)
    p.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    from isr.console import RichProgress, print_summary
    from isr.pipeline.local import replay, write_jsonl

    from isr import preflight

    extra = [f"monitor.policy={args.policy}"] if args.policy else []
    preflight.readable_inputs(args.events)
    settings = options.settings(args, extra, _settings_beside(args.events, args.quiet))
    preflight.writable_file(args.output, "--output")
    preflight.writable_file(args.dead_letters, "--dead-letters")
    if args.report:
        preflight.writable_dir(args.report, "--report")
    err = Console(stderr=True)
    if not err.is_terminal:
        err.width = 120  # piped stderr: do not squeeze the summary into 80 columns
    show_progress = not args.quiet and err.is_terminal
    if args.engine == "spark":
        if args.merge:
            raise ConfigError("--merge reads the files in this process: use --engine local")
        if args.report:
            raise ConfigError("--report follows the models in this process: use --engine local")
        from isr.stream.replay_spark import replay_spark
        from isr.stream.running import stopping_our_jvm
        with stopping_our_jvm():
            result = replay_spark(args.events, settings)
    else:
        with (RichProgress(err) if show_progress else nullcontext()) as progress:
            result = replay(args.events, settings.monitor, progress, whatif=bool(args.report),
                            merge=args.merge, max_line_bytes=settings.input.max_line_bytes,
                            states=not args.no_state)
    out_cm = open(args.output, "wb") if args.output not in (None, "-") else nullcontext(
        sys.stdout.buffer)
    with out_cm as out:
        write_jsonl(result.decisions, out)
        if not args.no_state:
            write_jsonl(result.states, out)
        out.flush()
    if args.dead_letters:
        with open(args.dead_letters, "wb") as dl:
            write_jsonl(result.dead_letters, dl)
    elif result.dead_letters and not args.quiet:
        for d in result.dead_letters[:5]:
            err.print(f"dead letter {d.source}:{d.offset}: {d.reason}", markup=False)
        if len(result.dead_letters) > 5:
            err.print(f"... {len(result.dead_letters) - 5} more (use --dead-letters FILE)")
    if not args.quiet:
        print_summary(result, err, settings.monitor.replica_lag_time_max_ms)
    if args.report:
        from isr.console import print_whatif
        from isr.engine.whatif import write_report

        assert result.whatif is not None  # replay(whatif=True) above
        written = write_report(result.whatif, result.whatif_rows, args.report, args.events)
        if not args.quiet:
            print_whatif(result, err)
            err.print("report: " + ", ".join(str(p) for p in written), highlight=False)
    if result.stats.lines and not result.stats.accepted:
        print(f"isr replay: none of the {result.stats.lines} input lines was accepted "
              f"(exit code {NOTHING_ACCEPTED})", file=sys.stderr)
        return NOTHING_ACCEPTED
    return 0


def _settings_beside(events: Sequence[str], quiet: bool) -> Optional[dict]:
    """An example's own settings travel with it: `X.toml` beside `X.jsonl`
    (examples/), applied over the config file and under --policy / --set,
    and said in one line."""
    import tomllib
    from pathlib import Path

    from isr.config import flat_keys

    merged: dict = {}
    for name in events:
        sidecar = Path(name).with_suffix(".toml")
        if name == "-" or sidecar == Path(name) or not sidecar.is_file():
            continue
        try:
            table = tomllib.loads(sidecar.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:
            raise ConfigError(f"{sidecar} (the settings beside {name}): {exc}") from None
        merged.update(table)
        if not quiet:
            shown = ", ".join(f"{k} = {json.dumps(v)}" for k, v in flat_keys(table))
            print(f"isr replay: settings from {sidecar}, beside the events: {shown} "
                  "(--policy and --set win)", file=sys.stderr)
    return merged or None
