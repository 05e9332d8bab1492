"""The taps on what a real Apache Kafka 4.4.0 cluster wrote while a follower
was paused (tests/data/real-kafka/README.md: the run, the commands), and the
monitor's decisions against the ISR the cluster committed. Runs without Java
or Maven. What the server.log and state-change.log taps make of the same
files is tests/test_tap_real_kafka.py's (branch log-formats)."""

from __future__ import annotations

import json

import pytest
from helpers import ROOT, cli

from isr.tap.lines import events_of
from isr.tap.metadata import MetadataLogTap
from isr.tap.request_log import RequestLogTap
from isr.tap.server_log import ServerLogTap

DATA = ROOT / "tests" / "data" / "real-kafka" / "4.4.0"
RUN = json.loads((DATA / "run.json").read_text())
BROKERS = (1, 2, 3)
PAUSED = RUN["paused_broker"]
LAG_MS = RUN["replica_lag_time_max_ms"]


# the other runs of the same capture (tests/data/real-kafka/README.md)
KILL, TERM = DATA / "kill-9", DATA / "controlled-shutdown"
RUNS = [DATA, KILL, TERM]


def lines(name: str, run=DATA) -> list[str]:
    return (run / name).read_text().splitlines()


def metadata_tap(run=DATA) -> tuple[MetadataLogTap, list[dict]]:
    tap = MetadataLogTap()
    return tap, list(events_of(tap, lines("metadata.dump", run)))


def dump_records(kind: str, run=DATA) -> list[dict]:
    """The dump's records of one type, read with json alone (not the tap)."""
    out = []
    for line in lines("metadata.dump", run):
        if "payload: " in line and f'"type":"{kind}"' in line:
            out.append(json.loads(line.split("payload: ", 1)[1]))
    return out


def commits(run=DATA) -> dict[tuple[str, int], list[tuple[int, list[int]]]]:
    """(topic, partition) -> [(partition epoch, sorted ISR)] the controller committed."""
    names = {r["data"]["topicId"]: r["data"]["name"]
             for r in dump_records("TOPIC_RECORD", run)}
    out: dict = {}
    for r in dump_records("PARTITION_RECORD", run):
        d = r["data"]
        out[(names[d["topicId"]], d["partitionId"])] = [(0, sorted(d["isr"]))]
    for r in dump_records("PARTITION_CHANGE_RECORD", run):
        d = r["data"]
        key = (names[d["topicId"]], d["partitionId"])
        out[key].append((len(out[key]), sorted(d.get("isr") or out[key][-1][1])))
    return out


def leaders(run=DATA) -> dict[tuple[str, int], int]:
    """The first leader of each partition."""
    _tap, events = metadata_tap(run)
    out: dict = {}
    for e in events:
        if e["type"] == "leader":
            out.setdefault((e["topic"], e["partition"]), e["leader"])
    return out


def request_log_events(broker: int, run=DATA) -> tuple[RequestLogTap, list[dict]]:
    topic_names, _ = metadata_tap(run)
    tap = RequestLogTap(broker, topic_names=topic_names.topic_name)
    return tap, list(events_of(tap, lines(f"broker-{broker}-kafka-request.log", run)))


# ------------------------------------------------------------------ metadata
@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.name)
def test_metadata_tap_gives_every_isr_the_controller_committed_in_each_run(run):
    _tap, events = metadata_tap(run)
    got: dict = {}
    for e in events:
        if e["type"] == "isr":
            got.setdefault((e["topic"], e["partition"]), []).append(
                (e["partition_epoch"], sorted(e["isr"])))
    assert got == commits(run)
    assert got[("idle", 0)][-1][1] == [1, 2, 3]


def test_metadata_tap_gives_every_isr_the_controller_committed():
    _tap, events = metadata_tap()
    got: dict = {}
    for e in events:
        if e["type"] == "isr":
            got.setdefault((e["topic"], e["partition"]), []).append(
                (e["partition_epoch"], sorted(e["isr"])))
    assert got[("orders", 0)] == [(0, [1, 2, 3]), (1, [1, 2]), (2, [1, 2, 3])]
    assert got[("orders", 2)] == [(0, [1, 2, 3]), (1, [3]), (2, [2, 3]), (3, [1, 2, 3])]
    assert got[("idle", 0)] == [(0, [1, 2, 3])]  # an idle partition never shrinks


