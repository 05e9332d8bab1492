"""`isr tap` and `isr verify` (docs/tap.md): Kafka's request log, metadata
dump and server.log, in the formats Kafka's source writes (tests/tapfixtures.py,
tests/fixtures/tap), become the monitor's events, deterministically; bad lines
are counted and skipped; tap + replay finds a real shrink and expand, and
`isr verify` agrees with the cluster's own server.log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
from helpers import ROOT, cli
from tapfixtures import (RESPONSE_MAX_BYTES, cluster_dump, completed, fetch_request,
                         fetch_response, follower_outage)

from isr.contract import Rejection, decode
from isr.tap.command import events_of
from isr.tap.lines import read_lines
from isr.tap.metadata import MetadataLogTap, MetadataPoller
from isr.tap.request_log import RequestLogTap, kafka_topic_id
from isr.tap.server_log import ServerLogTap

T0 = 1_700_000_000_000
FIXTURES = ROOT / "tests" / "fixtures" / "tap"


def names() -> MetadataLogTap:
    tap = MetadataLogTap()
    list(events_of(tap, cluster_dump(T0)))
    return tap


def tap_request_log(lines, **kw) -> tuple[list[dict], RequestLogTap]:
    tap = RequestLogTap(1, topic_names=names().topic_name, **kw)
    return list(events_of(tap, lines)), tap


def write(path: Path, events) -> Path:
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    return path


def valid(events) -> None:
    for e in events:
        assert not isinstance(decode(orjson.dumps(e)), Rejection), e


# ------------------------------------------------------------ request log
@pytest.mark.parametrize("version", [12, 13, 15])
def test_each_fetch_request_version_gives_the_same_fetches(version):
    """v12 names topics, v13 gives ids (named from the metadata), v15 moves the
    follower id into replicaState and adds its broker epoch."""
    events, tap = tap_request_log(follower_outage(T0, version=version, seconds=20).request_log)
    valid(events)
    reference, _ = tap_request_log(follower_outage(T0, version=15, seconds=20).request_log)
    strip = [{k: v for k, v in e.items() if k != "broker_epoch"} for e in events]
    assert strip == [{k: v for k, v in e.items() if k != "broker_epoch"} for e in reference]
    fetches = [e for e in events if e["type"] == "fetch"]
    assert {e["replica"] for e in fetches} == {2, 3}
    assert all(("broker_epoch" in e) == (version >= 15) for e in fetches)
    assert tap.skipped == {}
    assert tap.approximate == {"reads whose LEO is only a lower bound": 2}  # the last reads


def test_the_fixture_files_are_read_line_by_line():
    for version in (12, 13, 15):
        lines = (FIXTURES / f"kafka-request-v{version}.log").read_text().splitlines(True)
        events, tap = tap_request_log(lines)
        assert tap.lines == 6 and len([e for e in events if e["type"] == "fetch"]) == 6


def _line(end, request, response, total=1.3, queue=0.05, local=0.25, remote=0.0, version=15):
    return completed(end, version, request, response, 2, total, queue, local, remote)


def _part(p, offset):
    return {"partition": p, "currentLeaderEpoch": 4, "fetchOffset": offset,
            "lastFetchedEpoch": 4, "logStartOffset": 0}


def test_an_incremental_session_fetches_every_partition_it_holds():
    """KIP-227: the follower lists only what changed; every FETCH counts for the
    session's partitions at their cached fetchOffset; forgotten ones leave."""
    full = _line(T0 + 1000, fetch_request(15, 2, 7, 0, 0, [_part(0, 10), _part(1, 20)]),
                 fetch_response(15, 55, [{"partitionIndex": 0, "highWatermark": 10, "size": 0},
                                         {"partitionIndex": 1, "highWatermark": 20, "size": 0}]))
    nothing_new = _line(T0 + 1500, fetch_request(15, 2, 7, 55, 1, []), fetch_response(15, 55, []))
    forget = _line(T0 + 2000, fetch_request(15, 2, 7, 55, 2, [], forgotten=(1,)),
                   fetch_response(15, 55, []))
    events, _ = tap_request_log([full, nothing_new, forget])
    fetches = [(e["ts"] - T0, e["partition"], e["fetch_offset"], e["leader_leo"])
               for e in events if e["type"] == "fetch"]
    # arrival = end - total + queue = -1.25 ms; the read ends 0.25 ms later
    assert fetches == [(999, 0, 10, 10), (999, 1, 20, 20), (1499, 0, 10, 10),
                       (1499, 1, 20, 20), (1999, 0, 10, 10)]
    assert [e["received_ts"] - T0 for e in events if e["type"] == "fetch"][:1] == [999]


