"""Event builders and a one-call runner for the leader-model tests.

Times are written relative to T0, which is a multiple of every check interval
used here (15 s, 30 s, 5 s, 2.5 s), so check instants are T0 + k * interval.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import isr.engine.local
from isr.config import MonitorSettings
from isr.contract import IsrChange, IsrPropagation, Rejection, validate
from isr.contract.decisions import output_order
from isr.engine.local import LocalEngine
from isr.pipeline.listeners import local_engine

# The domain core compiled by mypyc (scripts/build-native): its classes are
# native, so a test cannot put a function in place of one of their methods
# on an instance, take a weak reference to one, nor copy or pickle one whose
# __init__ needs arguments (nothing but tests does). Such tests run on the
# pure tree (the same source) and are skipped on a compiled one.
COMPILED = not isr.engine.local.__file__.endswith(".py")
pure_only = pytest.mark.skipif(COMPILED,
                               reason="needs what a mypyc-compiled class lacks (build-native)")

T0 = 1_800_000_000_000
TOPIC = "orders"


def event(type: str, t: int, **fields) -> object:
    """A validated event at T0 + t. Partition events default to orders/0,
    leader 1, leader_epoch 1."""
    data = {"v": 1, "type": type, "ts": T0 + t}
    if type != "broker":
        data.update(topic=TOPIC, partition=0, leader=1, leader_epoch=1)
    if "received" in fields:
        fields["received_ts"] = T0 + fields.pop("received")
    data.update(fields)
    ev = validate(data)
    assert not isinstance(ev, Rejection), ev.reason
    return ev


def leader(t: int, replicas=(1, 2, 3), isr=None, start=0, **kw):
    return event("leader", t, replicas=list(replicas),
                 isr=list(replicas if isr is None else isr),
                 leader_epoch_start_offset=start, **kw)


def fetch(t: int, replica: int, offset: int, leo: int, **kw):
    return event("fetch", t, replica=replica, fetch_offset=offset, leader_leo=leo, **kw)


def fetch_start(t: int, replica: int, offset: int, leo: int, **kw):
    return event("fetch_start", t, replica=replica, fetch_offset=offset, leader_leo=leo, **kw)


def append(t: int, leo: int, **kw):
    return event("append", t, leader_leo=leo, **kw)


def broker(t: int, broker_id: int, state: str, epoch: int = 10, cluster: str = "default"):
    return event("broker", t, broker=broker_id, broker_epoch=epoch, state=state,
                 cluster=cluster)


@dataclass
class Result:
    engine: LocalEngine

    @property
    def changes(self) -> list[IsrChange]:
        return [d for d in sorted(self.engine.decisions, key=output_order) if isinstance(d, IsrChange)]

    @property
    def propagations(self) -> list[IsrPropagation]:
        return [d for d in sorted(self.engine.decisions, key=output_order) if isinstance(d, IsrPropagation)]

    def model(self, policy=None, topic: str = TOPIC, partition: int = 0):
        policy = policy or self.engine.policies[0]
        return self.engine.partitions[policy][("default", topic, partition)]

    def state(self, policy=None, topic: str = TOPIC, partition: int = 0):
        return self.model(policy, topic, partition).view()

    def follower(self, replica: int, policy=None):
        return self.model(policy).followers[replica]

    def summary(self, policy=None) -> list[tuple]:
        """(t relative to T0, action, replicas, isr_after, hw) per ISR change."""
        return [(c.ts - T0, c.action, c.replicas, c.isr_after, c.hw) for c in self.changes
                if policy is None or c.policy == policy]


def run(events, policy="kafka", finish=True, **monitor) -> Result:
    """Apply events through the engine (sequencer included) and finish the input."""
    policies = [policy] if isinstance(policy, str) else list(policy)
    engine = local_engine(MonitorSettings(policy=policies, **monitor))
    for seq, ev in enumerate(events):
        outcome = engine.submit(ev, seq)
        assert outcome.status != "late", outcome.reason
    if finish:
        engine.finish()
    return Result(engine)


def apply_now(events, policy="kafka", **monitor) -> Result:
    """Apply events in the given order with no end-of-input checks, to inspect
    the state right after the last event."""
    engine = local_engine(MonitorSettings(policy=[policy], **monitor))
    engine.apply_in_order(events)
    return Result(engine)


ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, env=None, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`isr ARGS` as a user runs it, from the repository root."""
    return subprocess.run([sys.executable, "-m", "isr.cli", *args], cwd=ROOT, env=env,
                          input=stdin, capture_output=True, text=True, timeout=120)


def wait_until(predicate, seconds: float = 90.0, what: str = "") -> None:
    """Poll `predicate` every 0.5 s until it holds, or fail naming `what`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")
