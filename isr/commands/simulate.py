"""`isr simulate`: run a scenario and send its events to a topic or a file."""

from __future__ import annotations

import argparse
import itertools
import math
import time
from typing import TYPE_CHECKING, Callable, Iterator, Optional

from rich.console import Console

from isr.commands import options
from isr.config import ConfigError, Settings

if TYPE_CHECKING:
    from isr.sim.output import Sent
    from isr.sim.scenario import Scenario
# The simulator is imported where it runs: `isr --help` loads every command's module.

KAFKA_PREFIX = "kafka://"


def starting_now(scenario: Scenario) -> Scenario:
    """Live: event time is wall-clock time, from the next whole second on."""
    return scenario.model_copy(update={"start_ts": int(math.ceil(time.time())) * 1000})


def live_events(scenario: Scenario) -> Iterator[dict]:
    """The scenario without end, each event released when its ts comes. Per
    partition: the demo's Spark job reads these (it does not apply
    fetch_session yet)."""
    from isr.sim.cluster import PARTITION, Simulator
    from isr.sim.output import in_real_time

    return in_real_time(Simulator(starting_now(scenario), -1, grain=PARTITION).events())


def feed_live(scenario: Scenario, producer, topic: str, stop: Callable[[], bool]) -> int:
    """Produce the scenario in real time until `stop()`; returns events sent."""
    from isr.sim.output import produce

    events = itertools.takewhile(lambda _ev: not stop(), live_events(scenario))
    return produce(events, producer, topic).events


def list_scenarios(console: Console) -> None:
    from rich.table import Table

    from isr.sim.scenario import load_scenario, scenario_names

    table = Table(box=None, show_header=False, pad_edge=False)
    for name in scenario_names():
        sc = load_scenario(name)
        watch = " ".join(f"--set {s}" for s in sc.monitor_overrides())
        table.add_row(f"[bold]{name}[/]", sc.title + (f" [dim](watch with {watch})[/]" if watch else ""))
    console.print(table)


def simulate(scenario_name: str, to: str, rate: Optional[float], duration_s: Optional[float],
             seed: Optional[int], partitions: int, settings_factory, console: Console,
             show_progress: bool, forever: bool = False, grain: str = "session") -> Sent:
    """Returns what was sent; `settings_factory()` gives the Kafka settings
    (only called when producing to Kafka). `forever`: the scenario in real
    time without end (its faults repeat as they are written), for a demo or
    a docker-compose stack that must keep running. `grain`: `session` (one
    fetch_session per follower FETCH, as a real cluster) or `partition`
    (one fetch per partition fetch, isr/sim/cluster.py)."""
    from isr.sim.cluster import Simulator
    from isr.sim.output import write_file
    from isr.sim.scenario import load_scenario

    to_kafka = to.startswith(KAFKA_PREFIX)
    if rate is not None and not to_kafka:
        raise ConfigError("--rate paces production to Kafka; a file is written as fast as possible")
    if forever and (not to_kafka or rate is not None or duration_s is not None):
        raise ConfigError("--forever produces to kafka://TOPIC in real time, without --rate or "
                          "--duration")
    if rate is not None and rate <= 0:
        raise ConfigError("--rate must be positive")
    duration_ms = None if duration_s is None else int(duration_s * 1000)
    if rate is not None:  # load generator: the scenario runs until the wall-clock budget ends
        scenario = load_scenario(scenario_name, seed=seed)
        budget_s = duration_s if duration_s is not None else scenario.duration_ms / 1000
        sim_duration = -1
    elif forever:
        scenario = load_scenario(scenario_name, seed=seed)
        budget_s, sim_duration = float("inf"), -1
    else:
        scenario = load_scenario(scenario_name, duration_ms, seed)
        budget_s, sim_duration = scenario.duration_ms / 1000, None
    if to_kafka:
        scenario = starting_now(scenario)
    events = Simulator(scenario, sim_duration, grain=grain).events()
    with _Progress(console, scenario, budget_s, rate, show_progress) as on_progress:
        if not to_kafka:
            sent = write_file(events, to, on_progress)
        else:
            sent = _to_kafka(events, to[len(KAFKA_PREFIX):], rate, budget_s, partitions,
                             settings_factory(), on_progress)
    sent.monitor_overrides = tuple(scenario.monitor_overrides())
    return sent