def test_metadata_tap_sees_the_brokers_register_and_unfence():
    tap, events = metadata_tap()
    states = {(e["broker"], e["state"]) for e in events if e["type"] == "broker"}
    assert {(b, "registered") for b in BROKERS} <= states
    assert {(b, "unfenced") for b in BROKERS} <= states
    # the pause stayed below broker.session.timeout.ms: nobody was fenced
    assert not [e for e in events if e["type"] == "broker" and e["ts"] >= RUN["pause_ms"]]
    assert "unreadable record payload" not in tap.skipped


# ------------------------------------------------------------------ request log
@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.name)
@pytest.mark.parametrize("broker", BROKERS)
def test_request_log_tap_reads_every_follower_fetch(broker, run):
    tap, events = request_log_events(broker, run)
    # the few non-FETCH lines kept (and fetches of a partition whose leader
    # epoch moved: FENCED_ / UNKNOWN_LEADER_EPOCH) are all it skips
    assert set(tap.skipped) <= {"not a FETCH", "partition error 74", "partition error 75"}, \
        tap.skipped
    fetched = {(e["topic"], e["partition"], e["replica"]) for e in events
               if e["type"] == "fetch"}
    led = [tp for tp, leader in leaders(run).items() if leader == broker]
    assert led, "each broker leads a partition of orders or idle"
    for topic, partition in led:
        for follower in set(BROKERS) - {broker}:
            assert (topic, partition, follower) in fetched
    assert all(e["leader"] == broker and e["replica"] != broker for e in events
               if e["type"] == "fetch")


@pytest.mark.parametrize("broker", sorted(set(BROKERS) - {PAUSED}))
def test_the_paused_followers_fetches_stop_for_the_pause(broker):
    _tap, events = request_log_events(broker)
    ts = sorted(e["ts"] for e in events if e["type"] == "fetch" and e["replica"] == PAUSED)
    gap, start = max((b - a, a) for a, b in zip(ts, ts[1:]))
    pause = RUN["resume_ms"] - RUN["pause_ms"]
    assert pause - 500 <= gap <= pause + 1000
    assert RUN["pause_ms"] - 1000 <= start <= RUN["pause_ms"]


# ------------------------------------------------------------------ server.log
def server_log_events(broker: int, *names: str) -> tuple[ServerLogTap, list[dict]]:
    tap = ServerLogTap()
    text: list[str] = []
    for name in names or ("server.log",):
        text += lines(f"broker-{broker}-{name}")
    return tap, list(events_of(tap, text))


def test_server_log_commits_that_are_there_match_the_metadata_log():
    """Each `ISR updated to ... and version updated to N` line is a commit of
    the metadata log: same partition, ISR and partition epoch."""
    committed = commits()
    seen = []
    for broker in BROKERS:
        _tap, events = server_log_events(broker)
        for e in events:
            key = (e["topic"], e["partition"])
            assert (e["partition_epoch"], sorted(e["isr"])) in committed[key], e
            assert leaders()[key] == broker
            seen.append((key, e["partition_epoch"]))
    assert (("orders", 2), 1) in seen  # the paused leader's own shrink to [3]


# ------------------------------------------------------------------ the monitor
def tap_all(tmp_path, run=DATA, grain: str = "session") -> list[str]:
    """The three taps as an operator runs them, to files."""
    runs = [("metadata", str(run / "metadata.dump"))]
    for b in BROKERS:
        runs.append(("request-log", str(run / f"broker-{b}-kafka-request.log"), "--broker",
                     str(b), "--topic-ids", str(run / "metadata.dump"), "--grain", grain))
    outputs = []
    for i, run in enumerate(runs):
        out = tmp_path / f"{i}-{grain}-{run[0]}.jsonl"
        r = cli("tap", *run, "--to", str(out), "-q")
        assert r.returncode == 0, r.stderr
        outputs.append(str(out))
    return outputs