def test_the_leader_leo_is_inferred_from_the_next_fetch_and_capped_reads_are_bounds():
    r1 = _line(T0 + 1000, fetch_request(15, 2, 7, 0, 0, [_part(0, 100)]),
               fetch_response(15, 55, [{"partitionIndex": 0, "highWatermark": 100,
                                        "size": 4000}]))
    r2 = _line(T0 + 1100, fetch_request(15, 2, 7, 55, 1, [_part(0, 140)]),
               fetch_response(15, 55, [{"partitionIndex": 0, "highWatermark": 140,
                                        "size": RESPONSE_MAX_BYTES}]))  # capped
    r3 = _line(T0 + 1200, fetch_request(15, 2, 7, 55, 2, [_part(0, 90_000)]),
               fetch_response(15, 55, []))
    events, tap = tap_request_log([r1, r2, r3])
    got = [(e["type"], e["ts"] - T0, e.get("fetch_offset"), e["leader_leo"]) for e in events]
    assert got == [("append", 999, None, 140), ("fetch", 999, 100, 140),
                   ("append", 1099, None, 90_000), ("fetch", 1099, 140, 90_000),
                   ("fetch", 1199, 90_000, 90_000)]
    assert tap.approximate == {"reads whose LEO is only a lower bound": 1}


def test_a_purgatory_wait_is_not_a_slow_read():
    """A caught-up follower's read found nothing and waited (remoteTimeMs):
    its fetch took effect at the first read; records that came during the wait
    show up as an append at the response."""
    r1 = _line(T0 + 1500, fetch_request(15, 2, 7, 0, 0, [_part(0, 100)]),
               fetch_response(15, 55, [{"partitionIndex": 0, "highWatermark": 100,
                                        "size": 300}]), total=480.5, remote=480.0)
    r2 = _line(T0 + 1502, fetch_request(15, 2, 7, 55, 1, [_part(0, 103)]),
               fetch_response(15, 55, []))
    events, _ = tap_request_log([r1, r2])
    fetch = events[1]
    assert (fetch["received_ts"] - T0, fetch["ts"] - T0, fetch["leader_leo"]) == (1020, 1020, 100)
    assert [(e["type"], e["ts"] - T0, e["leader_leo"]) for e in events if e["type"] == "append"] \
        == [("append", 1020, 100), ("append", 1500, 103)]


def test_bad_lines_are_counted_and_skipped_never_fatal():
    good = _line(T0 + 1000, fetch_request(15, 2, 7, 0, -1, [_part(0, 5)]),
                 fetch_response(15, 0, [{"partitionIndex": 0, "highWatermark": 5, "size": 0}]))
    consumer = good.replace('"replicaState":{"replicaId":2,"replicaEpoch":7},', "")
    produce = good.replace('"requestApiKeyName":"FETCH"', '"requestApiKeyName":"PRODUCE"') \
        .replace('"requestApiKey":1', '"requestApiKey":0')
    lines = ["java.lang.IllegalStateException: boom\n", "\tat kafka.Foo(Foo.scala:1)\n",
             good[:300] + " (kafka.request.logger)\n", produce, consumer,
             good.replace('"topics":[{"topicId"', '"topics":[{"name"'),
             good.replace('"requestApiVersion":15', '"requestApiVersion":99'), good]
    events, tap = tap_request_log(lines)
    assert [e["type"] for e in events] == ["append", "fetch", "fetch"]  # v99 read like v15
    assert tap.skipped == {"not a log4j line": 2, "truncated or unreadable JSON": 1,
                           "not a FETCH": 1, "consumer FETCH": 1,
                           "FETCH with fields this tap does not know": 1}