def _to_kafka(events, topic: str, rate: Optional[float], budget_s: float, partitions: int,
              settings: Settings, on_progress) -> Sent:
    from isr.kafka.client import ensure_topics, producer
    from isr.sim.output import at_rate, in_real_time, produce

    if not topic:
        raise ConfigError("--to kafka://TOPIC needs a topic name")
    from isr import preflight

    conf = preflight.kafka_reachable(settings)
    ensure_topics(conf, [topic], partitions)
    paced = at_rate(events, rate, budget_s) if rate is not None else in_real_time(events)
    p = producer(conf, **{"linger.ms": 20, "batch.num.messages": 10000,
                          "queue.buffering.max.messages": 500000})
    return produce(paced, p, topic, on_progress, rate)


class _Progress:
    """A rich progress line on stderr (simulated time for files, wall time
    when producing), or nothing when stderr is not a terminal."""

    def __init__(self, console: Console, scenario: Scenario, budget_s: float,
                 rate: Optional[float], enabled: bool) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.enabled = enabled
        self.scenario, self.rate, self.budget_s = scenario, rate, budget_s
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 TextColumn("{task.fields[count]} events"), TimeElapsedColumn(),
                                 console=console, transient=True)

    def __enter__(self):
        if not self.enabled:
            return None
        self.progress.start()
        sc = self.scenario
        total = None if self.budget_s == float("inf") else self.budget_s
        task = self.progress.add_task(sc.name, total=total, count=0)
        started = time.monotonic()

        def on_progress(count: int, ts: int) -> None:
            done = (time.monotonic() - started if self.rate is not None
                    else (ts - sc.start_ts) / 1000)
            self.progress.update(task, completed=done, count=count)

        return on_progress

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.progress.stop()


def add_parser(sub) -> None:
    p = sub.add_parser("simulate", help="run a cluster scenario; events to a topic or a file",
                       description="Simulate a Kafka cluster's leader-side observations for a "
                                   "scenario of isr/sim/scenarios (or a TOML path) and write the "
                                   "fetch-state events to a file (as fast as possible) or "
                                   "produce them to Kafka (in real time, or at --rate events/s "
                                   "as a load generator that reports the rate it held).")
    p.add_argument("--scenario", metavar="NAME", help="a name from --list, or a TOML file")
    p.add_argument("--to", metavar="kafka://TOPIC|FILE",
                   help="kafka://TOPIC (brokers from [kafka]), a JSON-lines file, or - for stdout")
    p.add_argument("--rate", type=float, metavar="EVENTS_PER_S",
                   help="load generator: hold this many events/s (Kafka only); the scenario runs "
                        "for --duration seconds of wall time")
    p.add_argument("--duration", type=float, metavar="S",
                   help="seconds to run (default: the scenario's); simulated time, which is "
                        "wall time when producing in real time")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--grain", choices=("session", "partition"), default="session",
                   help="session (default): each follower broker sends one FETCH per leader "
                        "broker, a fetch_session event listing only the partitions whose fetch "
                        "offset changed (KIP-227), as a real cluster; partition: every "
                        "partition's follower fetches on its own, one fetch event each")
    p.add_argument("--forever", action="store_true",
                   help="kafka://TOPIC only: the scenario in real time without end (its "
                        "repeating faults keep coming), until stopped")
    p.add_argument("--partitions", type=int, default=4,
                   help="partitions of the topic if it must be created (default 4)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress or summary")
    options.add_config_options(p)
    p.set_defaults(func=cmd_simulate)


def cmd_simulate(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    if args.list:
        list_scenarios(Console())
        return 0
    if not args.scenario or not args.to:
        raise ConfigError("needs --scenario NAME and --to kafka://TOPIC | FILE "
                          "(--list shows the scenarios)")
    if not args.to.startswith("kafka://"):
        from isr import preflight
        preflight.writable_file(args.to, "--to")
    sent = simulate(args.scenario, args.to, args.rate, args.duration, args.seed,
                    args.partitions, lambda: options.settings(args), err,
                    show_progress=not args.quiet and err.is_terminal, forever=args.forever,
                    grain=args.grain)
    if not args.quiet:
        line = f"{sent.events} events in {sent.seconds:.1f} s ({sent.rate:,.0f} events/s"
        if sent.target_rate:
            line += f"; target {sent.target_rate:,.0f}, held {sent.rate / sent.target_rate:.1%}"
        err.print(line + f") -> {args.to}", highlight=False, soft_wrap=True)
        if sent.monitor_overrides:
            err.print("the scenario is meant to be watched with: "
                      + " ".join(f"--set {o}" for o in sent.monitor_overrides), highlight=False,
                      soft_wrap=True)
    return 0
