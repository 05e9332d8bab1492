"""A discrete-event simulator of what Kafka partition leaders observe.

It plays brokers, leaders that append and followers that fetch the way
Kafka's replica fetchers do (fetch from their LEO; a caught-up fetch waits in
the leader's purgatory up to `replica.fetch.wait.max.ms` or until new data
arrives; responses are bounded), plus the faults of a scenario. It emits only
the leader-side observations of the event contract (docs/contract.md) — fetch,
fetch_start, append, leader, broker — never the monitor's conclusions.

The cluster keeps a rough ISR of its own (followers served within
`replica.lag.time.max.ms`) only to pick new leaders and to move its HW, which
followers learn one fetch late; those HWs are what a new leader starts with.
Everything random comes from one seeded generator: the same scenario and seed
give the same events.
"""

from __future__ import annotations

import heapq
import random
from typing import Iterator, Optional

from isr.sim.scenario import WINDOW_FAULTS, Fault, Scenario, Topic

# Heap actions.
START, SEND, ARRIVE, SERVE, TIMEOUT, APPEND, FAULT, CRASH_FENCE, RESTART, UNFENCE, STOP = range(11)


class _Broker:
    __slots__ = ("id", "epoch", "alive", "fenced", "shutting_down")

    def __init__(self, broker_id: int, epoch: int) -> None:
        self.id, self.epoch = broker_id, epoch
        self.alive, self.fenced, self.shutting_down = True, False, False

    @property
    def eligible(self) -> bool:
        return self.alive and not self.fenced and not self.shutting_down


class _Follower:
    __slots__ = ("replica", "leo", "hw_known", "gen", "parked", "park_token", "rtt",
                 "served_ts", "served_leo")

    def __init__(self, replica: int, leo: int, hw_known: int, now: int) -> None:
        self.replica = replica
        self.leo = leo            # the follower's log end offset
        self.hw_known = hw_known  # the HW the leader last told it
        self.gen = 0              # bumped to cancel whatever this fetcher had in flight
        self.parked = False
        self.park_token = 0
        self.rtt = 0
        self.served_ts = now      # when the leader last served one of its fetches
        self.served_leo = leo


class _Partition:
    __slots__ = ("topic", "partition", "replicas", "leader", "epoch", "leo", "hw", "followers",
                 "waiting", "spec")

    def __init__(self, topic: Topic, partition: int, replicas: list[int], now: int) -> None:
        self.topic, self.partition, self.spec = topic.name, partition, topic
        self.replicas = replicas
        self.leader = replicas[0]
        self.epoch = 1
        self.leo = self.hw = 0
        self.followers = {r: _Follower(r, 0, 0, now) for r in replicas[1:]}
        self.waiting: list[_Follower] = []


def assignment(brokers: list[int], topic_index: int, partition: int, rf: int) -> list[int]:
    """Round-robin replica placement, leader first, like Kafka's default."""
    n = len(brokers)
    first = (partition + topic_index) % n
    return [brokers[(first + i) % n] for i in range(rf)]


