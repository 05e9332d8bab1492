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
from tapfixtures import (RESPONSE_MAX_BYTES, SERVER_LOG_WORDINGS, STATE_CHANGE_VERSIONS,
                         TOPIC_ID, cluster_dump, completed, dump_record, fetch_request,
                         fetch_response, follower_outage, stamp)

from isr.contract import Rejection, decode
from isr.tap import metadata, server_log, state_change
from isr.tap.lines import events_of
from isr.tap.lines import read_lines
from isr.tap.metadata import MetadataLogTap, MetadataPoller
from isr.tap.request_log import RequestLogTap, kafka_topic_id
from isr.tap.server_log import ServerLogTap, proposal_numbers
from isr.tap.state_change import StateChangeTap

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
    # replica 2's last read; replica 3's last one waited in purgatory, got
    # records, and its next request came only after the stop (past HOLD_MS)
    assert tap.approximate == {"reads whose LEO is only a lower bound": 1,
                               RequestLogTap.NO_NEXT_APPEND: 1}


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


def test_the_session_grain_writes_each_fetch_request_as_it_was_listed():
    """`--grain session` (the default of `isr tap request-log`): one
    fetch_session per FETCH, the new session's id from the response, only the
    partitions the request listed (with the LEO its read showed), forgotten
    ones named; the monitor decides on them as on the per-partition fetches."""
    full = _line(T0 + 1000, fetch_request(15, 2, 7, 0, 0, [_part(0, 10), _part(1, 20)]),
                 fetch_response(15, 55, [{"partitionIndex": 0, "highWatermark": 10, "size": 0},
                                         {"partitionIndex": 1, "highWatermark": 20, "size": 0}]))
    moved = _line(T0 + 1500, fetch_request(15, 2, 7, 55, 1, [_part(0, 12)]),
                  fetch_response(15, 55, [{"partitionIndex": 0, "highWatermark": 12,
                                           "size": 300}]))
    forget = _line(T0 + 2000, fetch_request(15, 2, 7, 55, 2, [_part(0, 15)], forgotten=(1,)),
                   fetch_response(15, 55, []))
    events, tap = tap_request_log([full, moved, forget], grain="session")
    valid(events)
    got = [(e["session_id"], e["session_epoch"], e["full"], e["ts"] - T0,
            [(p["partition"], p["fetch_offset"], p.get("leader_leo")) for p in e["partitions"]],
            [p["partition"] for p in e.get("forgotten", [])])
           for e in events if e["type"] == "fetch_session"]
    # the read at +1499 returned records: its LEO (15) is the next fetchOffset,
    # so that request is written once the next one is read
    assert got == [(55, 0, True, 999, [(0, 10, 10), (1, 20, 20)], []),
                   (55, 1, False, 1499, [(0, 12, 15)], []),
                   (55, 2, False, 1999, [(0, 15, 15)], [1])]
    assert all(e["broker_epoch"] == 7 and e["received_ts"] == e["ts"]
               for e in events if e["type"] == "fetch_session")
    partition, _ = tap_request_log([full, moved, forget])
    assert [e for e in events if e["type"] == "append"] == \
        [e for e in partition if e["type"] == "append"]


def test_a_new_full_session_lets_out_a_request_whose_partition_it_no_longer_lists():
    """A follower's fetcher starts a new session (sessionId 0, epoch 0, as the
    real 4.4.0 captures show after a restart or a session error) that lists
    only partition 0: partition 1 has left its fetch session (a full FETCH
    lists all), so its read still waiting for its LEO (the next fetchOffset,
    which will never come) is settled at once with its lower bound and the
    request it belongs to goes out when the new session's first request is
    read, not held until the tap ends (with -F: never)."""
    full = _line(T0 + 1000, fetch_request(15, 2, 7, 0, 0, [_part(0, 10), _part(1, 20)]),
                 fetch_response(15, 55, [{"partitionIndex": 0, "highWatermark": 10, "size": 0},
                                         {"partitionIndex": 1, "highWatermark": 20, "size": 0}]))
    moved = _line(T0 + 1500, fetch_request(15, 2, 7, 55, 1, [_part(1, 20)]),
                  fetch_response(15, 55, [{"partitionIndex": 1, "highWatermark": 20,
                                           "size": 300}]))
    anew = _line(T0 + 2000, fetch_request(15, 2, 7, 0, 0, [_part(0, 10)]),
                 fetch_response(15, 66, [{"partitionIndex": 0, "highWatermark": 10, "size": 0}]))
    tap = RequestLogTap(1, topic_names=names().topic_name, grain="session")
    read = [e for line in (full, moved, anew) for e in tap.feed(line)]
    valid(read)
    got = [(e["session_id"], e["session_epoch"], e["ts"] - T0,
            [(p["partition"], p["fetch_offset"], p.get("leader_leo")) for p in e["partitions"]])
           for e in read if e["type"] == "fetch_session"]
    assert got == [(55, 0, 999, [(0, 10, 10), (1, 20, 20)]),
                   (55, 1, 1499, [(1, 20, 21)]),  # at least one record was read: LEO >= 21
                   (66, 0, 1999, [(0, 10, 10)])]
    assert tap.finish() == [] and tap.pending == {}
    assert tap.approximate["reads whose LEO is only a lower bound"] == 1
    # The partition grain settles the same read the same way.
    partition = RequestLogTap(1, topic_names=names().topic_name)
    fetches = [e for line in (full, moved, anew) for e in partition.feed(line)
               if e["type"] == "fetch"]
    assert [(e["partition"], e["ts"] - T0, e["leader_leo"]) for e in fetches] == [
        (0, 999, 10), (1, 999, 20), (0, 1499, 10), (1, 1499, 21), (0, 1999, 10)]


