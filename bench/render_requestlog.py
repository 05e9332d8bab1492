"""Render the simulator's contract events as what brokers write (issue 23).

Each `fetch_session` becomes one `Completed request:` FETCH line (v12, topic
names, the shape of tests/fixtures/tap/kafka-request-v12.log, i.e.
RequestChannel.updateRequestMetrics / RequestConvertToJson) in the leader's
request log DIR/kafka-request-<leader>.log. All timings are 0, so the line
time is both received_ts and ts (ms precision, UTC).

The request lists what the event lists (KIP-227: the partitions whose fetch
state changed, and the forgotten ones). The response is the leader's read of
every partition of the session, as Kafka's IncrementalFetchContext writes it
(core/src/main/scala/kafka/server/FetchSession.scala,
`updateAndGenerateResponseData` / `CachedPartition.maybeUpdateResponseData`:
"Partitions with new data are always included in the response"): the listed
partitions, plus every partition the session holds unlisted whose leader had
appended beyond its held fetchOffset (the `append` events before the request;
the simulator's rule for an unlisted partition, docs/tap.md). Leaving such a
read out would tell the tap the follower was at the leader's LEO (a read of
nothing) when it was not. recordsSizeInBytes is 100 per offset read; a read
whose follower's next fetchOffset (its next request to this leader) is below
the leader's LEO is written size-capped (`recordsSizeInBytes` =
`partitionMaxBytes`), as Kafka caps it, otherwise below the cap so the tap
takes the next fetchOffset as the LEO. (A real response also names partitions
whose high watermark or log start offset moved, with no records; the tap reads
those as a read of nothing, as it reads an absent one. Not rendered: HW is 0.)

`leader` and `broker` events are not rendered as a metadata log or
state-change.log (the request-log tap takes leaders from another tap, docs/tap.md);
they are copied to DIR/metadata-events.jsonl so that `isr replay --merge` can
combine them with the request-log tap's output. `append` events are not
written (the request log has no produce lines for the tap; it infers the
leader's LEO from the fetches).

  python bench/render_requestlog.py EVENTS.jsonl DIR
"""
import datetime
import json
import os
import sys
from array import array

MAX_PART = 1048576
NONE = -1  # no next fetchOffset (end of input, or the partition left the session)


def when(ts_ms: int) -> str:
    d = datetime.datetime.fromtimestamp(ts_ms / 1000, datetime.timezone.utc)
    return d.strftime("%Y-%m-%d %H:%M:%S,") + "%03d" % (ts_ms % 1000)


def by_topic(parts, key):
    out: dict = {}
    for p in parts:
        out.setdefault(p[0], []).append(p)
    return [key(t, ps) for t, ps in out.items()]


def size(fo: int, leo: int, next_fo: int) -> int:
    """recordsSizeInBytes of one read: a follower that got less than the leader's
    LEO (its next fetchOffset below it) was capped, as in Kafka; else the bytes
    up to the LEO, below the cap, so the tap takes the next fetchOffset as the
    LEO (exact)."""
    if leo <= fo:
        return 0
    if next_fo != NONE and next_fo < leo:
        return MAX_PART
    return min((leo - fo) * 100, MAX_PART - 1)


class Sessions:
    """The leaders' fetch sessions as the simulator's events define them, and
    each partition's leader LEO from the `append` events."""

    def __init__(self) -> None:
        self.held: dict = {}  # (leader, replica) -> {(topic, partition): (fetch_offset, leader_epoch)}
        self.leo: dict = {}   # (topic, partition) -> (leader, leader_epoch, leo)

    def append(self, e: dict) -> None:
        self.leo[(e["topic"], e["partition"])] = (e["leader"], e["leader_epoch"], e["leader_leo"])

    def reads(self, e: dict) -> tuple[list, dict]:
        """The request's response entries [(topic, partition, fetch_offset, leo)]
        (the listed partitions, then the unlisted ones read with records) and
        the session after it."""
        key = (e["leader"], e["replica"])
        held = {} if e["full"] else self.held.setdefault(key, {})
        if e["full"]:
            self.held[key] = held
        for p in e.get("forgotten") or ():
            held.pop((p["topic"], p["partition"]), None)
        out = []
        listed = set()
        for p in e["partitions"]:
            tp = (p["topic"], p["partition"])
            held[tp] = (p["fetch_offset"], p["leader_epoch"])
            listed.add(tp)
            out.append((tp[0], tp[1], p["fetch_offset"], p["leader_leo"]))
        for tp, (fo, epoch) in held.items():
            if tp in listed:
                continue
            known = self.leo.get(tp)
            if known is not None and known[0] == e["leader"] and known[1] == epoch and known[2] > fo:
                out.append((tp[0], tp[1], fo, known[2]))
        return out, held


