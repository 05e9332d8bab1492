"""Scenario files (`isr/sim/scenarios/*.toml`, shipped in the package): a cluster, its traffic, its
faults, and what an operator should see under each policy.

Times in a scenario are milliseconds relative to its start (`at_ms`); the
simulator adds `start_ts`. Every setting has Kafka's default where Kafka has
one, under Kafka's name in snake case.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from isr.config import ConfigError, PolicyName

# The scenarios shipped with the package (isr/sim/scenarios, package data);
# $ISR_SCENARIO_DIR points elsewhere.
SCENARIO_DIR = Path(os.environ.get("ISR_SCENARIO_DIR")
                    or Path(__file__).resolve().parent / "scenarios")

Ms = Annotated[int, Field(ge=0)]
PositiveMs = Annotated[int, Field(gt=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Workload(_Strict):
    """How the leader's log grows. `steady`: `messages` every `interval_ms`;
    `tiny`: the same with small, frequent produces (KAFKA-4485's mirror
    makers); `bursty`: steady plus `burst_messages` per produce during
    `burst_ms` out of every `burst_every_ms`; `idle`: nothing is produced."""

    kind: Literal["steady", "tiny", "bursty", "idle"] = "steady"
    interval_ms: PositiveMs = 100
    messages: Annotated[int, Field(ge=1)] = 10
    jitter_ms: Ms = 0  # each gap is interval_ms ± a seeded random jitter
    burst_every_ms: PositiveMs = 60000
    burst_ms: Ms = 1000
    burst_messages: Annotated[int, Field(ge=1)] = 1000


class Topic(_Strict):
    name: Annotated[str, Field(min_length=1, max_length=249)]
    partitions: Annotated[int, Field(ge=1)] = 1
    replication_factor: Annotated[int, Field(ge=1)] = 3
    min_insync_replicas: Optional[Annotated[int, Field(ge=1)]] = None
    workload: Workload = Workload()
    # `round-robin`: replicas on consecutive brokers; `kafka`: Kafka's own
    # rack-unaware placement, whose follower shift grows every len(brokers)
    # partitions, so every broker pair shares partitions (isr/sim/cluster.py)
    placement: Literal["round-robin", "kafka"] = "round-robin"


class Timing(_Strict):
    """Broker settings that shape what the leader observes."""

    replica_fetch_wait_max_ms: PositiveMs = 500   # long poll of a caught-up follower
    replica_fetch_max_messages: Annotated[int, Field(ge=1)] = 100_000  # bounded fetch size
    replica_fetch_backoff_ms: PositiveMs = 1000   # after a failed fetch
    fetch_rtt_ms: Ms = 2                          # request + response network time
    fetch_jitter_ms: Ms = 1
    replica_lag_time_max_ms: PositiveMs = 30000   # the cluster's own ISR notion (for HW / elections)
    broker_session_timeout_ms: PositiveMs = 9000  # KRaft: a silent broker is fenced after this
    unfence_delay_ms: Ms = 500                    # registration until the controller unfences
    controlled_shutdown_ms: Ms = 1000             # controlled shutdown until the process stops
    initial_broker_epoch: Annotated[int, Field(ge=0)] = 10


FaultKind = Literal["gc_pause", "stuck_follower", "slow_follower", "crash", "slow_leader",
                    "failover", "fence", "controlled_shutdown"]


# Faults that act as time windows (the others are one-off transitions).
WINDOW_FAULTS = ("gc_pause", "stuck_follower", "slow_follower", "slow_leader")


class Fault(_Strict):
    """One fault. `gc_pause`: the whole broker stops (no fetches sent, none
    served, no appends as leader). `stuck_follower`: its fetcher sends
    nothing (optionally for one topic / partition). `slow_follower`: extra
    round-trip time and a smaller fetch size. `crash`: the process dies and
    restarts after `duration_ms` with a new broker epoch, truncated to its
    HW; the controller fences it after the session timeout and moves its
    leaderships. `slow_leader`: the broker takes `serve_ms` to serve each
    fetch it receives (KIP-501). `failover`: leadership of a partition moves
    to the next replica (`hw_behind`: the new leader starts at its own,
    older HW). `fence`: the controller fences a live broker for `duration_ms`.
    `controlled_shutdown`: a clean restart taking `duration_ms`."""

    kind: FaultKind
    at_ms: Ms
    duration_ms: Ms = 0
    broker: Optional[int] = None
    topic: Optional[str] = None
    partition: Optional[int] = None
    serve_ms: Ms = 0
    extra_rtt_ms: Ms = 0
    fetch_max_messages: Optional[Annotated[int, Field(ge=1)]] = None
    hw_behind: bool = True
    # gc_pause, stuck/slow follower, slow_leader: the window recurs this often.
    repeat_every_ms: Optional[PositiveMs] = None

    @model_validator(mode="after")
    def _needs_target(self):
        if self.kind == "failover":
            if self.topic is None or self.partition is None:
                raise ValueError("a failover names its topic and partition")
        elif self.broker is None:
            raise ValueError(f"a {self.kind} fault names its broker")
        if self.repeat_every_ms is not None:
            if self.kind not in WINDOW_FAULTS:
                raise ValueError(f"a {self.kind} fault cannot repeat")
            if self.repeat_every_ms <= self.duration_ms:
                raise ValueError("repeat_every_ms must be longer than duration_ms")
        return self


class Expectation(_Strict):
    """What the monitor must decide under one policy (checked by the tests).
    Unset fields are not checked; times are relative to the scenario start."""

    see: str = ""  # what an operator sees, in one or two sentences
    shrinks: Optional[int] = None          # leader-driven shrinks
    expands: Optional[int] = None
    controller_removals: Optional[int] = None
    shrink_at_ms: Optional[list[int]] = None   # every leader-driven shrink, in order
    min_isr_size: Optional[int] = None     # smallest ISR any partition had
    final_isr_size: Optional[int] = None   # every partition's ISR size at the end


class Scenario(_Strict):
    name: str
    title: Annotated[str, Field(min_length=1, max_length=100)]  # one line, for --list
    description: str
    seed: int = 1
    # A multiple of 30 s, so check instants fall on round offsets from the start.
    start_ts: Ms = 1_700_000_010_000
    duration_ms: PositiveMs = 60000
    cluster: str = "default"
    brokers: list[int] = [1, 2, 3]
    timing: Timing = Timing()
    topics: Annotated[list[Topic], Field(min_length=1)]
    faults: list[Fault] = []
    # Monitor settings this scenario is meant to be watched with (`--set` pairs
    # for `isr replay`, e.g. replica_lag_time_max_ms = 10000).
    monitor: dict[str, int | str] = {}
    expect: dict[PolicyName, Expectation] = {}

    @model_validator(mode="after")
    def _consistent(self):
        if len(set(self.brokers)) != len(self.brokers) or not self.brokers:
            raise ValueError("brokers must be distinct ids, at least one")
        for t in self.topics:
            if t.replication_factor > len(self.brokers):
                raise ValueError(f"topic {t.name}: replication factor {t.replication_factor} "
                                 f"> {len(self.brokers)} brokers")
        for f in self.faults:
            if f.broker is not None and f.broker not in self.brokers:
                raise ValueError(f"fault {f.kind} names unknown broker {f.broker}")
        return self

    def monitor_overrides(self) -> list[str]:
        """The scenario's monitor settings as `--set` items."""
        return [f"monitor.{k}={v}" for k, v in self.monitor.items()]


def scenario_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


def load_scenario(name_or_path: str, duration_ms: Optional[int] = None,
                  seed: Optional[int] = None) -> Scenario:
    """A scenario by name (isr/sim/scenarios/NAME.toml) or path; ConfigError on
    anything wrong, phrased as one line."""
    path = Path(name_or_path)
    if not path.suffix:
        path = SCENARIO_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise ConfigError(f"no scenario {name_or_path!r}; known: {', '.join(scenario_names())}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    data.setdefault("name", path.stem)
    if duration_ms is not None:
        data["duration_ms"] = duration_ms
    if seed is not None:
        data["seed"] = seed
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "scenario"
        raise ConfigError(f"{path}: {where}: {err['msg']}") from None