def test_both_grains_decide_the_same_on_a_follower_outage(tmp_path):
    outage = follower_outage(T0, seconds=70)
    out = {}
    for grain in ("session", "partition"):
        events, _ = tap_request_log(outage.request_log, grain=grain)
        leaders = [e for e in events_of(names(), cluster_dump(T0))]
        write(tmp_path / f"{grain}.jsonl", sorted(leaders + events, key=lambda e: e["ts"]))
        r = cli("replay", str(tmp_path / f"{grain}.jsonl"), "-q", "--policy",
                "kafka,kip16,legacy,kip501")
        assert r.returncode == 0, r.stderr
        out[grain] = r.stdout
    assert out["session"] == out["partition"] and '"shrink"' in out["session"]


def _follower(end, replica, session_epoch, offset, size, session_id=55):
    return completed(end, 15, fetch_request(15, replica, 7, 0 if session_epoch == 0 else session_id,
                                            session_epoch, [_part(0, offset)]),
                     fetch_response(15, session_id, [{"partitionIndex": 0, "highWatermark": offset,
                                                      "size": size}]),
                     replica, 1.3, 0.05, 0.25, 0.0)


def test_session_events_go_out_in_the_order_of_their_lines():
    """A request whose read returned records waits for its LEO (the follower's
    next fetchOffset); a later request that is complete waits behind it, so
    requests go out in the order the leader completed them (two followers taken
    back at the same ms: the order is the ISR's), but for at most HOLD_MS of log
    time: then the read is settled with its lower bound and goes out in its
    place."""
    lines = [_follower(T0 + 1000, 2, 0, 10, 500, session_id=55),   # records: waits
             _follower(T0 + 1000, 3, 0, 20, 0, session_id=66),     # complete
             _follower(T0 + 1200, 2, 1, 20, 0, session_id=55)]     # replica 2's LEO: 20
    events, _ = tap_request_log(lines, grain="session")
    got = [(e["replica"], e["ts"] - T0) for e in events if e["type"] == "fetch_session"]
    assert got == [(2, 999), (3, 999), (2, 1199)]
    # replica 2 never fetches again: after HOLD_MS its read is written with the
    # lower bound (fetchOffset + 1), in line order, with replica 3's behind it
    later = [_follower(T0 + 1000 + ms, 3, n, 20, 0, session_id=66)
             for n, ms in enumerate((500, 1000, 1500), start=1)]
    tap = RequestLogTap(1, topic_names=names().topic_name, grain="session")
    seen = []
    for line in lines[:2] + later:
        seen.append([(e["replica"], e["ts"] - T0) for e in tap.feed(line)
                     if e["type"] == "fetch_session"])
    assert seen == [[], [], [], [], [(2, 999), (3, 999), (3, 1499), (3, 1999), (3, 2499)]]
    assert tap.finish() == []
    assert tap.approximate == {RequestLogTap.NO_NEXT_REQUEST: 1}


@pytest.mark.parametrize("grain", ["session", "partition"])
def test_a_read_whose_follower_stalls_goes_out_within_hold_ms_with_the_lower_bound(grain):
    """Replica 2's read returned records (its LEO is its next fetchOffset) and
    then replica 2 sent nothing for 5 s (paused) while replica 3 kept
    fetching every 200 ms. Past HOLD_MS of log time the read is written with
    the lower bound (fetchOffset + 1 = 11, raised to the LEO 20 replica 3's
    read at the same ms showed), in line order: before replica 3's later
    requests, not 5 s late when replica 2 comes back. Its next request is
    then read as any other and writes nothing twice."""
    ends = [(1000, 2, 0, 10, 500), (1000, 3, 0, 10, 500)]  # both read records
    ends += [(1000 + ms, 3, n, 20, 0) for n, ms in enumerate(range(200, 5000, 200), start=1)]
    ends.append((6000, 2, 1, 20, 0))  # replica 2 is back
    tap = RequestLogTap(1, topic_names=names().topic_name, grain=grain)
    written = []  # (line it came out at, replica, ts, fetch_offset, leader_leo)
    for end, replica, epoch, offset, size in ends:
        out = tap.feed(_follower(T0 + end, replica, epoch, offset, size,
                                 session_id=55 if replica == 2 else 66))
        valid(out)
        for e in out:
            for p in e.get("partitions", [e]) if e["type"] != "append" else ():
                written.append((end, e["replica"], e["ts"] - T0, p["fetch_offset"],
                                p["leader_leo"]))
    assert tap.finish() == [] and tap.pending == {}
    # +2200 is the first line more than HOLD_MS after +1000
    assert written[:3] == [(2200, 2, 999, 10, 20), (2200, 3, 999, 10, 20),
                           (2200, 3, 1199, 20, 20)]
    assert [w[1:] for w in written if w[1] == 2] == [(2, 999, 10, 20), (2, 5999, 20, 20)]
    assert [w[2] for w in written] == sorted(w[2] for w in written)  # line order = ts order
    assert all(w[0] - w[2] <= tap.HOLD_MS + 201 for w in written)  # none held longer
    assert tap.approximate == {RequestLogTap.NO_NEXT_REQUEST: 1}


