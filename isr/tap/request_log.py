"""Follower fetches from a broker's request log (docs/tap.md).

With `kafka.request.logger=DEBUG` the broker writes, per request, one line
`Completed request:{json}` (core/src/main/scala/kafka/network/RequestChannel.scala);
the JSON is `RequestConvertToJson.requestDescMetrics`: `requestHeader`,
`request` and `response` from the generated `*JsonConverter`s of
FetchRequest.json / FetchResponse.json (camelCase field names; tagged fields
only when not at their default; records as `recordsSizeInBytes`), and the
request's timings. The broker writing the log leads the partitions its
followers fetch.

Two grains (docs/tap.md). `session` (the default of `isr tap request-log`):
one `fetch_session` event per follower FETCH, with the session's id and
epoch and only the partitions the request listed, as Kafka's leader received
it (KIP-227). `partition` (for old monitors and backfills): every partition
of the request's fetch session becomes a `fetch` event. Either way the
fetch is at the end of the leader's read (arrival + localTimeMs), with
`received_ts` = arrival (line time - totalTimeMs + requestQueueTimeMs), and
the session grain is exactly the partition grain's fetches grouped by
request (a listed partition carries the `leader_leo` its `fetch` would; an
unlisted one's is the leader's LEO of the `append` events before it):
- Incremental sessions (KIP-227): a follower lists only partitions whose
  fetch state changed and the leader leaves unchanged ones out of its
  response, so the session's partition set is kept and every FETCH counts for
  all of them, at their cached fetchOffset.
- The leader's LEO is not logged. A read that returned no records (or waited
  in purgatory, which only happens when the first read found nothing) saw
  LEO = fetchOffset. A read that returned records saw LEO = the follower's
  next fetchOffset, known at its next request; when the read was size-capped
  that is only a lower bound, raised to the highest LEO the other followers'
  reads showed before it (a follower too slow to fetch all that was appended
  between its fetches, issue 22's slow follower). `append` events follow the
  inferred LEO up. At the session grain a request whose reads wait for
  their LEO is written when the last of them is known (its session's next
  request, as the partition grain writes those `fetch`es), and requests are
  written in the order of their lines (`HOLD_MS`). A read whose follower
  sends no next request within `HOLD_MS` of log time (paused, killed) is
  settled with the lower bound then, so nothing is written seconds late.
"""

from __future__ import annotations

import base64
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional

import orjson

from isr.tap.lines import Log4jTap, LogLine

PREFIX = "Completed request:"
INITIAL_EPOCH, FINAL_EPOCH = 0, -1  # FetchMetadata: a full fetch (new / no session)
SESSION, PARTITION = "session", "partition"
GRAINS = (SESSION, PARTITION)


def kafka_topic_id(value: str) -> str:
    """Kafka prints a topic id as url-safe base64 without padding (Uuid.toString);
    a client may give the dashed UUID form."""
    if "-" in value and len(value) == 36:
        return base64.urlsafe_b64encode(uuid.UUID(value).bytes).rstrip(b"=").decode()
    return value


@dataclass
class Wanted:
    """A partition as the follower last asked for it (the session's cache)."""
    fetch_offset: int
    leader_epoch: int
    max_bytes: int
    log_start_offset: Optional[int]


@dataclass
class Session:
    replica: int
    parts: dict[tuple[str, int], Wanted] = field(default_factory=dict)
    session_id: int = 0


@dataclass
class Held:
    """One FETCH's events (its `fetch_session`, or at the partition grain its
    `fetch`es), written once every read of it knows its LEO (`waiting`
    reaches 0 after `open` ends), in line order (RequestLogTap.HOLD_MS)."""
    event: dict
    listed: list[tuple[tuple[str, int], Wanted]]  # in the request's order
    fetches: dict[tuple[str, int], dict] = field(default_factory=dict)
    waiting: int = 0
    open: bool = True  # the request is still being read
    empty: bool = False
    line_ts: float = 0.0   # the request's line time (its place in the output order)
    done: bool = False     # complete: ready to go out in its line's order
    detached: bool = False  # no longer holds back later requests (RequestLogTap.HOLD_MS)
    # the `append`s its reads showed, written just before it (in line order)
    before: list[dict] = field(default_factory=list)
    # reads whose LEO is a lower bound: raised, when written, to the LEO the
    # `append`s before them in line order showed (same leader epoch)
    bounds: set[tuple[str, int]] = field(default_factory=set)
    # `append`s of records that came while it waited in purgatory: after it
    after: list[dict] = field(default_factory=list)
    emitted: bool = False