def test_the_monitor_removes_and_takes_back_the_paused_follower_where_the_cluster_did(tmp_path):
    """Replay of the taps' events: the leaders 1 and 2 shrink and expand
    their partitions of `orders` as the controller committed, within the
    leader's ISR check interval (replica.lag.time.max.ms / 2)."""
    outputs = tap_all(tmp_path)
    r = cli("replay", "--merge", *outputs, "--no-state", "-q",
            "--set", f"monitor.replica_lag_time_max_ms={LAG_MS}")
    assert r.returncode == 0, r.stderr
    changes = [json.loads(x) for x in r.stdout.splitlines()]
    changes = [c for c in changes if c["type"] == "isr_change"]
    _tap, events = metadata_tap()
    cluster = [e for e in events if e["type"] == "isr" and e["partition_epoch"] > 0]
    for partition in (0, 1):
        ours = [(c["action"], sorted(c["isr_after"]), c["ts"]) for c in changes
                if (c["topic"], c["partition"]) == ("orders", partition)]
        theirs = [(sorted(e["isr"]), e["ts"]) for e in cluster
                  if (e["topic"], e["partition"]) == ("orders", partition)]
        assert [(a, isr) for a, isr, _ in ours] == [("shrink", [1, 2]), ("expand", [1, 2, 3])]
        assert [isr for isr, _ in theirs] == [[1, 2], [1, 2, 3]]
        for (_a, _isr, ts), (_isr2, committed) in zip(ours, theirs):
            assert abs(ts - committed) <= LAG_MS / 2, (partition, ts, committed)
    assert not [c for c in changes if c["topic"] == "idle"]


def test_the_monitor_sees_the_paused_leader_shrink_its_followers(tmp_path):
    """Broker 3, leader of orders-2, was itself stopped 7.5 s: its overdue ISR
    check ran at its resume, before its followers' next fetches, and removed
    both (docs/rules.md, "A leader that was itself stopped"); then it took back
    broker 2 first, then broker 1, as the controller committed."""
    outputs = tap_all(tmp_path)
    r = cli("replay", "--merge", *outputs, "--no-state", "-q",
            "--set", f"monitor.replica_lag_time_max_ms={LAG_MS}")
    assert r.returncode == 0, r.stderr
    changes = [json.loads(x) for x in r.stdout.splitlines()]
    ours = [c for c in changes
            if c["type"] == "isr_change" and (c["topic"], c["partition"]) == ("orders", 2)]
    assert [(c["action"], c["isr_after"]) for c in ours] == [
        ("shrink", [3]), ("expand", [3, 2]), ("expand", [3, 2, 1])]
    assert ours[0]["reason"].startswith("leader 3 resumed after ")
    assert RUN["resume_ms"] < ours[0]["ts"] < RUN["resume_ms"] + LAG_MS / 2
    _tap, events = metadata_tap()
    theirs = [e for e in events if e["type"] == "isr" and e["partition_epoch"] > 0
              and (e["topic"], e["partition"]) == ("orders", 2)]
    for mine, commit in zip(ours, theirs):
        assert sorted(mine["isr_after"]) == sorted(commit["isr"])
        assert abs(mine["ts"] - commit["ts"]) <= LAG_MS / 2


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.name)
def test_session_and_partition_grain_give_the_same_decisions(run, tmp_path):
    """The request-log tap's fetch_session events (one per follower FETCH,
    only the partitions it listed) decide exactly what its per-partition
    fetches decide: every decision, alert and final state, every policy."""
    from isr.cli import main

    _tap, meta = metadata_tap(run)
    out, written = {}, {}
    for grain in ("session", "partition"):
        events = list(meta)
        for b in BROKERS:
            tap = RequestLogTap(b, topic_names=_tap.topic_name, grain=grain)
            events += events_of(tap, lines(f"broker-{b}-kafka-request.log", run))
        path, res = tmp_path / f"{grain}.jsonl", tmp_path / f"{grain}.out.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in sorted(events,
                                                                      key=lambda e: e["ts"])))
        assert main(["replay", str(path), "-q", "-o", str(res), "--policy",
                     "kafka,kip16,legacy,kip501",
                     "--set", f"monitor.replica_lag_time_max_ms={LAG_MS}"]) == 0
        out[grain], written[grain] = res.read_text(), events[len(meta):]
    assert out["session"] == out["partition"]
    assert '"isr_change"' in out["session"]
    assert {e["type"] for e in written["session"]} == {"fetch_session", "append"}
    # an idle follower's incremental FETCH lists nothing: far fewer partitions written
    listed = sum(len(e["partitions"]) for e in written["session"] if e["type"] == "fetch_session")
    assert listed < len([e for e in written["partition"] if e["type"] == "fetch"])