def test_topic_ids_in_both_spellings():
    assert kafka_topic_id("9209d883-53df-478f-814c-aafb5fc79a0f") == "kgnYg1PfR4-BTKr7X8eaDw"
    assert kafka_topic_id("kgnYg1PfR4-BTKr7X8eaDw") == "kgnYg1PfR4-BTKr7X8eaDw"


# ------------------------------------------------------------ metadata
def test_the_metadata_dump_gives_leaders_isr_and_broker_lifecycle():
    tap = MetadataLogTap()
    events = list(events_of(tap, (FIXTURES / "metadata.dump").read_text().splitlines(True)))
    valid(events)
    brokers = [(e["broker"], e["state"], e["broker_epoch"]) for e in events
               if e["type"] == "broker"]
    assert brokers[:3] == [(1, "registered", 101), (1, "fenced", 101), (1, "unfenced", 101)]
    leaders = [(e["leader"], e["leader_epoch"]) for e in events if e["type"] == "leader"]
    assert leaders == [(1, 0), (2, 1), (1, 2), (2, 3), (1, 4)]  # a new leader bumps the epoch
    assert [e["partition_epoch"] for e in events if e["type"] == "isr"] == [0, 1, 2, 3, 4]
    assert tap.skipped == {"not a metadata record line": 3}
    more = [
        '| offset: 20 CreateTime: 1700000001000 keySize: -1 valueSize: 30 sequence: -1 '
        'headerKeys: [] payload: {"type":"PARTITION_CHANGE_RECORD","version":0,"data":'
        '{"partitionId":0,"topicId":"kgnYg1PfR4-BTKr7X8eaDw","isr":[1,2]}}',
        '| offset: 21 CreateTime: 1700000002000 keySize: -1 valueSize: 30 sequence: -1 '
        'headerKeys: [] payload: {"type":"BROKER_REGISTRATION_CHANGE_RECORD","version":1,'
        '"data":{"brokerId":3,"brokerEpoch":103,"inControlledShutdown":1}}',
        '| offset: 22 CreateTime: 1700000003000 keySize: -1 valueSize: 30 sequence: -1 '
        'headerKeys: [] payload: {"type":"FENCE_BROKER_RECORD","version":0,"data":{"id":3,'
        '"epoch":103}}',
        '| offset: 23 CreateTime: 1700000004000 keySize: -1 valueSize: 30 sequence: -1 '
        'headerKeys: [] payload: {"type":"UNREGISTER_BROKER_RECORD","version":0,"data":'
        '{"brokerId":3,"brokerEpoch":103}}',
        '| offset: 24 CreateTime: 1700000005000 keySize: -1 valueSize: 30 sequence: -1 '
        'headerKeys: [] payload: {"type":"FEATURE_LEVEL_RECORD","version":0,"data":'
        '{"name":"metadata.version","featureLevel":20}}',
        '| offset: 25 CreateTime: 1700000006000 keySize: -1 valueSize: 30 sequence: -1 '
        'headerKeys: [] payload: Error at 25, skipping. Unknown metadata id 99']
    out = [(e["type"], e.get("isr") or e.get("state"), e["ts"] - T0)
           for line in more for e in tap.feed(line)]
    assert out == [("isr", [1, 2], 1000), ("broker", "controlled_shutdown", 2000),
                   ("broker", "fenced", 3000), ("broker", "unregistered", 4000)]
    assert tap.skipped["FEATURE_LEVEL_RECORD (not about partitions or brokers)"] == 1
    assert tap.skipped["not a metadata record line"] == 4
    # A dump written again from the start (cron into a followed file) adds nothing.
    again = [e for line in (FIXTURES / "metadata.dump").read_text().splitlines(True) + more
             for e in tap.feed(line)]
    assert again == [] and tap.skipped["record read before (a dump written again)"] == 17