def line(e: dict, corr: int, served: list, nexts, first: int) -> str:
    full = e["full"]
    req_topics = by_topic([(p["topic"], p) for p in e["partitions"]], lambda t, ps: {
        "topic": t, "partitions": [
            {"partition": p["partition"], "currentLeaderEpoch": p["leader_epoch"],
             "fetchOffset": p["fetch_offset"], "lastFetchedEpoch": p["leader_epoch"],
             "logStartOffset": 0, "partitionMaxBytes": MAX_PART} for _t, p in ps]})
    forgotten = by_topic([(p["topic"], p) for p in e.get("forgotten") or ()], lambda t, ps: {
        "topic": t, "partitions": [p["partition"] for _t, p in ps]})
    sized = [(t, p, size(fo, leo, nexts[first + i])) for i, (t, p, fo, leo) in enumerate(served)]
    resp = by_topic(sized, lambda t, ps: {"topic": t, "partitions": [
        {"partitionIndex": p, "errorCode": 0, "highWatermark": 0,
         "lastStableOffset": 0, "logStartOffset": 0, "abortedTransactions": None,
         "preferredReadReplica": -1, "recordsSizeInBytes": n}
        for _t, p, n in ps]})
    desc = {"isForwarded": False,
            "requestHeader": {"requestApiKey": 1, "requestApiVersion": 12, "correlationId": corr,
                              "clientId": "broker-%d-fetcher-0" % e["replica"],
                              "requestApiKeyName": "FETCH"},
            "request": {"replicaId": e["replica"], "maxWaitMs": 500, "minBytes": 1,
                        "maxBytes": 10485760, "isolationLevel": 0,
                        "sessionId": 0 if full else e["session_id"],
                        "sessionEpoch": e["session_epoch"], "topics": req_topics,
                        "forgottenTopicsData": forgotten, "rackId": ""},
            "response": {"throttleTimeMs": 0, "errorCode": 0, "sessionId": e["session_id"],
                         "responses": resp},
            "connection": "10.0.0.%d:9092-10.0.0.%d:40000-0" % (e["leader"], e["replica"]),
            "totalTimeMs": 0.0, "requestQueueTimeMs": 0.0, "localTimeMs": 0.0,
            "remoteTimeMs": 0.0, "throttleTimeMs": 0, "responseQueueTimeMs": 0.0,
            "sendTimeMs": 0.0, "securityProtocol": "PLAINTEXT", "principal": "User:ANONYMOUS",
            "listener": "REPLICATION",
            "clientInformation": {"softwareName": "unknown", "softwareVersion": "unknown"}}
    return "[%s] DEBUG Completed request:%s (kafka.request.logger)\n" % (
        when(e["ts"]), json.dumps(desc, separators=(",", ":")))


def _events(src: str):
    """SRC's events in order, each as (line, event, reads): `reads` is what
    the leader's logs gave a fetch_session (`Sessions.reads`: served and
    held partitions), None for other events. Both passes over SRC (the next
    fetch offsets, then the logs) walk it this one way, so they agree on
    every read's index."""
    sessions = Sessions()
    for raw in open(src):
        e = json.loads(raw)
        t = e["type"]
        if t == "append":
            sessions.append(e)
        yield raw, e, sessions.reads(e) if t == "fetch_session" else None


def next_offsets(src: str) -> array:
    """For every read of every response (in the order `Sessions.reads` gives
    them), the follower's next fetchOffset of that partition: its offset in
    the fetcher's next request to the same leader (listed or held), NONE if
    it left the session or no request came."""
    nexts = array("q")
    waiting: dict = {}  # (leader, replica) -> [(tp, index)] of its last request
    for _raw, e, reads in _events(src):
        if reads is not None:
            served, held = reads
            key = (e["leader"], e["replica"])
            for tp, i in waiting.get(key, ()):
                got = held.get(tp)
                nexts[i] = got[0] if got is not None else NONE
            first = len(nexts)
            nexts.extend([NONE] * len(served))
            waiting[key] = [((t_, p), first + i) for i, (t_, p, _fo, _leo) in enumerate(served)]
    return nexts


def render(src: str, out: str) -> list:
    """Write DIR's request logs and metadata-events.jsonl; the leaders written."""
    os.makedirs(out, exist_ok=True)
    nexts = next_offsets(src)
    logs: dict = {}
    corr = first = 0
    with open(os.path.join(out, "metadata-events.jsonl"), "w") as meta:
        for raw, e, reads in _events(src):
            if reads is not None:
                corr += 1
                f = logs.get(e["leader"])
                if f is None:
                    f = logs[e["leader"]] = open(
                        os.path.join(out, "kafka-request-%d.log" % e["leader"]), "w")
                served, _held = reads
                f.write(line(e, corr, served, nexts, first))
                first += len(served)
            elif e["type"] in ("leader", "broker", "isr"):
                meta.write(raw)
    for f in logs.values():
        f.close()
    return sorted(logs)


def main(src: str, out: str) -> None:
    print("brokers with request logs:", render(src, out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