def test_a_next_request_past_hold_ms_still_gives_the_exact_leo_when_nothing_came_between():
    """The bound is log time: a follower whose next request is the first line
    more than HOLD_MS after its read (a quiet log) still settles it exactly;
    the request it reads comes before any other line can settle it."""
    lines = [_follower(T0 + 1000, 2, 0, 10, 500), _follower(T0 + 2100, 2, 1, 20, 0)]
    events, tap = tap_request_log(lines, grain="session")
    got = [(e["ts"] - T0, [(p["fetch_offset"], p["leader_leo"]) for p in e["partitions"]])
           for e in events if e["type"] == "fetch_session"]
    assert got == [(999, [(10, 20)]), (2099, [(20, 20)])]
    assert not tap.approximate


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


def test_a_slow_followers_capped_read_is_raised_to_what_the_other_follower_read():
    """A follower too slow to take all that was appended between its fetches
    (issue 22's slow follower, seen on Kafka 4.4): its capped read's LEO is at
    least what the other follower read before it, so the monitor sees it
    behind instead of caught up at each next fetchOffset."""
    fast = [_line(T0 + 1000 + 10 * i, fetch_request(15, 2, 7, 0, 0, [_part(0, 5000 * i)]),
                  fetch_response(15, 0, [{"partitionIndex": 0, "highWatermark": 0,
                                          "size": 500}])) for i in range(3)]
    slow = [_line(T0 + 1025 + 100 * i, fetch_request(15, 3, 8, 0, 0, [_part(0, 100 * i)]),
                  fetch_response(15, 0, [{"partitionIndex": 0, "highWatermark": 0,
                                          "size": RESPONSE_MAX_BYTES}]))  # capped
            for i in range(2)]
    events, _tap = tap_request_log(sorted(fast + slow))
    got = [(e["ts"] - T0, e["fetch_offset"], e["leader_leo"]) for e in events
           if e["type"] == "fetch" and e["replica"] == 3]
    # its first read came after replica 2's reads that showed LEO 10000 (the
    # read at +1009 ms, whose next fetchOffset is 10000) and then at least
    # 10001 (the read at +1019 ms from 10000 returned records; no next request:
    # a lower bound), so the leader had at least 10001 then, not the 100 its
    # own next fetch asks for. (The +1019 read is settled only at the end of
    # the input, after the slow one; requests are written in line order, so
    # the slow read is raised to what the appends written before it show.)
    assert got[0] == (1024, 0, 10001)


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
    assert tap.skipped == {}  # Dumping, Log starting offset and the batch line are understood
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
    assert tap.skipped["unreadable record payload"] == 1  # DumpLogSegments' parse error
    # A dump written again from the start (cron into a followed file) adds nothing.
    again = [e for line in (FIXTURES / "metadata.dump").read_text().splitlines(True) + more
             for e in tap.feed(line)]
    assert again == [] and tap.skipped["record read before (a dump written again)"] == 18


METADATA_DUMPS = ["metadata-3.7", "metadata-3.7-skip-record-metadata",
                  "metadata-3.0-skip-record-metadata", "metadata-4.3-skip-record-metadata"]


def metadata_events(name: str, hold: bool) -> tuple[list[dict], MetadataLogTap]:
    tap = MetadataLogTap(hold=hold)
    events = list(events_of(tap, (FIXTURES / f"{name}.dump").read_text().splitlines(True)))
    valid(events)
    return events, tap


def partition_history(events) -> list[tuple]:
    return [(e["type"], e["isr"], e["leader"], e["leader_epoch"], e["ts"] - T0)
            for e in events if e["type"] != "broker"]


CLUSTER_HISTORY = [("leader", [1, 2, 3], 1, 0, -3000), ("isr", [1, 2, 3], 1, 0, -3000),
                   ("isr", [1, 2], 1, 0, 40000), ("isr", [1, 2, 3], 1, 0, 50000),
                   ("leader", [1, 2, 3], 2, 1, 50000), ("isr", [1, 2, 3], 2, 1, 50000)]


@pytest.mark.parametrize("name", METADATA_DUMPS)
@pytest.mark.parametrize("hold", [False, True])
def test_metadata_dumps_with_and_without_record_metadata_give_the_same_events(name, hold):
    """--skip-record-metadata prints ` payload: {..}` (Scala, 3.x-4.2) or
    `| payload: {..}` (Java, 4.3+) without offset or time: both come from the
    batch line (baseOffset counted on; the batch's CreateTime, every KRaft
    record's time)."""
    events, tap = metadata_events(name, hold)
    reference, _ = metadata_events("metadata-3.7", False)
    assert events == reference
    assert partition_history(events) == CLUSTER_HISTORY
    assert [e["partition_epoch"] for e in events if e["type"] == "isr"] == [0, 1, 2, 3]
    assert sum(e["type"] == "broker" for e in events) == 9
    assert tap.skipped == {} and tap.approximate == {}


