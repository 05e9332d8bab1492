"""The taps on what a real Apache Kafka 4.4.0 cluster wrote (tests/data/real-kafka/4.4.0,
captured by tests/data/real-kafka/capture.py: broker 3 paused with SIGSTOP for
7.5 s, `replica.lag.time.max.ms` 3 s): every ISR change the controller
committed (its metadata log) is what the brokers' logs say, line for line."""

from __future__ import annotations

import json

import orjson
import pytest
from helpers import ROOT, cli

from isr.contract import Rejection, decode
from isr.tap import server_log, state_change
from isr.tap.lines import events_of
from isr.tap.metadata import MetadataLogTap
from isr.tap.server_log import ServerLogTap, proposal_numbers
from isr.tap.state_change import StateChangeTap

REAL = ROOT / "tests" / "data" / "real-kafka" / "4.4.0"
RUN = json.loads((REAL / "run.json").read_text())
LEADERS = {("orders", 0): 1, ("orders", 1): 2, ("orders", 2): 3, ("idle", 0): 1}


def tap(t, name: str) -> list[dict]:
    events = list(events_of(t, (REAL / name).read_text().splitlines(True)))
    for e in events:
        assert not isinstance(decode(orjson.dumps(e)), Rejection), e
    return events


def committed() -> dict[tuple, list[tuple]]:
    """The controller's ISR changes, per partition: (ts, sorted isr, partition epoch)."""
    out: dict[tuple, list[tuple]] = {}
    for e in tap(MetadataLogTap(hold=True), "metadata.dump"):
        if e["type"] == "isr":
            out.setdefault((e["topic"], e["partition"]), []).append(
                (e["ts"], sorted(e["isr"]), e["partition_epoch"]))
    return out


@pytest.mark.parametrize("hold", [False, True])
def test_the_real_metadata_dump_with_and_without_record_metadata(hold):
    """4.4's DumpLogSegments (org.apache.kafka.tools, Java): `| offset: ...
    payload:` and, with --skip-record-metadata, `| payload:` lines and an
    empty line per control record; both give the same events."""
    t = MetadataLogTap(hold=hold)
    full = tap(t, "metadata.dump")
    skip_tap = MetadataLogTap(hold=hold)
    assert tap(skip_tap, "metadata-skip-record-metadata.dump") == full
    assert not t.approximate and not skip_tap.approximate
    assert not [r for r in t.skipped if "not about" not in r]  # every line understood
    assert [(e["broker"], e["state"]) for e in full if e["type"] == "broker"][-3:] == [
        (2, "unfenced"), (1, "unfenced"), (3, "unfenced")]
    leaders = {(e["topic"], e["partition"]): e["leader"] for e in full if e["type"] == "leader"}
    assert leaders == LEADERS
    changes = {k: [isr for _, isr, _ in v] for k, v in committed().items()}
    assert changes == {("orders", 0): [[1, 2, 3], [1, 2], [1, 2, 3]],
                       ("orders", 1): [[1, 2, 3], [1, 2], [1, 2, 3]],
                       ("orders", 2): [[1, 2, 3], [3], [2, 3], [1, 2, 3]],
                       ("idle", 0): [[1, 2, 3]]}  # idle partitions never shrink


def test_the_real_server_logs_commits_are_the_controllers():
    """Each `ISR updated to ...` line is a change the controller committed,
    with its partition epoch; a `Shrinking ISR` whose commit reached the
    leader through the metadata first (4.x: the AlterPartition response
    then changes nothing and is not logged) is counted, and its proposed ISR
    is the next one the controller committed."""
    commits = committed()
    proposals, logged = 0, 0
    for broker in (1, 2, 3):
        t = ServerLogTap()
        events = tap(t, f"broker-{broker}-server.log")
        logged += len(events)
        assert t.version == (4, 4)
        for e in events:
            key = (e["topic"], e["partition"])
            assert e["leader"] == LEADERS[key] == broker
            match = [c for c in commits[key] if c[1:] == (sorted(e["isr"]), e["partition_epoch"])]
            assert match and 0 <= e["ts"] - match[0][0] < 1000, e
        proposals += t.skipped[server_log.NO_COMMIT]
        assert not t.approximate  # 4.4 logs its commits: no proposal is taken for one
        for line in (REAL / f"broker-{broker}-server.log").read_text().splitlines():
            parsed = t.log4j.parse(line)
            m = parsed and server_log.PARTITION.match(parsed.message)
            proposed = m and server_log.PROPOSED.match(m.group(4))
            if proposed:  # the controller committed what the leader proposed
                key, isr = (m.group(1), int(m.group(2))), sorted(server_log.ids(proposed.group(3)))
                assert [c for c in commits[key] if c[1] == isr and 0 <= c[0] - parsed.ts < 1000]
    assert proposals == 2  # orders-0 and orders-1 removing broker 3
    # 7 changes after the topics' creation; 3 never had an `ISR updated` line.
    assert (logged, sum(len(v) - 1 for v in commits.values())) == (4, 7)


def test_the_real_shrink_lines_carry_the_leaders_numbers():
    text = next(line for line in (REAL / "broker-3-server.log").read_text().splitlines()
                if "Shrinking ISR" in line)
    numbers = proposal_numbers(text)
    assert (numbers["hw"], numbers["leader_leo"]) == (11, 12)
    assert sorted(numbers["replicas"]) == [1, 2]
    for n in numbers["replicas"].values():  # caught up before the pause
        assert n["leo"] == 11 and n["last_caught_up_ts"] < RUN["resume_ms"]


def test_the_real_state_change_logs_give_every_isr_the_leaders_learned():
    """KRaft brokers log the ISR they apply from the metadata: `Leader ...
    starts at leader epoch 0 ... ISR [1,2,3]` and `Skipped the become-leader
    state change ... since it is already the leader ... ISR [1,2]`: every
    ISR the controller committed, from its leader, within a second."""
    commits = committed()
    for broker in (1, 2, 3):
        t = StateChangeTap()
        events = tap(t, f"broker-{broker}-state-change.log")
        assert {e["type"] for e in events} == {"isr"}  # the lines never list the replicas
        led = sorted(k for k, b in LEADERS.items() if b == broker)
        assert t.approximate == {state_change.WITHOUT_REPLICAS: len(led)}
        for key in led:
            got = [(e["ts"], sorted(e["isr"]), e["partition_epoch"]) for e in events
                   if (e["topic"], e["partition"]) == key]
            assert [g[1:] for g in got] == [c[1:] for c in commits[key]]
            assert all(0 <= g[0] - c[0] < 1000 for g, c in zip(got, commits[key]))


def test_the_real_leader_lines_take_their_replicas_from_the_metadata_dump(tmp_path):
    """`isr tap state-change --replicas DUMP`: KRaft's leader lines list no
    replicas; the dump has them, and the lines become leader events with the
    epoch's start offset and HW."""
    out = tmp_path / "state.jsonl"
    r = cli("tap", "state-change", str(REAL / "broker-1-state-change.log"),
            "--replicas", str(REAL / "metadata.dump"), "--to", str(out))
    assert r.returncode == 0, r.stderr
    assert "approximate" not in r.stderr
    events = [json.loads(x) for x in out.read_text().splitlines()]
    leaders = [(e["topic"], e["partition"], e["replicas"], e["leader_epoch_start_offset"], e["hw"])
               for e in events if e["type"] == "leader"]
    assert leaders == [("idle", 0, [1, 2, 3], 0, 0), ("orders", 0, [1, 2, 3], 0, 0)]