class Simulator:
    def __init__(self, scenario: Scenario, duration_ms: Optional[int] = None) -> None:
        """`duration_ms` None: the scenario's; < 0: run until the consumer stops."""
        self.sc = scenario
        self.t0 = scenario.start_ts
        duration = scenario.duration_ms if duration_ms is None else duration_ms
        self.end = None if duration < 0 else self.t0 + duration
        self.tm = scenario.timing
        self.rng = random.Random(scenario.seed)
        self.brokers = {b: _Broker(b, self.tm.initial_broker_epoch) for b in scenario.brokers}
        self.partitions: list[_Partition] = []
        for ti, topic in enumerate(scenario.topics):
            for p in range(topic.partitions):
                self.partitions.append(_Partition(
                    topic, p, assignment(scenario.brokers, ti, p, topic.replication_factor),
                    self.t0))
        self.windows = self._windows(scenario.faults)
        self._random = self.rng.random  # ten times cheaper than Random's int helpers
        self._heap: list = []
        self._seq = 0
        self._out: list[dict] = []
        self.now = self.t0

    # ------------------------------------------------------------ plumbing
    def _push(self, t: int, action: int, *args) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, action, args))

    def events(self) -> Iterator[dict]:
        """Every event, in ts order, until the end of the scenario."""
        self._push(self.t0, START)
        for f in self.sc.faults:
            self._push(self.t0 + f.at_ms, FAULT, f)
        handlers = (self._start, self._send, self._arrive, self._serve, self._timeout,
                    self._append, self._fault, self._crash_fence, self._restart,
                    self._unfence, self._stop)
        heap, out, end = self._heap, self._out, self.end
        while heap:
            t, _, action, args = heapq.heappop(heap)
            if end is not None and t >= end:
                break
            self.now = t
            handlers[action](t, *args)
            if out:
                yield from out
                out.clear()

    def _windows(self, faults: list[Fault]) -> dict[str, dict[int, list[Fault]]]:
        by_kind: dict[str, dict[int, list[Fault]]] = {}
        for f in faults:
            if f.kind in WINDOW_FAULTS:
                by_kind.setdefault(f.kind, {}).setdefault(f.broker, []).append(f)
        return by_kind

    def _window(self, kind: str, broker: int, t: int, p: Optional[_Partition] = None
                ) -> Optional[tuple[Fault, int]]:
        """The fault of `kind` on `broker` in force at `t` (for `p`, if scoped),
        with the end of its current window."""
        if not self.windows:  # the common case: a scenario without such faults
            return None
        for f in self.windows.get(kind, {}).get(broker, ()):
            if p is not None and ((f.topic is not None and f.topic != p.topic)
                                  or (f.partition is not None and f.partition != p.partition)):
                continue
            start = self.t0 + f.at_ms
            if t < start:
                continue
            if f.repeat_every_ms:
                start += (t - start) // f.repeat_every_ms * f.repeat_every_ms
            if t < start + f.duration_ms:
                return f, start + f.duration_ms
        return None

    def _uniform(self, low: int, high: int) -> int:
        """A seeded random int in [low, high]."""
        return low + int(self._random() * (high - low + 1))

    # ------------------------------------------------------------ events out
    def _base(self, p: _Partition, t: int, kind: str) -> dict:
        return {"v": 1, "type": kind, "cluster": self.sc.cluster, "ts": t, "topic": p.topic,
                "partition": p.partition, "leader": p.leader, "leader_epoch": p.epoch}

    def _emit_leader(self, p: _Partition, t: int, isr: list[int], hw: int) -> None:
        ev = self._base(p, t, "leader")
        ev.update(replicas=list(p.replicas), isr=isr, leader_epoch_start_offset=p.leo, hw=hw)
        if p.spec.min_insync_replicas is not None:
            ev["min_insync_replicas"] = p.spec.min_insync_replicas
        self._out.append(ev)

    def _emit_broker(self, b: _Broker, t: int, state: str) -> None:
        self._out.append({"v": 1, "type": "broker", "cluster": self.sc.cluster, "ts": t,
                          "broker": b.id, "broker_epoch": b.epoch, "state": state})

    # ------------------------------------------------------------ start
    def _start(self, t: int) -> None:
        for b in self.brokers.values():
            self._emit_broker(b, t, "registered")
        uniform = self._uniform
        for p in self.partitions:
            self._emit_leader(p, t, list(p.replicas), 0)
            w = p.spec.workload
            if w.kind != "idle":
                self._push(t + uniform(1, w.interval_ms), APPEND, p)
            for f in p.followers.values():
                self._push(t + uniform(0, self.tm.replica_fetch_wait_max_ms), SEND, p, f, f.gen)

    # ------------------------------------------------------------ fetch loop
    def _send(self, t: int, p: _Partition, f: _Follower, gen: int) -> None:
        """The follower's fetcher sends its next request."""
        if gen != f.gen or not self.brokers[f.replica].alive:
            return  # cancelled, or the broker is down (its restart resumes the loop)
        blocked = (self._window("gc_pause", f.replica, t)
                   or self._window("stuck_follower", f.replica, t, p))
        if blocked is not None:
            self._push(blocked[1], SEND, p, f, gen)
            return
        slow = self._window("slow_follower", f.replica, t, p)
        f.rtt = (self.tm.fetch_rtt_ms + (slow[0].extra_rtt_ms if slow else 0)
                 + self._uniform(0, self.tm.fetch_jitter_ms))
        self._push(t + f.rtt // 2, ARRIVE, p, f, gen)

    def _arrive(self, t: int, p: _Partition, f: _Follower, gen: int) -> None:
        """The request reaches the leader."""
        if gen != f.gen:
            return
        leader = self.brokers[p.leader]
        if not leader.alive:  # connection refused: the fetcher backs off
            self._push(t + self.tm.replica_fetch_backoff_ms, SEND, p, f, gen)
            return
        paused = self._window("gc_pause", p.leader, t)
        if paused is not None:  # the request waits in the socket until the JVM resumes
            self._push(paused[1], ARRIVE, p, f, gen)
            return
        slow = self._window("slow_leader", p.leader, t)
        if slow is not None and slow[0].serve_ms > 0:
            ev = self._base(p, t, "fetch_start")
            ev.update(replica=f.replica, fetch_offset=f.leo, leader_leo=p.leo)
            self._out.append(ev)
            self._push(t + slow[0].serve_ms, SERVE, p, f, gen, t, p.leo)
        else:
            self._serve(t, p, f, gen, t, p.leo)

    def _serve(self, t: int, p: _Partition, f: _Follower, gen: int, received: int,
               leo_at_receipt: int) -> None:
        """The leader updates its view of the follower: the `fetch` event."""
        if gen != f.gen:
            return  # the leader changed meanwhile: this request failed
        ev = self._base(p, t, "fetch")
        ev.update(replica=f.replica, fetch_offset=f.leo, leader_leo=leo_at_receipt)
        if received != t:
            ev["received_ts"] = received
        ev["broker_epoch"] = self.brokers[f.replica].epoch
        self._out.append(ev)
        f.served_ts, f.served_leo = t, f.leo
        self._update_hw(p, t)
        if f.leo < p.leo:
            self._respond(t, p, f)
        else:  # caught up: wait in purgatory for new data, at most wait_max
            f.parked = True
            f.park_token += 1
            p.waiting.append(f)
            self._push(t + self.tm.replica_fetch_wait_max_ms, TIMEOUT, p, f, gen, f.park_token)

    def _respond(self, t: int, p: _Partition, f: _Follower) -> None:
        limit = self.tm.replica_fetch_max_messages
        slow = self._window("slow_follower", f.replica, t, p)
        if slow is not None and slow[0].fetch_max_messages is not None:
            limit = slow[0].fetch_max_messages
        f.leo += max(0, min(p.leo - f.leo, limit))
        f.hw_known = p.hw
        # The response travels back, then the fetcher sends its next request.
        self._push(t + f.rtt - f.rtt // 2, SEND, p, f, f.gen)

    def _timeout(self, t: int, p: _Partition, f: _Follower, gen: int, token: int) -> None:
        if gen == f.gen and f.parked and f.park_token == token:
            f.parked = False
            p.waiting.remove(f)
            self._respond(t, p, f)

    def _in_cluster_isr(self, f: _Follower, t: int) -> bool:
        return (self.brokers[f.replica].eligible
                and t - f.served_ts <= self.tm.replica_lag_time_max_ms)

    def _update_hw(self, p: _Partition, t: int) -> None:
        hw = p.leo
        for f in p.followers.values():
            if f.served_leo < hw and self._in_cluster_isr(f, t):
                hw = f.served_leo
        if hw > p.hw:
            p.hw = hw

    # ------------------------------------------------------------ produce
    def _append(self, t: int, p: _Partition) -> None:
        w = p.spec.workload
        gap = max(1, w.interval_ms + (self._uniform(-w.jitter_ms, w.jitter_ms)
                                      if w.jitter_ms else 0))
        leader = self.brokers[p.leader]
        paused = self._window("gc_pause", p.leader, t)
        if paused is not None:
            self._push(paused[1], APPEND, p)
            return
        if leader.alive:
            in_burst = (w.kind == "bursty"
                        and (t - self.t0) % w.burst_every_ms >= w.burst_every_ms - w.burst_ms)
            p.leo += w.burst_messages if in_burst else w.messages
            ev = self._base(p, t, "append")
            ev["leader_leo"] = p.leo
            self._out.append(ev)
            self._update_hw(p, t)
            waiting, p.waiting = p.waiting, []
            for f in waiting:
                f.parked = False
                self._respond(t, p, f)
        self._push(t + gap, APPEND, p)

    # ------------------------------------------------------------ faults
    def _fault(self, t: int, fault: Fault) -> None:
        kind = fault.kind
        if kind == "failover":
            for p in self.partitions:
                if p.topic == fault.topic and p.partition == fault.partition:
                    self._elect(t, p, fault.hw_behind)
        elif kind == "crash":
            b = self.brokers[fault.broker]
            self._go_down(t, b)
            fence_at = t + min(fault.duration_ms, self.tm.broker_session_timeout_ms)
            self._push(fence_at, CRASH_FENCE, b)
            self._push(max(t + fault.duration_ms, fence_at), RESTART, b, True)
        elif kind == "fence":
            b = self.brokers[fault.broker]
            b.fenced = True
            self._emit_broker(b, t, "fenced")
            self._move_leaderships(t, b, fault.hw_behind)
            self._push(t + fault.duration_ms, UNFENCE, b)
        elif kind == "controlled_shutdown":
            b = self.brokers[fault.broker]
            b.shutting_down = True
            self._emit_broker(b, t, "controlled_shutdown")
            self._move_leaderships(t, b, False)
            stop_at = t + min(self.tm.controlled_shutdown_ms, fault.duration_ms)
            self._push(stop_at, STOP, b)
            self._push(max(t + fault.duration_ms, stop_at), RESTART, b, False)
        # gc_pause, stuck/slow follower and slow_leader act through self.windows.

    def _go_down(self, t: int, b: _Broker) -> None:
        """The process stops: its fetchers' requests in flight are lost."""
        b.alive = False
        for p in self.partitions:
            f = p.followers.get(b.id)
            if f is not None:
                self._cancel(p, f)

    def _cancel(self, p: _Partition, f: _Follower) -> None:
        f.gen += 1
        if f.parked:
            f.parked = False
            p.waiting.remove(f)

    def _crash_fence(self, t: int, b: _Broker) -> None:
        b.fenced = True
        self._emit_broker(b, t, "fenced")
        self._move_leaderships(t, b, True)

    def _stop(self, t: int, b: _Broker) -> None:
        self._go_down(t, b)
        b.fenced = True
        self._emit_broker(b, t, "fenced")

    def _restart(self, t: int, b: _Broker, truncate: bool) -> None:
        """A new incarnation: new broker epoch; after an unclean stop each
        replica truncates to the HW it knew."""
        b.epoch += 1
        b.alive, b.shutting_down = True, False
        self._emit_broker(b, t, "registered")
        for p in self.partitions:
            f = p.followers.get(b.id)
            if f is not None:
                if truncate:
                    f.leo = min(f.leo, f.hw_known)
                self._cancel(p, f)
                # Its fetchers start once it has caught up with the metadata
                # log, which is also when the controller unfences it.
                self._push(t + self.tm.unfence_delay_ms + self.tm.fetch_rtt_ms, SEND, p, f,
                           f.gen)
        self._push(t + self.tm.unfence_delay_ms, UNFENCE, b)

    def _unfence(self, t: int, b: _Broker) -> None:
        if b.alive and b.fenced:
            b.fenced = False
            self._emit_broker(b, t, "unfenced")

    def _move_leaderships(self, t: int, b: _Broker, hw_behind: bool) -> None:
        for p in self.partitions:
            if p.leader == b.id:
                self._elect(t, p, hw_behind)

    def _elect(self, t: int, p: _Partition, hw_behind: bool) -> None:
        """The controller moves leadership to the first eligible in-sync
        replica. With none the partition stays with its old leader (offline
        if that broker is down: no unclean election)."""
        old = p.leader
        candidates = [r for r in p.replicas
                      if r != old and self._in_cluster_isr(p.followers[r], t)]
        if not candidates:
            return
        new = candidates[0]
        nf = p.followers[new]
        self._cancel(p, nf)  # it stops fetching: it is the leader now
        new_leo = nf.leo
        hw = min(nf.hw_known if hw_behind else p.hw, new_leo)
        old_leader = _Follower(old, p.leo, p.hw, t)
        followers = {}
        for r in p.replicas:
            if r == new:
                continue
            f = old_leader if r == old else p.followers[r]
            self._cancel(p, f)
            f.leo = min(f.leo, new_leo)  # a diverging epoch truncates the follower
            f.served_ts, f.served_leo = t, f.leo
            followers[r] = f
        isr = [new] + [r for r in p.replicas
                       if r != new and self.brokers[r].eligible
                       and (r == old or self._in_cluster_isr(followers[r], t))]
        p.leader, p.epoch, p.leo, p.hw = new, p.epoch + 1, new_leo, hw
        p.followers, p.waiting = followers, []
        self._emit_leader(p, t, isr, hw)
        for f in followers.values():
            if self.brokers[f.replica].alive:
                self._push(t + self.tm.fetch_rtt_ms, SEND, p, f, f.gen)