def test_segments_dumped_out_of_order_are_replayed_in_offset_order():
    """A finished dump (`isr tap metadata PATH`) is applied in offset order
    whatever order its segments came in; a followed one (-F) as it is read,
    each out-of-order record counted."""
    events, tap = metadata_events("metadata-segments-out-of-order", hold=True)
    assert partition_history(events) == CLUSTER_HISTORY
    assert tap.skipped == {} and tap.approximate == {}
    _, tap = metadata_events("metadata-segments-out-of-order", hold=False)
    assert tap.approximate == {metadata.OUT_OF_ORDER: 8}
    assert tap.skipped == {"change of a partition the dump did not create": 3}


def test_tap_metadata_replays_a_finished_dump_in_offset_order(tmp_path):
    out = tmp_path / "metadata.jsonl"
    r = cli("tap", "metadata", str(FIXTURES / "metadata-segments-out-of-order.dump"),
            "--to", str(out))
    assert r.returncode == 0, r.stderr
    events = [json.loads(x) for x in out.read_text().splitlines()]
    assert partition_history(events) == CLUSTER_HISTORY
    assert "skipped" not in r.stderr and "approximate" not in r.stderr


@pytest.mark.parametrize("hold", [False, True])
def test_a_snapshot_then_the_log_applies_each_change_once(hold):
    """A snapshot at end offset 10 holds the state after offsets 0-9 (its
    records numbered from 0, timed by its header's lastContainedLogTimestamp);
    the log's records below 10 are in it already, those from 10 apply."""
    events, tap = metadata_events("metadata-snapshot-then-log", hold)
    assert partition_history(events) == [
        ("leader", [1, 2], 1, 0, 40000), ("isr", [1, 2], 1, 0, 40000),
        ("isr", [1, 2, 3], 1, 0, 50000), ("leader", [1, 2, 3], 2, 1, 50000),
        ("isr", [1, 2, 3], 2, 1, 50000)]
    assert tap.skipped == {metadata.IN_SNAPSHOT: 9}
    # The same snapshot again (a dump written again) is older than what was applied.
    again = [e for line in (FIXTURES / "metadata-snapshot-then-log.dump").read_text()
             .splitlines(True) for e in tap.feed(line)] + tap.finish()
    assert again == []
    assert tap.skipped == {metadata.OLD_SNAPSHOT: 8, metadata.IN_SNAPSHOT: 18,
                           metadata.READ_BEFORE: 2}


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
# Per version: the events (topic, partition, isr, partition_epoch, +ms) and what
# became of the proposals nothing committed (tests/fixtures/tap/README.md).
TRACE_ERA = ([("orders", 0, [1, 2], None, 40000), ("orders", 0, [1, 2, 3], None, 50002),
              ("audit", 2, [1], None, 70000)],
             {server_log.REFUSED: 1}, {server_log.TAKEN_AS_COMMIT: 3})
COMMITS = [("orders", 0, [1, 2], 11, 40004), ("orders", 0, [1, 2, 3], 12, 50006)]
SERVER_LOG_OUTCOMES = {
    **{v: TRACE_ERA for v in ("0.9", "0.10.2", "0.11", "1.0", "2.2")},
    "2.4": (COMMITS, {server_log.REFUSED: 1, server_log.NO_COMMIT: 1}, {}),
    **{v: (COMMITS, {server_log.NO_COMMIT: 2}, {}) for v in ("2.7", "2.8", "3.0", "3.1")},
    **{v: (COMMITS, {server_log.CONTROLLER_REJECTED: 1, server_log.NO_COMMIT: 1}, {})
       for v in ("3.3", "3.5", "3.6")},
}


@pytest.mark.parametrize("version", sorted(SERVER_LOG_WORDINGS))
def test_server_log_isr_lines_of_each_version(version):
    """Every Kafka version's wording: a commit line is the event; before 2.4
    (no INFO commit line) the proposal is, unless ZooKeeper refused it; every
    other proposal is counted, none vanishes at the end of the input."""
    tap = ServerLogTap("prod")
    events = list(events_of(tap, (FIXTURES / f"server-{version}.log").read_text()
                            .splitlines(True)))
    valid(events)
    got = [(e["topic"], e["partition"], e["isr"], e.get("partition_epoch"), e["ts"] - T0)
           for e in events]
    expected, skipped, approximate = SERVER_LOG_OUTCOMES[version]
    assert got == expected
    assert {e["leader"] for e in events} == {1}
    assert dict(tap.skipped) == {**skipped, "not a partition line": 1}
    assert dict(tap.approximate) == approximate
    assert not tap.proposals  # all settled at the end
    shrink = proposal_numbers(events[0]["kafka_log"])
    if version not in ("0.9", "0.10.2", "0.11", "1.0"):  # 2.2+: the leader's numbers
        assert (shrink["hw"], shrink["leader_leo"]) == (490, 2000)
        assert shrink["out_of_sync"][3]["leo"] == 490
        with_time = version == "3.6"
        assert shrink["out_of_sync"][3]["last_caught_up_ts"] == (1700000009802 if with_time
                                                                 else None)
        assert list(shrink["replicas"]) == ([3] if with_time else [])
    else:
        assert shrink == {"out_of_sync": {}, "replicas": {}}