@dataclass
class Pending:
    """A read that returned records: its LEO is the follower's next fetchOffset."""
    event: Optional[dict]  # the fetch to complete (None: the fetch went out already)
    ts: int                # when the leader's LEO was seen
    capped: bool
    leader_epoch: int
    held: Optional[Held] = None  # the request it belongs to
    line_ts: float = 0.0         # its request's line time (RequestLogTap.HOLD_MS)


class RequestLogTap(Log4jTap):
    """Lines of one broker's request log in, events out (`feed` / `finish`)."""

    # Session grain: requests go out in the order of their lines (the order
    # the leader completed them), so a request whose reads wait for their LEO
    # holds back the complete ones after it, for at most this much log time
    # (a running follower's next request comes within replica.fetch.wait.max.ms,
    # 500 ms by default, of its previous one's completion); past it, they go
    # out and it follows when complete.
    # The same bound ends a read's wait for its LEO: a read whose follower has
    # sent no next request for HOLD_MS of log time (a paused, GC-stalled or
    # killed broker: it comes back seconds later, if at all) is settled with
    # the lower bound a read whose next request never came gets, so its
    # request goes out within HOLD_MS of its line, not when the follower
    # returns (docs/tap.md).
    HOLD_MS = 1000
    NO_NEXT_REQUEST = ("reads whose LEO is only a lower bound: the follower's next request "
                       "did not come within HOLD_MS (1,000 ms of log time)")
    # a read that waited in purgatory and got records: its `fetch` went out
    # exact; only the `append` its next fetchOffset would give is not written
    NO_NEXT_APPEND = ("purgatory reads that got records, no next request within HOLD_MS: "
                      "the LEO their next fetchOffset shows is not written")

    def __init__(self, broker: int, cluster: str = "default", timezone: str = "UTC",
                 topic_names: Optional[Callable[[str], Optional[str]]] = None,
                 grain: str = PARTITION) -> None:
        super().__init__(timezone)
        if grain not in GRAINS:
            raise ValueError(f"grain must be one of {GRAINS}, not {grain!r}")
        self.broker = broker
        self.grain = grain
        self.cluster = cluster
        self.topic_names = topic_names or (lambda _id: None)
        self.names_topic_ids = topic_names is not None  # --topic-ids given
        self.unknown_id_lines = 0  # FETCH lines with a topic id without a name
        self._unknown_on_line = False
        self.sessions: dict[int, Session] = {}
        # Each follower fetcher thread (replica, clientId "broker-2-fetcher-0")
        # has one session at a time: its latest, sessionless ones included.
        self.fetchers: dict[tuple[int, str], Session] = {}
        self.pending: dict[tuple[int, str, int], Pending] = {}
        # replica -> its partitions whose read waits for the next fetchOffset
        self.waiting: dict[int, dict[tuple[str, int], None]] = {}
        self.leo: dict[tuple[str, int], int] = {}  # highest LEO seen (reads resolved)
        # highest LEO written in an append, and its leader epoch
        self.written_leo: dict[tuple[str, int], tuple[int, int]] = {}
        # the last appends' (ts, leader epoch, LEO): what the leader had at a time
        self.appended: dict[tuple[str, int], deque] = {}
        self.order: deque[Held] = deque()  # session grain: requests in line order
        # reads waiting for their LEO, in line order: (line time, key, Pending)
        self.aging: deque[tuple[float, tuple[int, str, int], Pending]] = deque()
        self.now = float("-inf")  # the latest line time

    # ------------------------------------------------------------ lines
    def entry(self, parsed: LogLine) -> list[dict]:
        if not parsed.message.startswith(PREFIX):
            return self.skip("not a completed request")
        try:
            desc = orjson.loads(parsed.message[len(PREFIX):])
            header = desc["requestHeader"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return self.skip("truncated or unreadable JSON")
        if header.get("requestApiKeyName") != "FETCH" and header.get("requestApiKey") != 1:
            return self.skip("not a FETCH")
        self._unknown_on_line = False
        try:  # any version: read by field names (docs/tap.md)
            return self._fetch(parsed.ts, desc)
        except (KeyError, TypeError, ValueError, AttributeError):
            return self.skip("FETCH with fields this tap does not know")
        finally:
            self.unknown_id_lines += self._unknown_on_line

    def warnings(self) -> list[str]:
        """FetchRequest v13+ names topics by id: without names nothing of those
        lines can be written, which must not pass in silence (issue 24)."""
        if not self.unknown_id_lines:
            return super().warnings()
        where = ("the --topic-ids source does not know them" if self.names_topic_ids else
                 "give --topic-ids DUMP|BOOTSTRAP (a metadata dump or the cluster) to name them")
        return super().warnings() + [
            f"{self.unknown_id_lines:,} FETCH lines skipped for topic ids without a name "
            f"(FetchRequest v13+ names topics by id): {where}"]

    def finish(self) -> list[dict]:
        """End of input: reads whose next fetchOffset never came get the
        lower bound fetchOffset + 1 (at least one record was returned)."""
        out: list[dict] = []
        for key in list(self.pending):
            self._resolve(key, None, out)
        self.now = float("inf")
        self._release(out)
        return out

    # ------------------------------------------------------------ one FETCH
    def _fetch(self, line_ts: int, desc: dict) -> list[dict]:
        request, response = desc["request"], desc["response"]
        if "replicaState" in request:  # v15+ (KIP-903), tagged: absent for consumers
            replica = request["replicaState"].get("replicaId", -1)
            broker_epoch = request["replicaState"].get("replicaEpoch", -1)
        else:
            replica, broker_epoch = request.get("replicaId", -1), -1
        if replica < 0:
            return self.skip("consumer FETCH")
        if not isinstance(response, dict):
            return self.skip("FETCH without its response")
        if response.get("errorCode", 0) != 0:
            return self.skip(f"FETCH error {response['errorCode']}")
        out: list[dict] = []
        self.now = max(self.now, line_ts)
        # reads that waited too long go out before this request can let later
        # ones past them (not its own follower's: this request is their next)
        self._expire(out, replica)
        fetcher = (replica, desc["requestHeader"].get("clientId", ""))
        session, sid, forgotten = self._session(fetcher, request, response, out)
        arrival = line_ts - desc["totalTimeMs"] + desc["requestQueueTimeMs"]
        received = int(round(arrival))
        read_ts = max(received, int(round(arrival + desc["localTimeMs"])))
        served = self._served(response)
        total = sum(size for _hw, size, _err in served.values())
        # both grains: the request's events go out in line order (HOLD_MS)
        held = self._held(request, session, sid, forgotten, replica, broker_epoch,
                          read_ts, received)
        held.line_ts = line_ts
        self.order.append(held)
        for tp, wanted in self._read(session, held, served, replica):
            self._resolve((replica, *tp), wanted.fetch_offset, out)
            got = served.get(tp)
            if got is not None and got[2]:
                self.skipped[f"partition error {got[2]}"] += 1
                if self.grain == SESSION:
                    self._leave_out(held, session, tp)
                continue
            if wanted.leader_epoch < 0:
                self.skipped["partition without currentLeaderEpoch (FetchRequest < v9)"] += 1
                continue
            ev = {"v": 1, "type": "fetch", "cluster": self.cluster, "ts": read_ts,
                  "topic": tp[0], "partition": tp[1], "leader": self.broker,
                  "leader_epoch": wanted.leader_epoch, "replica": replica,
                  "fetch_offset": wanted.fetch_offset, "received_ts": received}
            if wanted.log_start_offset is not None and wanted.log_start_offset >= 0:
                ev["log_start_offset"] = wanted.log_start_offset
            if broker_epoch >= 0:
                ev["broker_epoch"] = broker_epoch
            held.fetches[tp] = ev
            held.waiting += 1
            size = 0 if got is None else got[1]
            waited = desc.get("remoteTimeMs", 0) > 0
            capped = size >= wanted.max_bytes or total >= request.get("maxBytes", 2**31 - 1)
            if size == 0 or waited:
                # Nothing to read at the (first) read: caught up, LEO exact.
                ev["leader_leo"] = wanted.fetch_offset
                self._append(tp, wanted.leader_epoch, wanted.fetch_offset, read_ts, out, held)
                self._written(ev, held, out)
                if size:  # records came while it waited: LEO rose by its end
                    self._pend(replica, tp, Pending(None, int(round(line_ts)), capped,
                                                    wanted.leader_epoch, held, line_ts))
            else:
                self._pend(replica, tp, Pending(ev, read_ts, capped, wanted.leader_epoch,
                                                held, line_ts))
        self._expire(out)  # its follower's reads this request did not settle
        held.open = False
        # a session that holds nothing (its topics' ids unknown) says nothing
        held.empty = self.grain == PARTITION or (not session.parts
                                                 and "forgotten" not in held.event)
        self._written(None, held, out)
        self._release(out)
        return out

    def _read(self, session: Session, held: Held, served: dict,
              replica: int) -> list[tuple[tuple[str, int], Wanted]]:
        """The session's partitions this request must go through. At the
        partition grain all (each is a `fetch`). At the session grain only
        those the request listed, the response named, or whose previous read
        waits for this next fetchOffset: any other one was read at its held
        fetchOffset with nothing returned, which says nothing new (its LEO was
        already written), so a request costs what it lists, not what its
        session holds."""
        parts = session.parts
        if self.grain == PARTITION:
            return list(parts.items())
        keys = dict.fromkeys(tp for tp, _w in held.listed)
        keys.update(dict.fromkeys(served))
        keys.update(dict.fromkeys(self.waiting.get(replica, ())))
        return [(tp, parts[tp]) for tp in keys if tp in parts]

    # ------------------------------------------------------------ session grain
    def _held(self, request: dict, session: Session, sid: int,
              forgotten: list[tuple[str, int]], replica: int, broker_epoch: int,
              read_ts: int, received: int) -> Held:
        """The request's `fetch_session` event, its partitions still to fill in."""
        epoch = request.get("sessionEpoch", FINAL_EPOCH)
        full = epoch in (INITIAL_EPOCH, FINAL_EPOCH)
        ev = {"v": 1, "type": "fetch_session", "cluster": self.cluster, "ts": read_ts,
              "leader": self.broker, "replica": replica, "received_ts": received,
              "session_id": sid, "session_epoch": epoch, "full": full}
        if broker_epoch >= 0:
            ev["broker_epoch"] = broker_epoch
        listed = []
        for topic in request.get("topics", ()):
            name = self._name(topic)
            for p in topic["partitions"] if name is not None else ():
                tp = (name, p["partition"])
                if tp in session.parts and session.parts[tp].leader_epoch >= 0:
                    listed.append((tp, session.parts[tp]))
        relisted = {tp for tp, _w in listed}
        forgotten = [tp for tp in forgotten if tp not in relisted]
        if forgotten and not full:
            ev["forgotten"] = [{"topic": t, "partition": p} for t, p in forgotten]
        return Held(ev, listed)

    def _leave_out(self, held: Held, session: Session, tp: tuple[str, int]) -> None:
        """A partition whose read failed is taken out of the session, as the
        follower does (it removes a failed partition from its fetcher): the
        partition grain writes no `fetch` for it, and the monitor must not
        count later FETCHes of the session for it either."""
        self.approximate["partitions taken out of their session after a partition error"] += 1
        del session.parts[tp]
        held.listed = [(t, w) for t, w in held.listed if t != tp]
        if not held.event["full"]:
            held.event.setdefault("forgotten", []).append({"topic": tp[0], "partition": tp[1]})

    def _written(self, ev: Optional[dict], held: Optional[Held], out: list) -> None:
        """A `fetch` is complete. Once every read of its request is, the
        request's events (the `fetch`es at the partition grain, its
        `fetch_session` at the session grain) go out in line order."""
        if held is None:  # a read whose fetch went out already
            return
        if ev is not None:
            held.waiting -= 1
        if held.open or held.waiting or held.done:
            return
        held.done = True
        if held.detached:
            self._emit(held, out)
        else:
            self._release(out)

    def _emit(self, held: Held, out: list) -> None:
        """A complete request out: the `append`s its reads showed, then its
        events (the `fetch`es at the partition grain, its `fetch_session`)."""
        held.emitted = True
        for ev in held.before:
            self._write_append(ev, out)
        for tp in held.bounds:  # the log only grows within a leader epoch
            fetch = held.fetches.get(tp)
            written = self.written_leo.get(tp)
            if (fetch is not None and written is not None and written[1] == fetch["leader_epoch"]
                    and written[0] > fetch["leader_leo"]):
                fetch["leader_leo"] = written[0]
        if self.grain == PARTITION:
            out.extend(held.fetches.values())
        elif not held.empty:
            parts = []
            for tp, wanted in held.listed:
                fetch = held.fetches.get(tp)
                p = {"topic": tp[0], "partition": tp[1], "leader_epoch": wanted.leader_epoch,
                     "fetch_offset": wanted.fetch_offset}
                if fetch is not None:
                    p["leader_leo"] = fetch["leader_leo"]
                parts.append(p)
            held.event["partitions"] = parts
            out.append(held.event)
        for ev in held.after:
            self._write_append(ev, out)

    def _release(self, out: list) -> None:
        """Complete requests out in line order; one incomplete for longer than
        HOLD_MS of log time stops holding the others back."""
        order = self.order
        while order:
            held = order[0]
            if held.done:
                order.popleft()
                self._emit(held, out)
            elif self.now - held.line_ts > self.HOLD_MS:
                order.popleft()
                held.detached = True
            else:
                break

    def _session(self, fetcher: tuple[int, str], request: dict, response: dict,
                 out: list) -> tuple[Session, int, list[tuple[str, int]]]:
        """The fetch session after this request (KIP-227, FetchSession.scala),
        its id (a new session's is the response's) and the partitions it
        forgot; reads of those are settled into `out`."""
        replica = fetcher[0]
        epoch = request.get("sessionEpoch", FINAL_EPOCH)
        sid = request.get("sessionId", 0)
        forgotten: list[tuple[str, int]] = []
        session: Optional[Session]  # (one in the end: found or made)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch: the list is all
            self.sessions.pop(sid, None)
            self._replaced(self.fetchers.get(fetcher), request, out)
            session = Session(replica)
            new_id = response.get("sessionId", 0)
            sid = new_id if epoch == INITIAL_EPOCH else 0
            if epoch == INITIAL_EPOCH and new_id:
                self.sessions[new_id] = session
                session.session_id = new_id
        else:
            session = self.sessions.get(sid)
            if session is None:  # the tap started inside it: learn as it goes
                self.approximate["incremental FETCH of a session begun before the tap"] += 1
                session = self.sessions[sid] = Session(replica, session_id=sid)
        self.fetchers[fetcher] = session
        for topic in request.get("forgottenTopicsData", ()):
            name = self._name(topic)
            if name is None:  # an unknown topic id: none of it was held (`topics` below)
                continue
            for p in topic["partitions"]:
                if session.parts.pop((name, p), None) is not None:
                    forgotten.append((name, p))
                self._resolve((replica, name, p), None, out)
        for topic in request.get("topics", ()):
            name = self._name(topic)
            if name is None:
                self.skipped["partitions of an unknown topic id"] += len(topic["partitions"])
                self._unknown_on_line = True
                continue
            for p in topic["partitions"]:
                session.parts[(name, p["partition"])] = Wanted(
                    p["fetchOffset"], p.get("currentLeaderEpoch", -1),
                    p.get("partitionMaxBytes", 2**31 - 1), p.get("logStartOffset"))
        return session, sid, forgotten

    def _replaced(self, old: Optional[Session], request: dict, out: list) -> None:
        """A full FETCH starts the fetcher's session anew (a new session id,
        often sessionId 0 after an error: the old id is not named): it lists
        every partition the follower still fetches from this leader, so a
        partition of the old session it does not list has left it, as if
        forgotten. Its read still waiting for its LEO (the next fetchOffset,
        which will not come) is settled now with its lower bound, so the
        request it belongs to is not held back."""
        if old is None:
            return
        if self.sessions.get(old.session_id) is old:
            del self.sessions[old.session_id]
        listed = {(self._name(t), p["partition"]) for t in request.get("topics", ())
                  for p in t["partitions"]}
        for tp in old.parts:
            if tp not in listed:
                self._resolve((old.replica, *tp), None, out)

    def _name(self, topic: dict) -> Optional[str]:
        if "topic" in topic:  # v0-12
            return topic["topic"]
        return self.topic_names(topic["topicId"])

    def _served(self, response: dict) -> dict[tuple[Optional[str], int], tuple[int, int, int]]:
        """(topic, partition) -> (highWatermark, records size, errorCode)."""
        served = {}
        for topic in response.get("responses", ()):
            name = self._name(topic)
            for p in topic["partitions"]:
                size = p.get("recordsSizeInBytes", 0) or 0
                served[(name, p["partitionIndex"])] = (p["highWatermark"], size,
                                                       p.get("errorCode", 0))
        return served

    # ------------------------------------------------------------ the leader's LEO
    def _resolve(self, key: tuple[int, str, int], next_offset: Optional[int],
                 out: list, reason: str = "reads whose LEO is only a lower bound") -> None:
        pending = self.pending.pop(key, None)
        if pending is None:
            return
        waiting = self.waiting.get(key[0])
        if waiting is not None:
            waiting.pop(key[1:], None)
        ev = pending.event
        base = ev["fetch_offset"] if ev is not None else -1
        if next_offset is None or next_offset <= base:  # never came, or truncated
            if ev is None:  # the fetch went out exact: only an `append` is not written
                self.approximate[self.NO_NEXT_APPEND if reason == self.NO_NEXT_REQUEST
                                 else reason] += 1
                return
            self.approximate[reason] += 1
            leo = max(base + 1, self._known_leo(key[1:], pending))
            bound = True
        else:
            leo = next_offset
            bound = pending.capped
            if pending.capped:
                self.approximate["reads whose LEO is only a lower bound"] += 1
                leo = max(leo, self._known_leo(key[1:], pending))
        if bound and ev is not None and pending.held is not None:
            pending.held.bounds.add(key[1:])
        self._append(key[1:], pending.leader_epoch, leo, pending.ts, out, pending.held,
                     after=ev is None)
        if ev is not None:
            ev["leader_leo"] = leo
            self._written(ev, pending.held, out)

    def _pend(self, replica: int, tp: tuple[str, int], pending: Pending) -> None:
        """A read waits for its LEO: the follower's next fetchOffset."""
        self.waiting.setdefault(replica, {})[tp] = None
        key = (replica, *tp)
        self.pending[key] = pending
        self.aging.append((pending.line_ts, key, pending))

    def _expire(self, out: list, spare: int = -1) -> None:
        """Reads whose follower has not sent its next request within HOLD_MS
        of log time are settled with the lower bound (as at the end of the
        input), so their requests go out now, in line order, instead of when
        the follower comes back (seconds later after a pause: late for the
        monitor's watermark). That next request, when it comes, finds nothing
        pending and is read as any other. A read whose `fetch` went out
        already (records came during its purgatory wait) only loses the
        `append` its next fetchOffset would give: written now it would be
        late. `spare`: the replica whose request is being read (it is the next
        request of that replica's reads)."""
        aging, pending, kept = self.aging, self.pending, []
        while aging and self.now - aging[0][0] > self.HOLD_MS:
            item = aging.popleft()
            key, p = item[1], item[2]
            if pending.get(key) is not p:
                continue  # settled already
            if key[0] == spare:
                kept.append(item)
            else:
                self._resolve(key, None, out, self.NO_NEXT_REQUEST)
        aging.extendleft(reversed(kept))

    def _known_leo(self, tp: tuple[str, int], pending: Pending) -> int:
        """The highest LEO other reads saw up to this read (same leader epoch):
        the leader's log only grows within an epoch."""
        return max((leo for ts, epoch, leo in self.appended.get(tp, ())
                    if ts <= pending.ts and epoch == pending.leader_epoch), default=-1)

    def _append(self, tp: tuple[str, int], leader_epoch: int, leo: int, ts: int,
                out: list, held: Optional[Held] = None, after: bool = False) -> None:
        """The leader's LEO `leo` seen at a read. At the session grain the
        `append` goes out just before the request of that read, in line order
        (a request before it in the log read the partition before the records
        came: a parked fetch answered before the produce appended), and only
        if it raises the LEO written before it in that order: reads are
        resolved in the order their followers' next requests come, not in
        line order."""
        if leader_epoch < 0:
            return
        if leo > self.leo.get(tp, -1):
            self.leo[tp] = leo
            self.appended.setdefault(tp, deque(maxlen=16)).append((ts, leader_epoch, leo))
        if leo <= self.written_leo.get(tp, (-1, -1))[0]:
            return
        ev = {"v": 1, "type": "append", "cluster": self.cluster, "ts": ts,
              "topic": tp[0], "partition": tp[1], "leader": self.broker,
              "leader_epoch": leader_epoch, "leader_leo": leo}
        if held is not None and not held.detached and not held.emitted:
            (held.after if after else held.before).append(ev)
        else:
            self._write_append(ev, out)

    def _write_append(self, ev: dict, out: list) -> None:
        tp = (ev["topic"], ev["partition"])
        if ev["leader_leo"] > self.written_leo.get(tp, (-1, -1))[0]:
            self.written_leo[tp] = (ev["leader_leo"], ev["leader_epoch"])
            out.append(ev)