@pytest.mark.parametrize("grain", ["session", "partition"])
def test_verify_agrees_with_the_cluster_on_the_pause(tmp_path, grain):
    """Every ISR change the cluster committed in the pause run is matched,
    the paused leader's own shrink and expands included, and nothing else."""
    v = cli("verify", *tap_all(tmp_path, grain=grain),
            "--set", f"monitor.replica_lag_time_max_ms={LAG_MS}")
    assert v.returncode == 0, v.stdout + v.stderr
    assert "4 partitions, 7 ISR changes agree, 0 partitions differ" in v.stdout


# ------------------------------------------------------------------ kill -9, SIGTERM
def run_json(run) -> dict:
    return json.loads((run / "run.json").read_text())


def test_a_killed_broker_is_fenced_after_the_session_timeout():
    info = run_json(KILL)
    _tap, events = metadata_tap(KILL)
    states = [(e["state"], e["ts"]) for e in events
              if e["type"] == "broker" and e["broker"] == info["killed_broker"]
              and e["ts"] >= info["kill_ms"]]
    assert [s for s, _ in states] == ["fenced", "registered", "fenced", "unfenced"]
    fenced = states[0][1] - info["kill_ms"]
    assert info["broker_session_timeout_ms"] - 1000 <= fenced <= \
        info["broker_session_timeout_ms"] + 3000
    # the partition it led got a new leader (and epoch) at the fencing
    moved = [e for e in events if e["type"] == "leader" and e["ts"] == states[0][1]]
    assert [e["leader_epoch"] for e in moved] == [1]
    assert info["killed_broker"] not in moved[0]["isr"]


def test_a_controlled_shutdown_moves_everything_at_once():
    info = run_json(TERM)
    _tap, events = metadata_tap(TERM)
    states = [(e["state"], e["ts"]) for e in events
              if e["type"] == "broker" and e["broker"] == info["stopped_broker"]
              and e["ts"] >= info["sigterm_ms"]]
    assert [s for s, _ in states][:2] == ["controlled_shutdown", "fenced"]
    assert states[0][1] - info["sigterm_ms"] < 1000
    removed = [e for e in events if e["type"] == "isr" and e["ts"] == states[0][1]]
    assert len(removed) == 4  # every partition of orders and idle, in one batch
    assert all(info["stopped_broker"] not in e["isr"] for e in removed)


@pytest.mark.parametrize("run", [KILL, TERM], ids=lambda r: r.name)
def test_the_monitor_takes_the_restarted_broker_back_where_the_cluster_did(run, tmp_path):
    outputs = tap_all(tmp_path, run)
    r = cli("replay", "--merge", *outputs, "--no-state", "-q",
            "--set", f"monitor.replica_lag_time_max_ms={LAG_MS}")
    assert r.returncode == 0, r.stderr
    ours = [json.loads(x) for x in r.stdout.splitlines()]
    _tap, events = metadata_tap(run)
    for partition in (0, 1, 2):
        theirs = [e for e in events if e["type"] == "isr" and e["topic"] == "orders"
                  and e["partition"] == partition]
        mine = [c for c in ours if c["type"] == "isr_change" and c["topic"] == "orders"
                and c["partition"] == partition]
        assert sorted(theirs[-1]["isr"]) == [1, 2, 3] and mine, (partition, mine)
        assert (mine[-1]["action"], sorted(mine[-1]["isr_after"])) == ("expand", [1, 2, 3])
        assert abs(mine[-1]["ts"] - theirs[-1]["ts"]) <= LAG_MS / 2