def test_out_of_sync_replicas_kafka_could_not_describe():
    """3.0+: a replica the leader no longer knows prints `unknown`."""
    text = ("Shrinking ISR from 1,2,3 to 1,3. Leader: (highWatermark: 490, endOffset: 2000). "
            "Out of sync replicas: (brokerId: 2, endOffset: unknown, lastCaughtUpTimeMs: "
            "unknown) (brokerId: 4, endOffset: 12, lastCaughtUpTimeMs: 34).")
    assert proposal_numbers(text) == {
        "hw": 490, "leader_leo": 2000,
        "out_of_sync": {2: {"leo": None, "last_caught_up_ts": None},
                        4: {"leo": 12, "last_caught_up_ts": 34}},
        "replicas": {4: {"leo": 12, "last_caught_up_ts": 34}}}


def test_a_proposal_is_settled_by_the_partitions_next_line_or_five_seconds():
    """1.0-2.3 at INFO: the proposal is the commit, written once the partition's
    next line (or 5 s of log time) shows ZooKeeper did not refuse it."""
    def line(ms, p, text):
        return (f"[{stamp(T0 + ms)}] INFO [Partition orders-{p} broker=1] {text} "
                "(kafka.cluster.Partition)\n")
    tap = ServerLogTap()
    assert tap.feed(line(0, 0, "Shrinking ISR from 1,2,3 to 1,2")) == []
    assert tap.feed(line(1, 1, "Shrinking ISR from 1,2,3 to 1,3")) == []
    assert tap.feed(line(2, 1, "Cached zkVersion [4] not equal to that in zookeeper, "
                               "skip updating ISR")) == []
    assert tap.feed(line(3000, 1, "Expanding ISR from 1,3 to 1,3,2")) == []
    assert [e["isr"] for e in tap.feed(line(5000, 2, "something else"))] == [[1, 2]]
    assert [e["isr"] for e in tap.finish()] == [[1, 3, 2]]
    assert tap.skipped[server_log.REFUSED] == 1


def test_a_slow_commit_is_still_the_proposals():
    """3.6+ (lastCaughtUpTimeMs): the commit line comes after the AlterPartition
    round trip, however long it takes; other partitions' lines do not settle it."""
    def line(ms, p, text):
        return (f"[{stamp(T0 + ms)}] INFO [Partition orders-{p} broker=1] {text} "
                "(kafka.cluster.Partition)\n")
    tap = ServerLogTap()
    events = list(events_of(tap, [
        line(0, 0, "Shrinking ISR from 1,2,3 to 1,2. Leader: (highWatermark: 5, endOffset: 9). "
                   "Out of sync replicas: (brokerId: 3, endOffset: 5, lastCaughtUpTimeMs: 1)."),
        line(6000, 1, "Log loaded for partition orders-1 with initial high watermark 0"),
        line(7000, 0, "ISR updated to 1,2  and version updated to 4")]))
    assert [(e["isr"], e["ts"] - T0, "Shrinking" in e["kafka_log"]) for e in events] == [
        ([1, 2], 7000, True)]
    assert server_log.NO_COMMIT not in tap.skipped


def test_the_trace_commit_line_of_0_9_to_2_3_prints_replica_objects():
    """With kafka.cluster.Partition at TRACE, 0.9-2.3 log the commit with the
    ISR's Replica objects (Replica.toString): it is the event, with its version."""
    def line(ms, text):
        return (f"[{stamp(T0 + ms)}] {'TRACE' if 'updated' in text else 'INFO'} Partition "
                f"[orders,0] on broker 1: {text} (kafka.cluster.Partition)\n")
    tap = ServerLogTap()
    events = list(events_of(tap, [
        line(0, "Shrinking ISR for partition [orders,0] from 1,2,3 to 1,2"),
        line(3, "ISR updated to [ReplicaId: 1; Topic: orders; Partition: 0; isLocal: true; "
                "Highwatermark: 490,ReplicaId: 2; Topic: orders; Partition: 0; isLocal: false] "
                "and zkVersion updated to [11]"),  # 0.9.0.0 Replica.toString
        line(9, "ISR updated to [Replica(replicaId=1, topic=orders, partition=0, isLocal=true, "
                "lastCaughtUpTimeMs=1700000000000, highWatermark=490, lastStableOffset=490),"
                "Replica(replicaId=3, topic=orders, partition=0, isLocal=false, "
                "lastCaughtUpTimeMs=1700000000000)] and zkVersion updated to [12]")]))  # 2.1-2.3
    assert [(e["isr"], e["partition_epoch"], e["ts"] - T0) for e in events] == [
        ([1, 2], 11, 3), ([1, 3], 12, 9)]
    assert "Shrinking ISR" in events[0]["kafka_log"] and not tap.approximate


