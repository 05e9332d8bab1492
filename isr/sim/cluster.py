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

Two fetch models (`grain`, docs/simulator.md):
- `session` (`isr simulate`'s default): as Kafka's replica fetcher does since
  KIP-227, each follower broker sends one FETCH per leader broker for all the
  partitions it follows there (one fetch session per leader/follower pair): a
  full request first (and after a restart or a lost connection), then
  incremental ones listing only the partitions whose fetch offset changed
  and forgetting those it stopped fetching, session epochs 1, 2, ...; a
  request with nothing to read waits at the leader until one of its
  partitions gets data or `replica.fetch.wait.max.ms`. Each FETCH is one
  `fetch_session` event; with `expand=True` the same run is written as the
  per-partition `fetch` events that the FETCH means for every partition of
  its session (the monitor decides the same on both).
- `partition`: every partition's follower fetches on its own (`fetch`
  events), the model before sessions; kept for monitors that do not read
  `fetch_session`, and its outputs are the golden ones (tests/test_golden.py).
"""

from __future__ import annotations

import heapq
import random
from typing import Iterator, Optional

from isr.sim.scenario import WINDOW_FAULTS, Fault, Scenario, Topic

# Heap actions.
(START, SEND, ARRIVE, SERVE, TIMEOUT, APPEND, FAULT, CRASH_FENCE, RESTART, UNFENCE, STOP,
 SEND_S, ARRIVE_S, SERVE_S, TIMEOUT_S) = range(15)
SESSION, PARTITION = "session", "partition"
GRAINS = (SESSION, PARTITION)


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
                 "served_ts", "served_leo", "session")

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
        self.session: Optional[_Session] = None  # the session whose leader holds it, if any

    def served(self) -> int:
        """When the leader last served it: its session's last FETCH while a
        session holds it."""
        return self.session.served_ts if self.session is not None else self.served_ts


class _Session:
    """A follower broker's fetch session with one leader broker (KIP-227).
    Partitions by their index in Simulator.partitions."""
    __slots__ = ("leader", "replica", "members", "cached", "dirty", "left", "behind", "gen",
                 "parked", "park_token", "rtt", "session_id", "epoch", "full", "served_ts")

    def __init__(self, leader: int, replica: int, now: int) -> None:
        self.leader, self.replica = leader, replica
        self.members: dict[int, _Partition] = {}  # led by `leader`, followed by `replica`
        self.cached: dict[int, int] = {}  # the leader's session: index -> fetch offset
        self.dirty: set[int] = set()      # members whose fetch offset the leader does not hold
        self.left: set[int] = set()       # cached partitions that left the members
        self.behind: set[int] = set()     # members whose leader has data for the follower
        self.gen = 0
        self.parked = False
        self.park_token = 0
        self.rtt = 0
        self.session_id = 0
        self.epoch = 0
        self.full = True                  # the next request is a full one
        self.served_ts = now


class _Partition:
    __slots__ = ("topic", "partition", "replicas", "leader", "epoch", "leo", "hw", "followers",
                 "waiting", "spec", "index")

    def __init__(self, topic: Topic, partition: int, replicas: list[int], now: int,
                 index: int = 0) -> None:
        self.topic, self.partition, self.spec = topic.name, partition, topic
        self.index = index
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


def kafka_assignment(brokers: list[int], topic_index: int, partition: int, rf: int) -> list[int]:
    """Kafka's rack-unaware placement (AdminUtils.assignReplicasToBrokersRackUnaware,
    core/src/main/scala/kafka/admin/AdminUtils.scala at apache/kafka 3.0.0
    8cb0a5e9d3; in 4.x org.apache.kafka.admin.AdminUtils): leaders round-robin
    from a start index, each follower shifted by 1 + (shift + j) % (n - 1),
    the shift growing by one every n partitions. Kafka draws the start index
    and the first shift at random; here both are the topic's index."""
    n = len(brokers)
    first = (partition + topic_index) % n
    shift = topic_index + partition // n
    out = [brokers[first]]
    for j in range(rf - 1):
        out.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
    return out


