"""Load on a real cluster, as the faults of issue 22 run it: RF-3 topics with
min.insync.replicas=2, and acks=all producers (steady, in a thread, or a
burst). One place for the tests (tests/integration/test_real_kafka*.py) and
the demo (isr/demo_kafka.py)."""

from __future__ import annotations

import threading
import time
from typing import Optional

REPLICATION = 3
MIN_INSYNC = 2


def rf3_topic(name: str, partitions: int = 3):
    """A NewTopic replicated on all three brokers that takes an acks=all write
    while two replicas are in sync (so one follower may fall out)."""
    from confluent_kafka.admin import NewTopic

    return NewTopic(name, partitions, REPLICATION,
                    config={"min.insync.replicas": str(MIN_INSYNC)})


def create_topics(bootstrap: str, new: list, timeout_s: float = 30.0) -> None:
    """Create `new` (NewTopics) and wait; raises the first failure."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    for future in admin.create_topics(new).values():
        future.result(timeout=timeout_s)


def create_rf3_topics(bootstrap: str, *specs: tuple[str, int]) -> None:
    """(name, partitions) pairs, each RF 3 with min.insync.replicas=2."""
    create_topics(bootstrap, [rf3_topic(name, n) for name, n in specs])


def _producer(bootstrap: str, **extra):
    from confluent_kafka import Producer

    # log_level 0: a stopped or paused broker's refused connections are part of the faults
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                     "message.timeout.ms": 60000, "log_level": 0, **extra})


class Producing:
    """acks=all to `topic`, `per_s` records a second of `value_bytes`, in a
    daemon thread until stop() (or the `stop` event given). `counts` has the
    deliveries: "acked" and "failed" (none may fail while min ISR holds)."""

    def __init__(self, bootstrap: str, topic: str, per_s: float = 20.0, value_bytes: int = 100,
                 stop: Optional[threading.Event] = None, flush_s: float = 60.0) -> None:
        self.bootstrap, self.topic, self.per_s = bootstrap, topic, per_s
        self.value = b"x" * value_bytes
        self.stopping = stop or threading.Event()
        self.flush_s = flush_s
        self.counts = {"acked": 0, "failed": 0}
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"produce-{topic}")

    def _delivered(self, err, _msg) -> None:
        self.counts["failed" if err else "acked"] += 1

    def _run(self) -> None:
        p = _producer(self.bootstrap)
        n = 0
        while not self.stopping.wait(1 / self.per_s):
            p.produce(self.topic, key=str(n).encode(), value=self.value,
                      on_delivery=self._delivered)
            p.poll(0)
            n += 1
        p.flush(self.flush_s)

    def start(self) -> "Producing":
        self.thread.start()
        return self

    def stop(self, timeout_s: float = 90.0) -> None:
        self.stopping.set()
        self.thread.join(timeout_s)

    def __enter__(self) -> dict:
        self.start()
        return self.counts

    def __exit__(self, *exc) -> None:
        self.stop()


def produce(bootstrap: str, topic: str, count: int, value_bytes: int = 100,
            partition: Optional[int] = None, timeout_s: float = 60.0) -> int:
    """`count` records acks=all as fast as the cluster takes them (a burst);
    returns how many it acknowledged."""
    acked = []
    p = _producer(bootstrap, **{"batch.size": 256 * 1024, "linger.ms": 20})
    value = b"v" * value_bytes
    where = {} if partition is None else {"partition": partition}
    deadline = time.monotonic() + timeout_s
    for i in range(count):
        while True:
            try:
                p.produce(topic, key=str(i).encode(), value=value,
                          on_delivery=lambda err, _msg: acked.append(err is None), **where)
                break
            except BufferError:  # the local queue is full: let the cluster catch up
                p.poll(0.05)
                if time.monotonic() > deadline:
                    break
        p.poll(0)
    p.flush(max(1.0, deadline - time.monotonic()))
    return sum(acked)


def burst(bootstrap: str, topic: str, partitions: list[int], bytes_per_s: float,
          seconds: float, record_bytes: int = 1000,
          until: Optional[threading.Event] = None) -> int:
    """A produce burst at `bytes_per_s` into `partitions` for `seconds`, with
    acks=1: an acks=all producer cannot outrun a follower in the ISR (the
    broker answers a connection's requests one at a time, each once the
    whole ISR has it), so only acks=1 makes a leader's log grow faster than
    a slow follower fetches. Stops early when `until` is set. Returns the
    records acknowledged."""
    acked = []
    p = _producer(bootstrap, **{"acks": "1", "linger.ms": 20, "batch.size": 1 << 20})
    value, per_s = b"v" * record_bytes, bytes_per_s / record_bytes
    start = time.monotonic()
    n = 0
    until = until or threading.Event()
    while (elapsed := time.monotonic() - start) < seconds and not until.is_set():
        if n >= per_s * elapsed:
            p.poll(0.005)
            continue
        try:
            p.produce(topic, value=value, partition=partitions[n % len(partitions)],
                      on_delivery=lambda err, _msg: acked.append(err is None))
            n += 1
        except BufferError:  # the local queue is full: the brokers take what they can
            p.poll(0.01)
        p.poll(0)
    p.flush(60)
    return sum(acked)