@pytest.mark.parametrize("banner,taken", [("Kafka version : 2.3.1", True),
                                           ("Kafka version: 3.4.0", False), (None, True)])
def test_the_brokers_start_banner_says_whether_a_proposal_is_the_commit(banner, taken):
    """`Shrinking ISR ... Leader: (...)` without lastCaughtUpTimeMs is 2.2 to
    3.5: the banner (AppInfoParser, at every start) tells whether the commit
    line is TRACE (up to 2.3) or INFO; without it, no commit line seen yet
    means the proposal is taken."""
    lines = [] if banner is None else [
        f"[{stamp(T0)}] INFO {banner} (org.apache.kafka.common.utils.AppInfoParser)\n"]
    lines.append(f"[{stamp(T0 + 1)}] INFO [Partition orders-0 broker=1] Shrinking ISR from 1,2,3 "
                 "to 1,2. Leader: (highWatermark: 5, endOffset: 9). Out of sync replicas: "
                 "(brokerId: 3, endOffset: 5). (kafka.cluster.Partition)\n")
    tap = ServerLogTap()
    events = list(events_of(tap, lines))
    assert [e["isr"] for e in events] == ([[1, 2]] if taken else [])
    assert tap.skipped.get(server_log.NO_COMMIT, 0) == (0 if taken else 1)


# ------------------------------------------------------------ state-change.log
# (type, leader, leader_epoch, isr, leader_epoch_start_offset, partition_epoch, +ms)
_ZK_OLD = [("leader", 1, 0, [1, 2, 3], 0, None, 10), ("isr", 1, 0, [1, 2, 3], None, None, 10),
           ("leader", 1, 0, [1, 2, 3], 0, None, 20), ("isr", 1, 0, [1, 2, 3], None, 0, 20),
           ("leader", 2, 1, [2], 0, None, 30010), ("isr", 2, 1, [2], None, None, 30010)]
_ZK_TRACE = [("isr", 1, 0, [1, 2, 3], None, 0, 10), ("leader", 1, 0, [1, 2, 3], 0, None, 11),
             ("isr", 1, 0, [1, 2, 3], None, 0, 11), ("leader", 1, 0, [1, 2, 3], 0, None, 12),
             ("isr", 1, 0, [1, 2, 3], None, 0, 12), ("isr", 2, 1, [2], None, 2, 30000),
             ("leader", 2, 1, [2], 0, None, 30010), ("isr", 2, 1, [2], None, 2, 30010)]
_ZK_INFO = [("isr", 1, 0, [1, 2, 3], None, 0, 10), ("isr", 1, 0, [1, 2], None, None, 20000),
            ("isr", 2, 1, [2], None, 2, 30000), ("leader", 2, 1, [2], 2000, None, 30020),
            ("isr", 2, 1, [2], None, None, 30020)]
_ZK_33 = _ZK_INFO[:1] + [("isr", 1, 0, [1, 2], None, 1, 20000)] + _ZK_INFO[2:4] + [
    ("isr", 2, 1, [2], None, 2, 30020), ("isr", 2, 1, [2, 3], None, 3, 40000)]
_KRAFT = [("isr", 2, 1, [2], None, 2, 30020), ("isr", 2, 1, [2, 3], None, 3, 40000)]
STATE_CHANGE_OUTCOMES = {
    "0.9": _ZK_OLD[:3] + [("isr", 1, 0, [1, 2, 3], None, None, 20)] + _ZK_OLD[4:],  # no version
    "0.10": _ZK_OLD,
    "1.1": _ZK_TRACE, "2.4": _ZK_TRACE, "2.6": _ZK_INFO, "3.3": _ZK_33, "3.5": _ZK_33,
    "3.7": _ZK_33,
    "4.0": _KRAFT, "4.2": _KRAFT,
}


@pytest.mark.parametrize("version", STATE_CHANGE_VERSIONS)
def test_state_change_lines_of_each_version(version):
    """A broker becoming leader is a leader event with the epoch's start
    offset and HW (2.6+); the controller's LeaderAndIsr requests (TRACE, on by
    default before 2.6) are leader events; its elections and ISR removals,
    and a leader's new ISR without a new epoch (3.3+), are isr events."""
    tap = StateChangeTap("prod")
    events = list(events_of(tap, (FIXTURES / f"state-change-{version}.log").read_text()
                            .splitlines(True)))
    valid(events)
    got = [(e["type"], e["leader"], e["leader_epoch"], e["isr"],
            e.get("leader_epoch_start_offset"), e.get("partition_epoch"), e["ts"] - T0)
           for e in events]
    assert got == STATE_CHANGE_OUTCOMES[version]
    assert {(e["topic"], e["partition"]) for e in events} == {("orders", 0)}
    leaders = [e for e in events if e["type"] == "leader"]
    assert all(e["replicas"] == [1, 2, 3] for e in leaders)
    if version >= "2.6" and version < "4":
        assert [e.get("hw") for e in leaders] == [1990]
    skipped = {"not a leader or ISR line": 1}
    if version in ("0.9", "0.10", "1.1", "2.4"):
        skipped["LeaderAndIsr request to a follower"] = 1
    assert dict(tap.skipped) == skipped
    # KRaft brokers never log the assignment: their leader line is an isr event.
    assert dict(tap.approximate) == ({state_change.WITHOUT_REPLICAS: 1} if version >= "4"
                                     else {})