class Simulator:
    def __init__(self, scenario: Scenario, duration_ms: Optional[int] = None,
                 grain: str = PARTITION, expand: bool = False) -> None:
        """`duration_ms` None: the scenario's; < 0: run until the consumer stops.
        `grain`: the fetch model (module docstring); `expand`: a session run
        written as per-partition fetches."""
        if grain not in GRAINS:
            raise ValueError(f"grain must be one of {GRAINS}, not {grain!r}")
        self.sessions_on = grain == SESSION
        self.expand = expand
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
                place = kafka_assignment if topic.placement == "kafka" else assignment
                self.partitions.append(_Partition(
                    topic, p, place(scenario.brokers, ti, p, topic.replication_factor),
                    self.t0, len(self.partitions)))
        # (leader, follower) -> its fetch session (session grain)
        self.sessions: dict[tuple[int, int], _Session] = {}
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
                    self._unfence, self._stop, self._send_s, self._arrive_s, self._serve_s,
                    self._timeout_s)
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
            if f.kind in WINDOW_FAULTS:  # (each names its broker: Fault's validator)
                by_kind.setdefault(f.kind, {}).setdefault(
                    f.broker, []).append(f)  # type: ignore[arg-type]
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
            end = self._window_end(f, t)
            if end is not None:
                return f, end
        return None

    def _window_end(self, f: Fault, t: int) -> Optional[int]:
        """The end of `f`'s window in force at `t` (its current repeat), if any."""
        start = self.t0 + f.at_ms
        if t < start:
            return None
        if f.repeat_every_ms:
            start += (t - start) // f.repeat_every_ms * f.repeat_every_ms
        return start + f.duration_ms if t < start + f.duration_ms else None

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
            if self.sessions_on:
                self._join_sessions(p)
                continue
            for f in p.followers.values():
                self._push(t + uniform(0, self.tm.replica_fetch_wait_max_ms), SEND, p, f, f.gen)
        for s in self.sessions.values():
            self._push(t + uniform(0, self.tm.replica_fetch_wait_max_ms), SEND_S, s, s.gen)

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
                and t - f.served() <= self.tm.replica_lag_time_max_ms)

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
            if self.sessions_on:
                self._wake_sessions(t, p)
        self._push(t + gap, APPEND, p)

    # ------------------------------------------------------------ faults
    def _fault(self, t: int, fault: Fault) -> None:
        kind = fault.kind
        if kind == "failover":
            for p in self.partitions:
                if p.topic == fault.topic and p.partition == fault.partition:
                    self._elect(t, p, fault.hw_behind)
        elif kind == "crash":
            b = self.brokers[fault.broker]  # type: ignore[index]  # (named: Fault's validator)
            self._go_down(t, b)
            fence_at = t + min(fault.duration_ms, self.tm.broker_session_timeout_ms)
            self._push(fence_at, CRASH_FENCE, b)
            self._push(max(t + fault.duration_ms, fence_at), RESTART, b, True)
        elif kind == "fence":
            b = self.brokers[fault.broker]  # type: ignore[index]  # (named: Fault's validator)
            b.fenced = True
            self._emit_broker(b, t, "fenced")
            self._move_leaderships(t, b, fault.hw_behind)
            self._push(t + fault.duration_ms, UNFENCE, b)
        elif kind == "controlled_shutdown":
            b = self.brokers[fault.broker]  # type: ignore[index]  # (named: Fault's validator)
            b.shutting_down = True
            self._emit_broker(b, t, "controlled_shutdown")
            self._move_leaderships(t, b, False)
            stop_at = t + min(self.tm.controlled_shutdown_ms, fault.duration_ms)
            self._push(stop_at, STOP, b)
            self._push(max(t + fault.duration_ms, stop_at), RESTART, b, False)
        # gc_pause, stuck/slow follower and slow_leader act through self.windows.

    def _go_down(self, t: int, b: _Broker) -> None:
        """The process stops: its fetchers' requests in flight are lost (and,
        with sessions, the sessions it held as leader)."""
        b.alive = False
        for p in self.partitions:
            f = p.followers.get(b.id)
            if f is not None:
                self._cancel(p, f)
        for s in self.sessions.values():
            if b.id in (s.leader, s.replica):
                s.full = True
                if s.replica == b.id:
                    s.gen += 1
                    s.parked = False

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
                if not self.sessions_on:
                    self._push(t + self.tm.unfence_delay_ms + self.tm.fetch_rtt_ms, SEND, p, f,
                               f.gen)
        for s in self.sessions.values():
            if s.replica == b.id:
                self._push(t + self.tm.unfence_delay_ms + self.tm.fetch_rtt_ms, SEND_S, s,
                           s.gen)
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
        if self.sessions_on:
            self._leave_sessions(p)
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
        if self.sessions_on:  # the new leader's sessions take it at their next request
            self._join_sessions(p)
            return
        for f in followers.values():
            if self.brokers[f.replica].alive:
                self._push(t + self.tm.fetch_rtt_ms, SEND, p, f, f.gen)

    # ------------------------------------------------------------ fetch sessions
    def _session(self, leader: int, replica: int) -> _Session:
        s = self.sessions.get((leader, replica))
        if s is None:
            s = self.sessions[(leader, replica)] = _Session(leader, replica, self.now)
            if self.now > self.t0:  # a pair that had nothing to fetch until now
                self._push(self.now + self.tm.fetch_rtt_ms, SEND_S, s, s.gen)
        return s

    def _join_sessions(self, p: _Partition) -> None:
        """`p` (new, or under a new leader) joins its followers' sessions with
        its leader: listed at their next request."""
        i = p.index
        for f in p.followers.values():
            f.session = None
            s = self._session(p.leader, f.replica)
            s.members[i] = p
            s.left.discard(i)
            s.dirty.add(i)
            if p.leo > f.leo:
                s.behind.add(i)

    def _leave_sessions(self, p: _Partition) -> None:
        """`p` changes leader: its followers' sessions with the old leader
        forget it at their next request."""
        i = p.index
        for f in p.followers.values():
            s = self.sessions.get((p.leader, f.replica))
            if s is None or i not in s.members:
                continue
            f.served_ts = f.served()
            f.session = None
            del s.members[i]
            s.dirty.discard(i)
            s.behind.discard(i)
            if i in s.cached:
                s.left.add(i)

    def _wake_sessions(self, t: int, p: _Partition) -> None:
        """New data in `p`: its followers' sessions have something to read; a
        parked request is answered now."""
        i = p.index
        for f in p.followers.values():
            s = self.sessions.get((p.leader, f.replica))
            if s is None or i not in s.members:
                continue
            if p.leo > f.leo:
                s.behind.add(i)
            if s.parked and i in s.cached:
                s.parked = False
                self._respond_s(t, s)

    def _stuck(self, s: _Session, t: int) -> set[int]:
        """Members its fetcher leaves out (a stuck_follower fault scoped to
        them): the follower removes a failing partition from its fetcher."""
        if "stuck_follower" not in self.windows:
            return set()
        return {i for i, p in s.members.items()
                if self._window("stuck_follower", s.replica, t, p) is not None}

    def _send_s(self, t: int, s: _Session, gen: int) -> None:
        """The follower's fetcher sends its next FETCH to this leader."""
        if gen != s.gen or not self.brokers[s.replica].alive:
            return
        blocked = self._window("gc_pause", s.replica, t) or self._broker_stuck(s.replica, t)
        if blocked is not None:
            self._push(blocked[1], SEND_S, s, gen)
            return
        if not s.members and not s.cached:  # nothing to fetch here: look again later
            self._push(t + self.tm.replica_fetch_wait_max_ms, SEND_S, s, gen)
            return
        slow = self._window("slow_follower", s.replica, t)
        s.rtt = (self.tm.fetch_rtt_ms + (slow[0].extra_rtt_ms if slow else 0)
                 + self._uniform(0, self.tm.fetch_jitter_ms))
        self._push(t + s.rtt // 2, ARRIVE_S, s, gen)

    def _broker_stuck(self, broker: int, t: int) -> Optional[tuple[Fault, int]]:
        """A stuck_follower fault on the whole broker (no topic, no partition)."""
        for f in self.windows.get("stuck_follower", {}).get(broker, ()):
            if f.topic is None and f.partition is None:
                end = self._window_end(f, t)
                if end is not None:
                    return f, end
        return None

    def _arrive_s(self, t: int, s: _Session, gen: int) -> None:
        if gen != s.gen:
            return
        leader = self.brokers[s.leader]
        if not leader.alive:  # connection refused: back off, then a new session
            s.full = True
            self._push(t + self.tm.replica_fetch_backoff_ms, SEND_S, s, gen)
            return
        paused = self._window("gc_pause", s.leader, t)
        if paused is not None:
            self._push(paused[1], ARRIVE_S, s, gen)
            return
        slow = self._window("slow_leader", s.leader, t)
        if slow is not None and slow[0].serve_ms > 0:
            leos = {}
            for i, p in s.members.items():
                f = p.followers[s.replica]
                leos[i] = p.leo
                ev = self._base(p, t, "fetch_start")
                ev.update(replica=s.replica, fetch_offset=f.leo, leader_leo=p.leo)
                self._out.append(ev)
            self._push(t + slow[0].serve_ms, SERVE_S, s, gen, t, leos)
        else:
            self._serve_s(t, s, gen, t, None)

    def _serve_s(self, t: int, s: _Session, gen: int, received: int,
                 leos: Optional[dict[int, int]]) -> None:
        """The leader takes the FETCH: the `fetch_session` event."""
        if gen != s.gen:
            return
        stuck = self._stuck(s, t)
        full = s.full
        if full:
            for i in s.cached:
                p = s.members.get(i)
                if p is not None:
                    p.followers[s.replica].session = None
            s.cached, s.left = {}, set()
            s.session_id = self._uniform(1, 2**31 - 1)
            s.epoch = 0
            listed = [i for i in s.members if i not in stuck]
            forgotten: list[int] = []
            s.behind = {i for i, p in s.members.items() if p.leo > p.followers[s.replica].leo}
        else:
            listed = sorted(i for i in s.dirty if i not in stuck)
            forgotten = sorted(i for i in (s.left | stuck) if i in s.cached)
        if not listed and not forgotten and not s.cached:
            self._park(t, s, gen)
            return
        served_before = s.served_ts
        for i in forgotten:
            del s.cached[i]
            p = s.members.get(i)
            if p is not None:  # stuck: it rejoins when it is fetched again
                f = p.followers[s.replica]
                f.served_ts, f.session = served_before, None
                s.dirty.add(i)
        s.left = set()
        epoch = self.brokers[s.replica].epoch
        parts = []
        for i in listed:
            p = s.members[i]
            f = p.followers[s.replica]
            s.cached[i] = f.leo
            s.dirty.discard(i)
            f.session, f.served_leo = s, f.leo
            parts.append(p)
        s.served_ts = t
        self._emit_session(t, s, received, leos, full, parts, forgotten, epoch)
        for p in parts:
            self._update_hw(p, t)
        s.full = False
        s.epoch = 1 if s.epoch == 2**31 - 1 else s.epoch + 1
        if any(i in s.cached for i in s.behind):
            self._respond_s(t, s)
        else:
            self._park(t, s, gen)

    def _emit_session(self, t: int, s: _Session, received: int,
                      leos: Optional[dict[int, int]], full: bool, parts: list[_Partition],
                      forgotten: list[int], broker_epoch: int) -> None:
        def leo_of(p: _Partition) -> int:
            return p.leo if leos is None else leos.get(p.index, p.leo)

        if self.expand:  # what the FETCH means for every partition of the session
            listed = {p.index for p in parts}
            for i, offset in s.cached.items():
                p = s.members[i]
                ev = self._base(p, t, "fetch")
                ev.update(replica=s.replica, fetch_offset=offset,
                          leader_leo=leo_of(p) if i in listed else max(p.leo, offset))
                if received != t:
                    ev["received_ts"] = received
                ev["broker_epoch"] = broker_epoch
                self._out.append(ev)
            return
        ev = {"v": 1, "type": "fetch_session", "cluster": self.sc.cluster, "ts": t,
              "leader": s.leader, "replica": s.replica}
        if received != t:
            ev["received_ts"] = received
        ev.update(broker_epoch=broker_epoch, session_id=s.session_id,
                  session_epoch=0 if full else s.epoch, full=full,
                  partitions=[{"topic": p.topic, "partition": p.partition,
                               "leader_epoch": p.epoch, "fetch_offset": s.cached[p.index],
                               "leader_leo": leo_of(p)} for p in parts])
        if forgotten:
            ev["forgotten"] = [{"topic": self.partitions[i].topic,
                                "partition": self.partitions[i].partition} for i in forgotten]
        self._out.append(ev)

    def _park(self, t: int, s: _Session, gen: int) -> None:
        """Nothing to read: the request waits for data, at most wait_max."""
        s.parked = True
        s.park_token += 1
        self._push(t + self.tm.replica_fetch_wait_max_ms, TIMEOUT_S, s, gen, s.park_token)

    def _timeout_s(self, t: int, s: _Session, gen: int, token: int) -> None:
        if gen == s.gen and s.parked and s.park_token == token:
            s.parked = False
            self._respond_s(t, s)

    def _respond_s(self, t: int, s: _Session) -> None:
        """The response: each cached partition with data moves the follower
        up (bounded); then the response travels back and the next FETCH goes."""
        limit = self.tm.replica_fetch_max_messages
        for i in sorted(s.behind):
            p = s.members.get(i)
            if p is None:
                s.behind.discard(i)
                continue
            if i not in s.cached:
                continue
            f = p.followers[s.replica]
            most = limit
            if self.windows:
                slow = self._window("slow_follower", s.replica, t, p)
                if slow is not None and slow[0].fetch_max_messages is not None:
                    most = slow[0].fetch_max_messages
            moved = max(0, min(p.leo - f.leo, most))
            if moved:
                f.leo += moved
                s.dirty.add(i)
            f.hw_known = p.hw
            if f.leo >= p.leo:
                s.behind.discard(i)
        self._push(t + s.rtt - s.rtt // 2, SEND_S, s, s.gen)
