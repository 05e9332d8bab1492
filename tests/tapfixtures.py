"""Kafka's own log formats, written as the broker writes them (docs/tap.md
cites the sources at apache/kafka 1eb7644349cb07139d6a3c1ad1986979647cac99):

- request log: `[%d] %p %m (%c)` (config/log4j.properties) with
  `Completed request:` + RequestConvertToJson.requestDescMetrics; the request
  and response objects follow FetchRequest.json / FetchResponse.json field by
  field, in schema order, camelCase (JsonConverterGenerator), tagged fields
  only when not at their default, records as `recordsSizeInBytes`;
- server.log: kafka.cluster.Partition's lines by version;
- metadata dump: DumpLogSegments' record lines with ClusterMetadataLogMessageParser
  payloads.

`follower_outage` simulates one partition's leader and two followers with
Kafka's rules (long polls, purgatory, ISR checks every lag/2) and returns the
leader's request log and server.log for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

TOPIC_ID = "kgnYg1PfR4-BTKr7X8eaDw"  # Uuid.toString: url-safe base64, no padding
REPLICA_MAX_BYTES = 1048576          # replica.fetch.max.bytes
RESPONSE_MAX_BYTES = 10485760        # replica.fetch.response.max.bytes


def stamp(ms: int) -> str:
    """log4j's %d (yyyy-MM-dd HH:mm:ss,SSS), broker in UTC."""
    dt = datetime.fromtimestamp(ms // 1000, timezone.utc)
    return dt.strftime("%Y-%m-%d %H:%M:%S") + f",{ms % 1000:03d}"


def log4j(ms: int, level: str, message: str, logger: str) -> str:
    return f"[{stamp(ms)}] {level} {message} ({logger})\n"


def _topic_key(version: int, topic: str) -> dict:
    return {"topicId": TOPIC_ID} if version >= 13 else {"topic": topic}


def fetch_request(version: int, replica: int, broker_epoch: int, session_id: int,
                  session_epoch: int, parts: list[dict], topic: str = "orders",
                  forgotten: tuple = ()) -> dict:
    """FetchRequest.json fields in order; `parts`: partition, currentLeaderEpoch,
    fetchOffset, lastFetchedEpoch, logStartOffset."""
    req: dict = {}
    if version <= 14:
        req["replicaId"] = replica
    else:
        req["replicaState"] = {"replicaId": replica, "replicaEpoch": broker_epoch}
    req.update({"maxWaitMs": 500, "minBytes": 1, "maxBytes": RESPONSE_MAX_BYTES,
                "isolationLevel": 0, "sessionId": session_id, "sessionEpoch": session_epoch})
    req["topics"] = [{**_topic_key(version, topic), "partitions": [
        {"partition": p["partition"], "currentLeaderEpoch": p["currentLeaderEpoch"],
         "fetchOffset": p["fetchOffset"], "lastFetchedEpoch": p["lastFetchedEpoch"],
         "logStartOffset": p["logStartOffset"], "partitionMaxBytes": REPLICA_MAX_BYTES}
        for p in parts]}] if parts else []
    req["forgottenTopicsData"] = [{**_topic_key(version, topic), "partitions": list(forgotten)}] \
        if forgotten else []
    req["rackId"] = ""
    return req


def fetch_response(version: int, session_id: int, parts: list[dict], topic: str = "orders",
                   error: int = 0) -> dict:
    """FetchResponse.json in order; `parts`: partitionIndex, highWatermark, size."""
    return {"throttleTimeMs": 0, "errorCode": error, "sessionId": session_id,
            "responses": [{**_topic_key(version, topic), "partitions": [
                {"partitionIndex": p["partitionIndex"], "errorCode": p.get("errorCode", 0),
                 "highWatermark": p["highWatermark"], "lastStableOffset": p["highWatermark"],
                 "logStartOffset": 0, "abortedTransactions": None, "preferredReadReplica": -1,
                 "recordsSizeInBytes": p["size"]} for p in parts]}] if parts else []}


def completed(end_ms: int, version: int, request: dict, response: dict, replica: int,
              total: float, queue: float, local: float, remote: float,
              api: str = "FETCH", key: int = 1) -> str:
    """One request-log line, as RequestChannel writes it at the end of a request."""
    desc = {"isForwarded": False,
            "requestHeader": {"requestApiKey": key, "requestApiVersion": version,
                              "correlationId": 4711, "clientId": f"broker-{replica}-fetcher-0",
                              "requestApiKeyName": api},
            "request": request, "response": response,
            "connection": f"10.0.0.1:9092-10.0.0.{replica}:40000-3",
            "totalTimeMs": total, "requestQueueTimeMs": queue, "localTimeMs": local,
            "remoteTimeMs": remote, "throttleTimeMs": 0,
            "responseQueueTimeMs": round(max(total - queue - local - remote, 0) / 2, 3),
            "sendTimeMs": round(max(total - queue - local - remote, 0) / 2, 3),
            "securityProtocol": "PLAINTEXT", "principal": "User:ANONYMOUS",
            "listener": "REPLICATION", "clientInformation": {"softwareName": "unknown",
                                                            "softwareVersion": "unknown"}}
    return log4j(end_ms, "DEBUG", "Completed request:" + json.dumps(desc, separators=(",", ":")),
                 "kafka.request.logger")


# ------------------------------------------------------------ server.log
def partition_line(ms: int, topic: str, partition: int, broker: int, text: str) -> str:
    return log4j(ms, "INFO", f"[Partition {topic}-{partition} broker={broker}] {text}",
                 "kafka.cluster.Partition")


def shrinking(isr: list[int], new: list[int], hw: int, leo: int, out: dict[int, tuple]) -> str:
    replicas = " ".join(f"(brokerId: {b}, endOffset: {e}, lastCaughtUpTimeMs: {t})"
                        for b, (e, t) in out.items())
    return (f"Shrinking ISR from {','.join(map(str, isr))} to {','.join(map(str, new))}. "
            f"Leader: (highWatermark: {hw}, endOffset: {leo}). Out of sync replicas: {replicas}.")


def isr_updated(version: str, isr: list[int], epoch: int, under_min: bool = False) -> str:
    ids = ",".join(map(str, isr))
    if version == "2.7":
        return f"ISR updated to [{ids}] and zkVersion updated to [{epoch}]"
    if version == "2.8":
        return f"ISR updated to {ids} and version updated to [{epoch}]"
    return f"ISR updated to {ids} {'(under-min-isr)' if under_min else ''} and version updated to {epoch}"


# ------------------------------------------------------------ metadata dump
def dump_record(offset: int, ms: int, kind: str, version: int, data: dict) -> str:
    payload = json.dumps({"type": kind, "version": version, "data": data}, separators=(",", ":"))
    return (f"| offset: {offset} CreateTime: {ms} keySize: -1 valueSize: {len(payload) // 2} "
            f"sequence: -1 headerKeys: [] payload: {payload}\n")


# ------------------------------------------------------------ a follower outage
@dataclass
class Follower:
    id: int
    leo: int = 0                 # = the fetchOffset it sends
    known_leo: int = 0           # its LEO as the leader knows it (last fetchOffset read)
    next_at: int = 0             # its next request arrives then
    last_caught_up: int = 0
    last_fetch_leo: int = 0      # the leader's LEO at its previous fetch
    last_fetch_ts: int = 0
    waiting_since: int = -1      # in purgatory since (its request's arrival)
    session_epoch: int = 0
    sent_offset: int = -1        # the fetchOffset its session last carried


@dataclass
class Outage:
    request_log: list[str] = field(default_factory=list)
    server_log: list[str] = field(default_factory=list)
    shrinks: list[int] = field(default_factory=list)   # ts of the leader's decisions
    expands: list[int] = field(default_factory=list)


def follower_outage(t0: int, version: int = 15, seconds: int = 90, stop_ms=(10_000, 50_000),
                    lag_ms: int = 30_000, server_version: str = "3.x") -> Outage:
    """Leader 1 of orders-0 (leader epoch 4) with followers 2 and 3; 10 records
    of 100 bytes appended every 200 ms; follower 3 sends no fetch from
    stop_ms[0] to stop_ms[1]. Kafka 3.x's rules: the fetch state is updated at
    the first read (Partition.updateFollowerFetchState, lastCaughtUpTime),
    an empty read waits in purgatory up to maxWaitMs, the ISR is checked
    every lag/2 from t0 and expanded on a fetch at or above the HW."""
    out = Outage()
    state = {"leo": 0, "hw": 0, "isr": [1, 2, 3], "part_epoch": 10}
    followers = {r: Follower(r, next_at=t0 + 7 * r) for r in (2, 3)}
    for t in range(t0, t0 + seconds * 1000):
        if (t - t0) % 200 == 0 and t > t0:
            state["leo"] += 10
        if t % (lag_ms // 2) == 0 and t > t0:  # a broker started at a multiple of lag/2
            _maybe_shrink(out, state, followers, t, lag_ms, server_version)
        for f in followers.values():
            if t < f.next_at:
                continue
            if f.waiting_since < 0:  # a request arrives; the leader reads at once
                if f.id == 3 and stop_ms[0] <= t - t0 < stop_ms[1]:
                    continue  # stopped: no new request (one in purgatory still ends)
                _update_fetch_state(out, state, followers, f, t, server_version)
                if f.leo >= state["leo"]:
                    f.waiting_since = t  # nothing to read: purgatory (long poll)
                else:
                    _serve(out, version, f, 1000 + f.id, t, t, state, 0.0)
            elif state["leo"] > f.leo or t - f.waiting_since >= 500:
                _serve(out, version, f, 1000 + f.id, f.waiting_since, t, state,
                       float(t - f.waiting_since))
    return out


def _update_fetch_state(out, state, followers, f, t, server_version) -> None:
    leo = state["leo"]
    if f.leo >= leo:
        f.last_caught_up = t
    elif f.leo >= f.last_fetch_leo:
        f.last_caught_up = max(f.last_caught_up, f.last_fetch_ts)
    f.last_fetch_leo, f.last_fetch_ts, f.known_leo = leo, t, f.leo
    isr = state["isr"]
    if f.id not in isr and f.known_leo >= state["hw"]:  # maybeExpandIsr
        state["isr"] = isr = sorted(isr + [f.id])
        state["part_epoch"] += 1
        out.server_log.append(partition_line(t + 4, "orders", 0, 1, isr_updated(
            server_version, isr, state["part_epoch"])))
        out.expands.append(t)
    state["hw"] = max(state["hw"], min([leo] + [followers[r].known_leo for r in isr if r != 1]))


def _maybe_shrink(out, state, followers, t, lag_ms, server_version) -> None:
    isr = state["isr"]
    late = [r for r in isr if r != 1 and t - followers[r].last_caught_up > lag_ms]
    if not late:
        return
    new = [r for r in isr if r not in late]
    out.server_log.append(partition_line(t, "orders", 0, 1, shrinking(
        isr, new, state["hw"], state["leo"],
        {r: (followers[r].known_leo, followers[r].last_caught_up) for r in late})))
    state["part_epoch"] += 1
    out.server_log.append(partition_line(t + 4, "orders", 0, 1, isr_updated(
        server_version, new, state["part_epoch"], under_min=False)))
    out.shrinks.append(t)
    state["isr"] = new


def _serve(out: Outage, version: int, f: Follower, session_id: int, arrived: int, done: int,
           state: dict, remote: float) -> None:
    """Answer f's fetch (arrived, read at `done`) and log it: an incremental
    session lists the partition only when its fetchOffset changed, and the
    response only when it carries records (or on the full first fetch)."""
    leo, hw = state["leo"], state["hw"]
    full = f.session_epoch == 0
    wanted = [{"partition": 0, "currentLeaderEpoch": 4, "fetchOffset": f.leo,
               "lastFetchedEpoch": 4, "logStartOffset": 0}]
    changed = full or f.sent_offset != f.leo
    request = fetch_request(version, f.id, 100 + f.id, 0 if full else session_id,
                            f.session_epoch, wanted if changed else [])
    size = (leo - f.leo) * 100
    shown = [{"partitionIndex": 0, "highWatermark": hw, "size": size}] if (full or size) else []
    end = done + 1  # the response is sent 1 ms after the read
    out.request_log.append(completed(end, version, request, fetch_response(version, session_id,
                                                                            shown),
                                     f.id, float(end - arrived), 0.05, 0.25, remote))
    f.sent_offset = f.leo
    f.session_epoch += 1
    f.leo = leo
    f.waiting_since = -1
    f.next_at = end + 1


def cluster_dump(t0: int, leader_epoch: int = 4) -> list[str]:
    """The metadata records of a 3-broker cluster with orders-0 led by 1 at
    `leader_epoch` (a PartitionRecord starts at epoch 0: the changes that
    follow bring it there), written before t0."""
    lines = [dump_record(0, t0 - 5000, "TOPIC_RECORD", 0, {"name": "orders", "topicId": TOPIC_ID})]
    for b in (1, 2, 3):
        lines.append(dump_record(2 * b - 1, t0 - 4000 + b, "REGISTER_BROKER_RECORD", 3, {
            "brokerId": b, "isMigratingZkBroker": False, "incarnationId": "Kq2rZzJtQ2mDqXlHn0bC1w",
            "brokerEpoch": 100 + b, "endPoints": [{"name": "PLAINTEXT", "host": f"kafka-{b}",
                                                   "port": 9092, "securityProtocol": 0}],
            "features": [], "rack": None, "fenced": True, "inControlledShutdown": False,
            "logDirs": ["6Tv1xj7YRwqFc1pC8Yk5mA"]}))
        lines.append(dump_record(2 * b, t0 - 3500 + b, "BROKER_REGISTRATION_CHANGE_RECORD", 0,
                                 {"brokerId": b, "brokerEpoch": 100 + b, "fenced": -1}))
    lines.append(dump_record(7, t0 - 3000, "PARTITION_RECORD", 1, {
        "partitionId": 0, "topicId": TOPIC_ID, "replicas": [1, 2, 3], "isr": [1, 2, 3],
        "removingReplicas": [], "addingReplicas": [], "leader": 1, "leaderEpoch": 0,
        "partitionEpoch": 0, "directories": ["6Tv1xj7YRwqFc1pC8Yk5mA"] * 3}))
    for k in range(leader_epoch):  # preferred-leader moves away and back
        lines.append(dump_record(8 + k, t0 - 2000 + k, "PARTITION_CHANGE_RECORD", 0, {
            "partitionId": 0, "topicId": TOPIC_ID, "leader": 2 if k % 2 == 0 else 1}))
    return lines


# ------------------------------------------------------------ server.log, every version
# Partition.scala's wordings by version (docs/tap.md cites each tag). Each
# entry: the versions, the logIdent style, the shrink and expand proposals
# (None: not logged), the commit line (None: TRACE, not in an INFO log) and
# the refusal line (None: DEBUG).
SERVER_LOG_WORDINGS = {
    "0.9": ("0.9.0.0-0.10.1", "old", "Shrinking ISR for partition [{t},{p}] from {a} to {b}",
            "Expanding ISR for partition [{t},{p}] from {a} to {b}", None,
            "Cached zkVersion [{v}] not equal to that in zookeeper, skip updating ISR"),
    "0.10.2": ("0.10.2", "old", "Shrinking ISR for partition [{t},{p}] from {a} to {b}",
               "Expanding ISR for partition {t}-{p} from {a} to {b}", None,
               "Cached zkVersion [{v}] not equal to that in zookeeper, skip updating ISR"),
    "0.11": ("0.11", "old", "Shrinking ISR from {a} to {b}", "Expanding ISR from {a} to {b}", None,
             "Cached zkVersion [{v}] not equal to that in zookeeper, skip updating ISR"),
    "1.0": ("1.0-2.1", "new", "Shrinking ISR from {a} to {b}", "Expanding ISR from {a} to {b}",
            None, "Cached zkVersion [{v}] not equal to that in zookeeper, skip updating ISR"),
    "2.2": ("2.2-2.3", "new", "Shrinking ISR from {a} to {b}. {numbers}.",
            "Expanding ISR from {a} to {b}", None,
            "Cached zkVersion [{v}] not equal to that in zookeeper, skip updating ISR"),
    "2.4": ("2.4-2.6, 2.7 with inter.broker.protocol.version < 2.7", "new",
            "Shrinking ISR from {a} to {b}. {numbers}.", "Expanding ISR from {a} to {b}",
            "ISR updated to [{b}] and zkVersion updated to [{v}]",
            "Cached zkVersion {v} not equal to that in zookeeper, skip updating ISR"),
    "2.7": ("2.7 (AlterIsr)", "new", "Shrinking ISR from {a} to {b}. {numbers}.", None,
            "ISR updated from AlterIsr to {b} and version updated to [{v}]", None),
    "2.8": ("2.8", "new", "Shrinking ISR from {a} to {b}. {numbers}.", None,
            "ISR updated to {b} and version updated to [{v}]", None),
    "3.0": ("3.0", "new", "Shrinking ISR from {a} to {b}. {numbers}.", None,
            "ISR updated to {b} and version updated to [{v}]", None),
    "3.1": ("3.1-3.2", "new", "Shrinking ISR from {a} to {b}. {numbers}.", None,
            "ISR updated to {b} and version updated to {v}", None),
    "3.3": ("3.3-3.4", "new", "Shrinking ISR from {a} to {b}. {numbers}.", None,
            "ISR updated to {b} and version updated to {v}", "REJECTED"),
    "3.5": ("3.5", "new", "Shrinking ISR from {a} to {b}. {numbers}.", None,
            "ISR updated to {b} {under}and version updated to {v}", "REJECTED"),
    "3.6": ("3.6-4.3", "new", "Shrinking ISR from {a} to {b}. {numbers}.", None,
            "ISR updated to {b} {under}and version updated to {v}", "REJECTED"),
}
OLD_STYLE_PARTITION = "Partition [{t},{p}] on broker {n}: "
NEW_STYLE_PARTITION = "[Partition {t}-{p} broker={n}] "


def _leader_numbers(version: str, out: list[tuple[int, object, int]], hw: int, leo: int) -> str:
    """`Leader: (...). Out of sync replicas: (...)`: endOffset only before 3.6,
    `unknown` possible from 3.0, lastCaughtUpTimeMs from 3.6."""
    with_time = version == "3.6"
    parts = [f"(brokerId: {b}, endOffset: {e}" + (f", lastCaughtUpTimeMs: {t})" if with_time
                                                   else ")") for b, e, t in out]
    return (f"Leader: (highWatermark: {hw}, endOffset: {leo}). "
            f"Out of sync replicas: {' '.join(parts)}")


def server_log_of_version(version: str, t0: int) -> list[str]:
    """orders-0 shrinks (3 leaves) at +40 s and expands at +50 s; orders-1's
    proposal is refused at +60 s; audit-2's proposal at +70 s is the last line
    (no outcome before the end of the input)."""
    _, style, shrink, expand, commit, refusal = SERVER_LOG_WORDINGS[version]
    prefix = OLD_STYLE_PARTITION if style == "old" else NEW_STYLE_PARTITION
    lines = [log4j(t0 + 2, "INFO", "[ReplicaFetcherManager on broker 1] Removed fetcher for "
                                   "partitions Set(orders-0)",
                   "kafka.server.ReplicaFetcherManager")]

    def line(ms, topic, p, text):
        lines.append(log4j(t0 + ms, "INFO", prefix.format(t=topic, p=p, n=1) + text,
                           "kafka.cluster.Partition"))

    def fmt(text, topic, p, a, b, v, out=((3, 490, 1700000009802),), under=False):
        return text.format(t=topic, p=p, a=a, b=b, v=v, under="(under-min-isr) " if under else " ",
                           numbers=_leader_numbers(version, list(out), 490, 2000))

    line(40_000, "orders", 0, fmt(shrink, "orders", 0, "1,2,3", "1,2", 11))
    if commit:
        line(40_004, "orders", 0, fmt(commit, "orders", 0, "1,2,3", "1,2", 11))
    if expand:
        line(50_002, "orders", 0, fmt(expand, "orders", 0, "1,2", "1,2,3", 12))
    if commit:
        line(50_006, "orders", 0, fmt(commit, "orders", 0, "1,2", "1,2,3", 12))
    unknown = "unknown" if version in ("3.0", "3.1", "3.3", "3.5") else 77
    line(60_000, "orders", 1, fmt(shrink, "orders", 1, "1,2,3", "1,3", 5,
                                  out=((2, unknown, "unknown" if unknown == "unknown" else 9),)))
    if refusal == "REJECTED":
        sent = ("isr=List(1, 3)" if version == "3.3" else "isrWithBrokerEpoch=List(BrokerState("
                "brokerId=1, brokerEpoch=-1), BrokerState(brokerId=3, brokerEpoch=-1))")
        line(60_003, "orders", 1,
             "Failed to alter partition to PendingShrinkIsr(outOfSyncReplicaIds=Set(2), "
             f"sentLeaderAndIsr=LeaderAndIsr(leader=1, leaderEpoch=4, {sent}, "
             "leaderRecoveryState=RECOVERED, partitionEpoch=5), leaderRecoveryState=RECOVERED, "
             "lastCommittedState=CommittedPartitionState(isr=Set(1, 2, 3), "
             "leaderRecoveryState=RECOVERED)) since the controller rejected the request with "
             "INELIGIBLE_REPLICA. Partition state has been reset to the latest committed state "
             "CommittedPartitionState(isr=Set(1, 2, 3), leaderRecoveryState=RECOVERED).")
    elif refusal:
        line(60_003, "orders", 1, fmt(refusal, "orders", 1, "", "", 5))
    line(70_000, "audit", 2, fmt(shrink, "audit", 2, "1,2", "1", 3, out=((2, 10, 8),)))
    return lines


# ------------------------------------------------------------ metadata dump, every version
# DumpLogSegments' dumpLog/printBatchLevel (docs/tap.md): a section line per
# file, a batch line per batch, a line per record - with its metadata
# (`| offset: N CreateTime: MS ... payload: {..}`) or, with
# --skip-record-metadata, only ` payload: {..}` (Scala, up to 4.2) or
# `| payload: {..}` (Java, 4.3+). Control records print their type with the
# metadata and an empty line without it.
def batch_line(base: int, count: int, ms: int, control: bool = False, position: int = 0) -> str:
    return (f"baseOffset: {base} lastOffset: {base + count - 1} count: {count} baseSequence: -1 "
            f"lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 1 "
            f"isTransactional: false isControl: {str(control).lower()} deleteHorizonMs: "
            f"OptionalLong.empty position: {position} CreateTime: {ms} size: {100 * count} "
            f"magic: 2 compresscodec: none crc: 1234567 isvalid: true\n")


def dump_file(section: str, batches: list[tuple], skip_metadata: bool = False,
              java: bool = False) -> list[str]:
    """`section`: `Log starting offset: N` or `Snapshot end offset: N, epoch: E`
    (`Starting offset: N` before 3.3). `batches`: (base offset, ms, records),
    a record (kind, version, data), or ("CONTROL", text) for a control record."""
    lines = ["Dumping /var/lib/kafka/data/__cluster_metadata-0/file\n", section + "\n"]
    position = 0
    for base, ms, records in batches:
        control = records[0][0] == "CONTROL"
        lines.append(batch_line(base, len(records), ms, control, position))
        position += 100 * len(records)
        for i, rec in enumerate(records):
            if control:
                lines.append("\n" if skip_metadata else
                             f"| offset: {base + i} CreateTime: {ms} keySize: 4 valueSize: 19 "
                             f"sequence: -1 headerKeys: [] {rec[1]}\n")
                continue
            if not skip_metadata:
                lines.append(dump_record(base + i, ms, *rec))
                continue
            payload = json.dumps({"type": rec[0], "version": rec[1], "data": rec[2]},
                                 separators=(",", ":"))
            lines.append(("| " if java else " ") + f"payload: {payload}\n")
    return lines


def cluster_batches(t0: int) -> list[tuple]:
    """cluster_dump's records in batches as the controller writes them, with
    the quorum's LeaderChange control batch first."""
    topic = ("TOPIC_RECORD", 0, {"name": "orders", "topicId": TOPIC_ID})
    brokers = [[("REGISTER_BROKER_RECORD", 3, {
        "brokerId": b, "isMigratingZkBroker": False, "incarnationId": "Kq2rZzJtQ2mDqXlHn0bC1w",
        "brokerEpoch": 100 + b, "endPoints": [], "features": [], "rack": None, "fenced": True,
        "inControlledShutdown": False, "logDirs": []}),
        ("BROKER_REGISTRATION_CHANGE_RECORD", 0, {"brokerId": b, "brokerEpoch": 100 + b,
                                                  "fenced": -1})] for b in (1, 2, 3)]
    partition = ("PARTITION_RECORD", 1, {
        "partitionId": 0, "topicId": TOPIC_ID, "replicas": [1, 2, 3], "isr": [1, 2, 3],
        "removingReplicas": [], "addingReplicas": [], "leader": 1, "leaderEpoch": 0,
        "partitionEpoch": 0, "directories": []})
    shrink = ("PARTITION_CHANGE_RECORD", 0, {"partitionId": 0, "topicId": TOPIC_ID, "isr": [1, 2]})
    expand = ("PARTITION_CHANGE_RECORD", 0, {"partitionId": 0, "topicId": TOPIC_ID,
                                             "isr": [1, 2, 3]})
    moved = ("PARTITION_CHANGE_RECORD", 0, {"partitionId": 0, "topicId": TOPIC_ID, "leader": 2})
    return [(0, t0 - 6000, [("CONTROL", "controlType: LEADER_CHANGE(2)")]),
            (1, t0 - 5000, [topic]),
            (2, t0 - 4000, brokers[0]), (4, t0 - 3900, brokers[1]), (6, t0 - 3800, brokers[2]),
            (8, t0 - 3000, [partition]),
            (9, t0 + 40_000, [shrink]), (10, t0 + 50_000, [expand, moved])]


# ------------------------------------------------------------ state-change.log, every version
# One ZooKeeper-mode controller that is also broker 1 (both write this file),
# or a KRaft broker (4.x: no controller lines). orders-0 (replicas 1,2,3) is
# created led by 1; broker 3 dies (the controller takes it out of the ISR);
# broker 1 dies (2 is elected, ISR [2]); then 3 rejoins the ISR.
def _scl(t0: int, ms: int, text: str) -> str:
    return log4j(t0 + ms, "TRACE" if text.startswith("T|") else "INFO",
                 text.removeprefix("T|"), "state.change.logger")


def _state(style: str, leader: int, epoch: int, isr: list[int], version: int) -> str:
    """The partition state, as each version's class prints it (docs/tap.md)."""
    j = ",".join(map(str, isr))
    if style == "lic":      # LeaderIsrAndControllerEpoch, 0.9-3.0
        return f"(Leader:{leader},ISR:{j},LeaderEpoch:{epoch},ControllerEpoch:3)"
    if style == "lic32":    # 3.2+
        return (f"(Leader:{leader},ISR:{j},LeaderRecoveryState:RECOVERED,LeaderEpoch:{epoch},"
                f"ZkVersion:{version},ControllerEpoch:3)")
    if style == "lai":      # LeaderAndIsr, 1.1-3.1
        return (f"LeaderAndIsr(leader={leader}, leaderEpoch={epoch}, "
                f"isr=List({', '.join(map(str, isr))}), zkVersion={version})")
    if style == "lai33":    # 3.3-3.4
        return (f"LeaderAndIsr(leader={leader}, leaderEpoch={epoch}, "
                f"isr=List({', '.join(map(str, isr))}), leaderRecoveryState=RECOVERED, "
                f"partitionEpoch={version})")
    if style == "lai35":    # 3.5+
        states = ", ".join(f"BrokerState(brokerId={b}, brokerEpoch=-1)" for b in isr)
        return (f"LeaderAndIsr(leader={leader}, leaderEpoch={epoch}, isrWithBrokerEpoch=List("
                f"{states}), leaderRecoveryState=RECOVERED, partitionEpoch={version})")
    if style == "psi":      # kafka.api.PartitionStateInfo, 0.9
        return (f"(LeaderAndIsrInfo:(Leader:{leader},ISR:{j},LeaderEpoch:{epoch},"
                f"ControllerEpoch:3),ReplicationFactor:3),AllReplicas:1,2,3)")
    if style == "ps10":     # requests.PartitionState, 0.10-0.11
        return (f"PartitionState(controllerEpoch=3, leader={leader}, leaderEpoch={epoch}, "
                f"isr=[{', '.join(map(str, isr))}], zkVersion={version}, replicas=[1, 2, 3])")
    if style == "ps1":      # LeaderAndIsrRequest.PartitionState, 1.0-2.3
        return (f"PartitionState(controllerEpoch=3, leader={leader}, leaderEpoch={epoch}, "
                f"isr={j}, zkVersion={version}, replicas=1,2,3, isNew=false)")
    if style == "laips":    # LeaderAndIsrPartitionState (generated), 2.4+
        field = "zkVersion" if version < 100 else "partitionEpoch"
        return (f"LeaderAndIsrPartitionState(topicName='orders', partitionIndex=0, "
                f"controllerEpoch=3, leader={leader}, leaderEpoch={epoch}, "
                f"isr=[{', '.join(map(str, isr))}], {field}={version % 100}, replicas=[1, 2, 3], "
                f"addingReplicas=[], removingReplicas=[], isNew=false)")
    if style == "reg":      # PartitionRegistration, 4.2+
        return (f"PartitionRegistration(replicas=[1, 2, 3], directories=[AAAAAAAAAAAAAAAAAAAAAA, "
                f"AAAAAAAAAAAAAAAAAAAAAA, AAAAAAAAAAAAAAAAAAAAAA], "
                f"isr=[{', '.join(map(str, isr))}], "
                f"removingReplicas=[], addingReplicas=[], elr=[], lastKnownElr=[], "
                f"leader={leader}, leaderRecoveryState=RECOVERED, leaderEpoch={epoch}, "
                f"partitionEpoch={version})")
    raise ValueError(style)


STATE_CHANGE_VERSIONS = ("0.9", "0.10", "1.1", "2.4", "2.6", "3.3", "3.5", "3.7", "4.0", "4.2")


def state_change_of_version(version: str, t0: int) -> list[str]:
    lines = ["[2023-11-14 22:13:20,000] TRACE not a line of this log (kafka.Kafka)\n"]

    def add(ms, text):
        lines.append(_scl(t0, ms, text))

    zk_old = version in ("0.9", "0.10")
    kraft = version in ("4.0", "4.2")
    ctrl = "Controller 1 epoch 3 " if zk_old else "[Controller id=1 epoch=3] "
    where = "[orders,0]" if zk_old else "orders-0"
    if not kraft:
        add(0, f"T|{ctrl}{'c' if zk_old else 'C'}hanged partition {where} state from "
               f"NonExistentPartition to NewPartition with assigned replicas 1,2,3")
    if zk_old:  # the controller's request to the leader, and the leader receiving it
        for ms, leader, epoch, isr in ((10, 1, 0, [1, 2, 3]), (30_010, 2, 1, [2])):
            add(ms, f"T|{ctrl}sending become-leader LeaderAndIsr request "
                    f"{_state('lic', leader, epoch, isr, 0)} to broker {leader} "
                    f"for partition {where}")
        style = "psi" if version == "0.9" else "ps10"
        add(20, f"T|Broker 1 received LeaderAndIsr request {_state(style, 1, 0, [1, 2, 3], 0)} "
                f"correlation id 5 from controller 1 epoch 3 for partition {where}")
        add(21, f"T|Broker 1 received LeaderAndIsr request {_state(style, 2, 9, [2], 0)} "
                f"correlation id 6 from controller 1 epoch 3 for partition [audit,0]")
        return sorted(lines)  # by time: the stamp leads each line
    lai, lic = {"3.3": ("lai33", "lic32"), "3.5": ("lai35", "lic32"),
                "3.7": ("lai35", "lic32")}.get(version, ("lai", "lic"))
    trace = "T|" if version in ("1.1", "2.4") else ""
    if not kraft:
        add(10, f"{trace}{ctrl}Changed partition orders-0 from NewPartition to OnlinePartition "
                f"with state {_state(lai, 1, 0, [1, 2, 3], 0)}")
    if version in ("1.1", "2.4"):  # TRACE before 2.6, in the log by default
        style = "ps1" if version == "1.1" else "laips"
        for ms, leader, epoch, isr, v in ((11, 1, 0, [1, 2, 3], 0), (30_010, 2, 1, [2], 2)):
            add(ms, f"T|{ctrl}Sending become-leader LeaderAndIsr request "
                    f"{_state(style, leader, epoch, isr, v)} to broker {leader} "
                    "for partition orders-0")
        # broker 1 receiving it (and a follower's request, which says nothing of a leader)
        for ms, leader, epoch, isr in ((12, 1, 0, [1, 2, 3]), (30_015, 2, 1, [2])):
            add(ms, "T|[Broker id=1] Received LeaderAndIsr request "
                    f"{_state(style, leader, epoch, isr, 0)} correlation id 5 from controller 1 "
                    "epoch 3 for partition orders-0")
    if not kraft and version not in ("1.1", "2.4"):
        add(20_000, f"{ctrl}Partition orders-0 state changed to {_state(lic, 1, 0, [1, 2], 1)} "
                    "after removing replica 3 from the ISR as part of transition to "
                    "OfflineReplica")
    if not kraft:
        add(30_000, f"{trace}{ctrl}Changed partition orders-0 from OfflinePartition to "
                    f"OnlinePartition with state {_state(lai, 2, 1, [2], 2)}")
    # broker 2 (its own file in a real cluster) becoming leader, 2.6+
    if version == "2.6":
        add(30_020, "[Broker id=2] Leader orders-0 starts at leader epoch 1 from offset 2000 with "
                    "high watermark 1990 ISR [2] addingReplicas [] removingReplicas []. "
                    "Previous leader epoch was 0.")
    elif version in ("3.3", "3.5", "3.7", "4.0", "4.2"):
        under = {"3.3": "", "3.5": " (under-min-isr)"}.get(version, " ")
        previous = ("Previous leader epoch was 0." if version in ("3.3", "3.5")
                    else "Previous leader Some(1) and previous leader epoch was 0.")
        add(30_020, "[Broker id=2] Leader orders-0 with topic id Some(kgnYg1PfR4-BTKr7X8eaDw) "
                    "starts at leader epoch 1 from offset 2000 with partition epoch 2, high "
                    f"watermark 1990, ISR [2], adding replicas [] and removing replicas []{under}. "
                    + previous)
        style = {"4.2": "reg"}.get(version, "laips")
        how = ("partition registration" if version == "4.2" else "and partition state")
        comma = "," if version == "4.2" else ""
        is_new = " and isNew=false" if version == "4.2" else ""
        add(40_000, f"[Broker id=2] Skipped the become-leader state change for orders-0 with "
                    f"topic id Some(kgnYg1PfR4-BTKr7X8eaDw){comma} {how} "
                    f"{_state(style, 2, 1, [2, 3], 3 if style == 'reg' else 103)}{is_new} since "
                    "it is already the leader "
                    "with leader epoch 1. Current high watermark 2000, ISR [2,3], adding replicas "
                    "[] and removing replicas [].")
    return sorted(lines)
