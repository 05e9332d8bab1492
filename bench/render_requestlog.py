"""Render the simulator's contract events as what brokers write (issue 23, WIP).

Each `fetch_session` becomes one `Completed request:` FETCH line (v12, topic
names, the shape of tests/fixtures/tap/kafka-request-v12.log, i.e.
RequestChannel.updateRequestMetrics / RequestConvertToJson) in the leader's
request log DIR/kafka-request-<leader>.log. All timings are 0, so the line
time is both received_ts and ts (ms precision, UTC). recordsSizeInBytes is
100 per offset the leader held beyond fetchOffset (leader_leo - fetch_offset).

WIP: `leader` and `broker` events are NOT yet rendered as a metadata dump or
state-change.log; they are copied to DIR/metadata-events.jsonl so that
`isr replay --merge` can combine them with the request-log tap's output.
`append` events are dropped (the tap infers the leader's LEO from fetches).

  python bench/render_requestlog.py EVENTS.jsonl DIR
"""
import datetime
import json
import os
import sys


def when(ts_ms: int) -> str:
    d = datetime.datetime.fromtimestamp(ts_ms / 1000, datetime.timezone.utc)
    return d.strftime("%Y-%m-%d %H:%M:%S,") + "%03d" % (ts_ms % 1000)


def by_topic(parts, key):
    out: dict = {}
    for p in parts:
        out.setdefault(p["topic"], []).append(p)
    return [key(t, ps) for t, ps in out.items()]


MAX_PART = 1048576


def size(p: dict, next_fo) -> int:
    """recordsSizeInBytes of one read: a follower that got less than the leader's
    LEO (its next fetchOffset below leader_leo) was capped, as in Kafka; else
    the bytes up to the LEO, below the cap, so the tap takes the next fetchOffset
    as the LEO (exact)."""
    fo, leo = p["fetch_offset"], p["leader_leo"]
    if leo <= fo:
        return 0
    if next_fo is not None and next_fo < leo:
        return MAX_PART
    return min((leo - fo) * 100, MAX_PART - 1)


def line(e: dict, corr: int, nexts: list) -> str:
    full = e["full"]
    req_topics = by_topic(e["partitions"], lambda t, ps: {"topic": t, "partitions": [
        {"partition": p["partition"], "currentLeaderEpoch": p["leader_epoch"],
         "fetchOffset": p["fetch_offset"], "lastFetchedEpoch": p["leader_epoch"],
         "logStartOffset": 0, "partitionMaxBytes": 1048576} for p in ps]})
    forgotten = by_topic(e.get("forgotten") or [], lambda t, ps: {
        "topic": t, "partitions": [p["partition"] for p in ps]})
    resp = by_topic(e["partitions"], lambda t, ps: {"topic": t, "partitions": [
        {"partitionIndex": p["partition"], "errorCode": 0, "highWatermark": 0,
         "lastStableOffset": 0, "logStartOffset": 0, "abortedTransactions": None,
         "preferredReadReplica": -1,
         "recordsSizeInBytes": size(p, nexts[id(p)])}
        for p in ps]})
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


def next_offsets(src: str) -> list:
    """For each fetch_session (in order), each listed partition's next listed
    fetchOffset by the same follower from the same leader (None at the end)."""
    seen: dict = {}
    per_event = []
    for raw in open(src):
        e = json.loads(raw)
        if e["type"] != "fetch_session":
            continue
        row = []
        for p in e["partitions"]:
            k = (e["leader"], e["replica"], p["topic"], p["partition"])
            if k in seen:
                prev_row, i = seen[k]
                prev_row[i] = p["fetch_offset"]
            row.append(None)
            seen[k] = (row, len(row) - 1)
        per_event.append(row)
    return per_event


def main(src: str, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    rows = iter(next_offsets(src))
    logs: dict = {}
    meta = open(os.path.join(out, "metadata-events.jsonl"), "w")
    corr = 0
    for raw in open(src):
        e = json.loads(raw)
        t = e["type"]
        if t == "fetch_session":
            corr += 1
            f = logs.get(e["leader"])
            if f is None:
                f = logs[e["leader"]] = open(os.path.join(out, "kafka-request-%d.log" % e["leader"]), "w")
            row = next(rows)
            f.write(line(e, corr, {id(p): n for p, n in zip(e["partitions"], row)}))
        elif t in ("leader", "broker", "isr"):
            meta.write(raw)
    for f in logs.values():
        f.close()
    meta.close()
    print("brokers with request logs:", sorted(logs))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