def test_polled_metadata_gives_what_changed_between_polls():
    poller = MetadataPoller("prod")
    cluster = {"brokers": [{"broker_id": 1}, {"broker_id": 2, "is_fenced": False}]}
    topic = {"name": "orders", "topic_id": "9209d883-53df-478f-814c-aafb5fc79a0f",
             "partitions": [{"partition_index": 0, "leader_id": 1, "leader_epoch": 3,
                             "replica_nodes": [1, 2], "isr_nodes": [1, 2]}]}
    first = poller.diff(cluster, [topic], T0)
    valid(first)
    assert [(e["type"], e.get("state")) for e in first] == [
        ("broker", "registered"), ("broker", "unfenced"), ("broker", "registered"),
        ("broker", "unfenced"), ("leader", None), ("isr", None)]
    assert poller.diff(cluster, [topic], T0 + 5000) == []
    topic["partitions"][0]["isr_nodes"] = [1]
    cluster["brokers"][1]["is_fenced"] = True
    assert [(e["type"], e.get("isr") or e.get("state")) for e in
            poller.diff(cluster, [topic], T0 + 10000)] == [("broker", "fenced"), ("isr", [1])]
    assert poller.topic_name("kgnYg1PfR4-BTKr7X8eaDw") == "orders"


def test_polled_brokers_leave_a_real_followers_fetches_isr_eligible(tmp_path):
    """The poller cannot see broker epochs and says so (-1): a follower whose
    fetches carry its real epoch (FetchRequest v15+, `isr tap request-log`)
    still rejoins the ISR. With 0 it never did (a real cluster, docs/real-kafka.md)."""
    poller = MetadataPoller()
    topic = {"name": "orders", "topic_id": "9209d883-53df-478f-814c-aafb5fc79a0f",
             "partitions": [{"partition_index": 0, "leader_id": 1, "leader_epoch": 0,
                             "replica_nodes": [1, 2], "isr_nodes": [1]}]}
    events = poller.diff({"brokers": [{"broker_id": 1}, {"broker_id": 2}]}, [topic], T0)
    assert {e["broker_epoch"] for e in events if e["type"] == "broker"} == {-1}
    base = {"v": 1, "cluster": "default", "topic": "orders", "partition": 0, "leader": 1,
            "leader_epoch": 0}
    events += [{**base, "type": "append", "ts": T0 + 100, "leader_leo": 10},
               {**base, "type": "fetch", "ts": T0 + 200, "replica": 2, "fetch_offset": 10,
                "leader_leo": 10, "broker_epoch": 22}]
    write(tmp_path / "events.jsonl", events)
    r = cli("replay", str(tmp_path / "events.jsonl"), "--no-state", "-q")
    assert r.returncode == 0, r.stderr
    changes = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(c["action"], c["isr_after"]) for c in changes
            if c["type"] == "isr_change"] == [("expand", [1, 2])]


# ------------------------------------------------------------ server.log
@pytest.mark.parametrize("version", ["2.7", "2.8", "3.x-4.x"])
def test_server_log_isr_lines_of_each_version(version):
    tap = ServerLogTap("prod")
    events = list(events_of(tap, (FIXTURES / f"server-{version}.log").read_text()
                            .splitlines(True)))
    valid(events)
    got = [(e["topic"], e["partition"], e["leader"], e["isr"], e["partition_epoch"], e["ts"] - T0)
           for e in events]
    expected = [("orders", 0, 1, [1, 2], 11, 40004), ("orders", 0, 1, [1, 2, 3], 12, 50006)]
    if version == "3.x-4.x":
        expected.append(("audit.log-v2", 1, 1, [1], 3, 70000))
    assert got == expected
    assert "lastCaughtUpTimeMs: 1700000009802" in events[0]["kafka_log"]
    assert tap.skipped["a partition line about something else"] == 1
    assert tap.skipped["not a partition line"] == 1