def test_tap_state_change_command(tmp_path):
    out = tmp_path / "state.jsonl"
    r = cli("tap", "state-change", str(FIXTURES / "state-change-4.2.log"), "--to", str(out))
    assert r.returncode == 0, r.stderr
    assert "3 lines read, 2 events written" in r.stderr
    assert state_change.WITHOUT_REPLICAS in r.stderr
    assert [json.loads(x)["isr"] for x in out.read_text().splitlines()] == [[2], [2, 3]]


def test_a_kraft_broker_learns_the_replicas_from_a_state_it_skipped():
    """4.4.0's wording (tests/data/real-kafka/4.4.0): a follower's skipped
    state shows the partition registration; when the broker later leads the
    partition its leader line is a leader event with the epoch's start."""
    def line(ms, text):
        return f"[{stamp(T0 + ms)}] INFO [Broker id=1] {text} (state.change.logger)\n"
    follower = line(0, (
        "Skipped the become-follower state change for orders-1 with topic id "
        "Some(ajTRq1KmSLSTgCjn_TZn7g), partition registration PartitionRegistration("
        "replicas=[2, 3, 1], directories=[YpGEKKe1RIZlSY3bxU_A-w, zzvLRxCc8ZFDysPp4wFTeQ, "
        "JnBIEJCkysLoXbDnUFbzHw], isr=[1, 2], removingReplicas=[], addingReplicas=[], "
        "elr=[], lastKnownElr=[], leader=2, leaderRecoveryState=RECOVERED, leaderEpoch=0, "
        "partitionEpoch=1) and isNew=false since it is already a follower with leader "
        "epoch 0."))
    leader = line(5000, (
        "Leader orders-1 with topic id Some(ajTRq1KmSLSTgCjn_TZn7g) starts at leader "
        "epoch 1 from offset 57 with partition epoch 3, high watermark 50, ISR [1,3], "
        "adding replicas [] and removing replicas [] . Previous leader Some(2) and "
        "previous leader epoch was 0."))
    tap = StateChangeTap()
    events = list(events_of(tap, [follower, leader]))
    valid(events)
    assert [(e["type"], e.get("replicas"), e.get("leader_epoch_start_offset"), e.get("hw"))
            for e in events] == [("leader", [2, 3, 1], 57, 50), ("isr", None, None, None)]
    assert events[0]["leader"] == 1 and events[1]["partition_epoch"] == 3
    assert tap.skipped == {"a follower's partition state": 1} and not tap.approximate


def test_replicas_that_are_neither_a_file_nor_a_cluster_are_one_line(tmp_path):
    r = cli("tap", "state-change", str(FIXTURES / "state-change-2.6.log"),
            "--replicas", str(tmp_path / "missing.dump"), "--to", "-")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert "--replicas" in r.stderr and "no such file" in r.stderr


def test_partition_states_as_each_class_prints_them():
    cases = {
        "(Leader:1,ISR:1,2,LeaderEpoch:5,ControllerEpoch:3)": (1, 5, [1, 2], None, None),
        "(LeaderAndIsrInfo:(Leader:1,ISR:1,2,LeaderEpoch:5,ControllerEpoch:3),"
        "ReplicationFactor:3),AllReplicas:1,2,3)": (1, 5, [1, 2], [1, 2, 3], None),
        "LeaderAndIsr(leader=-1, leaderEpoch=6, isr=List(2), zkVersion=9)": (-1, 6, [2], None, 9),
        "LeaderAndIsr(leader=2, leaderEpoch=6, isrWithBrokerEpoch=List(BrokerState(brokerId=2, "
        "brokerEpoch=-1), BrokerState(brokerId=3, brokerEpoch=7)), leaderRecoveryState="
        "RECOVERED, partitionEpoch=9)": (2, 6, [2, 3], None, 9),
        "PartitionState(controllerEpoch=3, leader=1, leaderEpoch=5, isr=1,2, zkVersion=7, "
        "replicas=1,2,3, isNew=false)": (1, 5, [1, 2], [1, 2, 3], 7),
    }
    for text, want in cases.items():
        got = state_change.partition_state(text)
        assert tuple(got.get(k) for k in ("leader", "leader_epoch", "isr", "replicas",
                                          "version")) == want, text


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


def calm_cluster(tmp_path: Path, stop_replica_3_at_ms: int | None = None) -> list[str]:
    """Issue 24: a metadata dump of three partitions created with ISR =
    replicas, through `isr tap metadata`, and 60 s of fetches that keep every
    follower caught up (replica 3 of orders-0 stops at `stop_replica_3_at_ms`)."""
    dump = [dump_record(0, T0 - 5000, "TOPIC_RECORD", 0, {"name": "orders", "topicId": TOPIC_ID})]
    for p in range(3):
        dump.append(dump_record(1 + p, T0 - 3000 + p, "PARTITION_RECORD", 1, {
            "partitionId": p, "topicId": TOPIC_ID, "replicas": [1, 2, 3], "isr": [1, 2, 3],
            "removingReplicas": [], "addingReplicas": [], "leader": 1 + p, "leaderEpoch": 0,
            "partitionEpoch": 0, "directories": ["6Tv1xj7YRwqFc1pC8Yk5mA"] * 3}))
    (tmp_path / "meta.dump").write_text("".join(dump))
    r = cli("tap", "metadata", str(tmp_path / "meta.dump"), "--to", str(tmp_path / "meta.jsonl"))
    assert r.returncode == 0, r.stderr
    fetches = []
    for t in range(0, 60_000, 500):
        for p in range(3):
            for replica in {1, 2, 3} - {1 + p}:
                if (p, replica) == (0, 3) and stop_replica_3_at_ms is not None \
                        and t >= stop_replica_3_at_ms:
                    continue
                fetches.append({"v": 1, "type": "fetch", "ts": T0 + t, "topic": "orders",
                                "partition": p, "leader": 1 + p, "leader_epoch": 0,
                                "replica": replica, "fetch_offset": t // 10,
                                "leader_leo": t // 10})
    write(tmp_path / "fetches.jsonl", fetches)
    return [str(tmp_path / "meta.jsonl"), str(tmp_path / "fetches.jsonl")]


def test_verify_of_a_calm_cluster_finds_no_difference(tmp_path):
    """The metadata's first `isr` events are the starting state the `leader`
    events gave the monitor, not changes it failed to compute."""
    v = cli("verify", *calm_cluster(tmp_path))
    assert v.returncode == 0, v.stdout + v.stderr
    assert v.stdout.strip() == ("3 partitions, 0 ISR changes agree, 0 partitions differ (policy "
                                "kafka, tolerance 2000 ms; 3 ISRs set by leader events agree)")


def test_verify_still_reports_a_real_difference(tmp_path):
    files = calm_cluster(tmp_path, stop_replica_3_at_ms=10_000)
    # ... and the cluster shrank orders-1 where every follower kept up.
    write(tmp_path / "server.jsonl", [{"v": 1, "type": "isr", "ts": T0 + 30_000,
                                        "topic": "orders", "partition": 1, "leader": 2,
                                        "leader_epoch": 0, "isr": [1, 2]}])
    v = cli("verify", *files, str(tmp_path / "server.jsonl"))
    assert v.returncode == 1, v.stdout + v.stderr
    out = v.stdout.splitlines()
    assert "orders-0: 0 ISR changes agree, 1 only computed, 0 only in the cluster" in out
    assert any(line.startswith("  computed shrink to [1, 2] at +") and
               "that the cluster did not commit: replica 3: lag" in line for line in out), out
    assert "orders-1: 0 ISR changes agree, 0 only computed, 1 only in the cluster" in out
    assert any(line.startswith("  the cluster committed [1, 2] at +") and
               line.endswith("s while the computed ISR was [1, 2, 3]") for line in out), out
    assert out[-1].startswith("3 partitions, 0 ISR changes agree, 2 partitions differ")


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
    assert proc.returncode == 130, err  # README, exit codes: stopped by Ctrl-C / SIGTERM
    assert "2 events written" in err and "Traceback" not in err, err


def test_a_v13_request_log_without_topic_ids_says_why_nothing_was_written(tmp_path):
    """Issue 24: FetchRequest v13+ names topics by id; without --topic-ids
    nothing can be written, and the user must hear why and what fixes it."""
    log = str(FIXTURES / "kafka-request-v13.log")
    r = cli("tap", "request-log", log, "--broker", "1", "--to", str(tmp_path / "o.jsonl"), "-q")
    assert r.returncode == 3, r.stderr
    assert r.stderr.splitlines() == [
        "isr tap request-log: warning: 6 FETCH lines skipped for topic ids without a name "
        "(FetchRequest v13+ names topics by id): give --topic-ids DUMP|BOOTSTRAP (a metadata "
        "dump or the cluster) to name them"]
    assert (tmp_path / "o.jsonl").read_text() == ""
    r = cli("tap", "request-log", log, "--broker", "1", "--to", str(tmp_path / "o.jsonl"),
            "--topic-ids", str(FIXTURES / "metadata.dump"))
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    assert (tmp_path / "o.jsonl").read_text().count("\n") > 0


def test_tap_user_errors_are_one_line(tmp_path):
    r = cli("tap", "request-log", str(tmp_path / "missing.log"), "--broker", "1", "--to", "-")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith(f"isr tap request-log: {tmp_path / 'missing.log'}: no such file")
    r = cli("tap", "metadata", "--to", "-")
    assert r.returncode == 2 and "one of the two" in r.stderr
    r = cli("tap", "server-log", "-", "--timezone", "Mars/Olympus", "--to", "-", stdin="")
    assert r.returncode == 2 and "not a time zone" in r.stderr