# ------------------------------------------------------------ tap + replay + verify
def test_a_follower_that_stops_for_40_s_is_shrunk_and_expanded_and_verify_agrees(tmp_path):
    """The whole path as an operator runs it: three taps to files, replay of
    the merged files, `isr verify` against the cluster's server.log."""
    outage = follower_outage(T0, seconds=70)
    (tmp_path / "request.log").write_text("".join(outage.request_log))
    (tmp_path / "server.log").write_text("".join(outage.server_log))
    (tmp_path / "metadata.dump").write_text("".join(cluster_dump(T0)))
    runs = [("metadata", str(tmp_path / "metadata.dump")),
            ("request-log", str(tmp_path / "request.log"), "--broker", "1",
             "--topic-ids", str(tmp_path / "metadata.dump")),
            ("server-log", str(tmp_path / "server.log"))]
    outputs = []
    for run in runs:
        out = tmp_path / f"{run[0]}.jsonl"
        r = cli("tap", *run, "--to", str(out))
        assert r.returncode == 0, r.stderr
        assert "lines read" in r.stderr and "events written" in r.stderr, r.stderr
        outputs.append(str(out))
    again = tmp_path / "again.jsonl"
    assert cli("tap", *runs[1], "--to", str(again), "-q").returncode == 0
    assert again.read_bytes() == (tmp_path / "request-log.jsonl").read_bytes()  # deterministic
    r = cli("replay", "--merge", *outputs, "--no-state", "-q")
    assert r.returncode == 0, r.stderr
    changes = [json.loads(x) for x in r.stdout.splitlines()]
    changes = [(d["action"], d["replicas"], d["ts"] - T0) for d in changes
               if d["type"] == "isr_change"]
    assert [c[:2] for c in changes] == [("shrink", [3]), ("expand", [3])]
    assert [c[2] for c in changes] == [t - T0 for t in outage.shrinks + outage.expands]
    v = cli("verify", *outputs)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "2 ISR changes agree, 0 partitions differ" in v.stdout
    # The cluster that never took the follower back: verify says where and why.
    write(tmp_path / "server-no-expand.jsonl",
          [json.loads(x) for x in Path(outputs[2]).read_text().splitlines()][:1])
    v = cli("verify", outputs[0], outputs[1], str(tmp_path / "server-no-expand.jsonl"))
    assert v.returncode == 1
    assert "computed expand to [1, 2, 3] at +10.002s that the cluster did not commit" in v.stdout


def test_a_followed_file_survives_rotation(tmp_path):
    log = tmp_path / "kafka-request.log"
    log.write_text("one\n")
    stop = threading.Event()
    got: list[str] = []

    def follow():
        for line in read_lines(str(log), True, stop.is_set, poll_s=0.02):
            got.append(line)

    t = threading.Thread(target=follow)
    t.start()
    time.sleep(0.2)
    with open(log, "a") as f:
        f.write("two\n")
    time.sleep(0.2)
    os.rename(log, tmp_path / "kafka-request.log.2024-01-01-00")  # DailyRollingFileAppender
    log.write_text("three\n")
    deadline = time.monotonic() + 5
    while len(got) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    t.join(5)
    assert got == ["one\n", "two\n", "three\n"]


def test_a_followed_log_is_written_as_it_grows_and_ctrl_c_ends_the_tap(tmp_path):
    """-F into a file: each event is there while the tap still runs (not held
    in a buffer until it stops), and Ctrl-C ends it with its count."""
    log, out = tmp_path / "server.log", tmp_path / "isr.jsonl"
    log.write_text((FIXTURES / "server-2.8.log").read_text())
    proc = subprocess.Popen([sys.executable, "-m", "isr.cli", "tap", "server-log", str(log),
                             "-F", "--to", str(out)], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not out.exists()
                                               or out.read_text().count("\n") < 2):
            time.sleep(0.1)
        assert out.read_text().count("\n") == 2  # both ISR commits, before any stop
    finally:
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=30)[1]
    assert proc.returncode == 0, err
    assert "2 events written" in err and "Traceback" not in err, err


def test_tap_user_errors_are_one_line(tmp_path):
    r = cli("tap", "request-log", str(tmp_path / "missing.log"), "--broker", "1", "--to", "-")
    assert r.returncode == 2 and r.stderr.startswith("isr: ") and len(r.stderr.splitlines()) == 1
    r = cli("tap", "metadata", "--to", "-")
    assert r.returncode == 2 and "one of the two" in r.stderr
    r = cli("tap", "server-log", "-", "--timezone", "Mars/Olympus", "--to", "-", stdin="")
    assert r.returncode == 2 and "not a time zone" in r.stderr
