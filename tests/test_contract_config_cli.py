"""The event contract, the configuration and the `isr` command as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from isr.config import ConfigError, load_settings
from isr.contract import Fetch, Rejection, decode

ROOT = Path(__file__).resolve().parent.parent
FETCH = {"v": 1, "type": "fetch", "ts": 10, "topic": "t", "partition": 0, "leader": 1,
         "leader_epoch": 0, "replica": 2, "fetch_offset": 3, "leader_leo": 4}


def isr(*args: str, env=None, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "isr.cli", *args], cwd=ROOT, env=env,
                          input=stdin, capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------- contract
@pytest.mark.parametrize("change, reason", [
    ({"fetch_offset": -3}, "fetch: fetch_offset: Input should be greater than or equal to 0 (got -3)"),
    ({"replica": 1}, "fetch: replica 1 is the leader itself"),
    ({"type": "probe"}, "unknown type 'probe'"),
    ({"v": 2}, "unsupported schema version 2"),
    ({"ts": "10"}, "fetch: ts: Input should be a valid integer (got '10')"),
    ({"received_ts": 11}, "fetch: received_ts 11 is after ts 10"),
    ({"leader_epoch": None}, "fetch: leader_epoch: Input should be a valid integer (got None)"),
])
def test_impossible_events_are_rejected_with_one_line(change, reason):
    result = decode(json.dumps({**FETCH, **change}))
    assert isinstance(result, Rejection)
    assert result.reason == reason


def test_missing_field_and_not_json():
    data = dict(FETCH)
    del data["leader_leo"]
    assert decode(json.dumps(data)).reason == "fetch: missing field 'leader_leo'"
    assert decode(b"{oops").reason_class == "not_json"


def test_leader_event_consistency_is_checked():
    leader = {"v": 1, "type": "leader", "ts": 1, "topic": "t", "partition": 0, "leader": 1,
              "leader_epoch": 0, "replicas": [1, 2], "isr": [1, 3],
              "leader_epoch_start_offset": 5}
    assert decode(json.dumps(leader)).reason == "leader: isr members [3] are not in replicas [1, 2]"
    assert "not in replicas" in decode(json.dumps({**leader, "leader": 9, "isr": [1]})).reason
    assert "above leader_epoch_start_offset" in decode(
        json.dumps({**leader, "isr": [1], "hw": 6})).reason


def test_valid_fetch_defaults():
    ev = decode(json.dumps(FETCH))
    assert ev.type == "fetch" and ev.cluster == "default" and ev.fetch_ts == 10


# ---------------------------------------------------------------- config
def test_config_precedence_file_env_set(tmp_path, monkeypatch):
    conf = tmp_path / "isr.toml"
    conf.write_text('[monitor]\nreplica_lag_time_max_ms = 20000\npolicy = "kip16"\n')
    assert load_settings(conf).monitor.replica_lag_time_max_ms == 20000
    monkeypatch.setenv("ISR_MONITOR__REPLICA_LAG_TIME_MAX_MS", "15000")
    assert load_settings(conf).monitor.replica_lag_time_max_ms == 15000
    s = load_settings(conf, ["monitor.replica_lag_time_max_ms=10000", "monitor.policy=kafka,kip501"])
    assert s.monitor.replica_lag_time_max_ms == 10000
    assert s.monitor.policy == ["kafka", "kip501"]


@pytest.mark.parametrize("override, message", [
    ("monitor.bogus=1", "config: unknown key 'monitor.bogus'"),
    ("monitor.replica_lag_time_max_ms=0", "config: monitor.replica_lag_time_max_ms: Input should be greater than 0 (got 0)"),
    ("monitor.policy=kafka,kafka", "config: monitor.policy: policy ['kafka', 'kafka'] names a policy twice"),
    ("monitor.propagation=etcd", "config: monitor.propagation: Input should be 'kraft' or 'zk' (got 'etcd')"),
    ("policy=kafka", "--set 'policy=kafka': the key needs a section, e.g. monitor.policy"),
])
def test_bad_settings_fail_with_one_line_naming_the_key(override, message):
    with pytest.raises(ConfigError) as exc:
        load_settings(ROOT / "conf/isr.toml", [override])
    assert str(exc.value) == message


def test_shipped_config_is_valid_and_matches_the_defaults():
    from isr.config import Settings
    assert load_settings(ROOT / "conf/isr.toml") == Settings()


# ---------------------------------------------------------------- command line
def test_check_config_prints_effective_settings_or_one_error_line():
    ok = isr("check-config", "--set", "monitor.policy=kip501")
    assert ok.returncode == 0 and json.loads(ok.stdout)["monitor"]["policy"] == ["kip501"]
    bad = isr("check-config", "--set", "monitor.replica_lag_time_max_ms=fast")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "isr: config: monitor.replica_lag_time_max_ms: Input should be a valid integer, "
        "unable to parse string as an integer (got 'fast')"]


def test_schema_lists_every_record_type():
    out = isr("schema")
    schemas = json.loads(out.stdout)
    assert set(schemas["input"]) == {"fetch", "fetch_start", "append", "leader", "isr", "broker"}
    assert {"isr_change", "partition_state", "isr_propagation", "alert", "dead_letter"} <= set(
        schemas["output"])
    one = json.loads(isr("schema", "--type", "fetch").stdout)
    assert one["properties"]["fetch_offset"]["minimum"] == 0


def test_replay_writes_decisions_then_states_and_a_summary(tmp_path):
    dead = tmp_path / "dead.jsonl"
    events = (ROOT / "examples/kip501-slow-leader.jsonl").read_text() + "not json\n"
    r = isr("replay", "-", "--policy", "kafka,kip501", "--set",
            "monitor.replica_lag_time_max_ms=10000", "--dead-letters", str(dead), stdin=events)
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in r.stdout.splitlines()]
    kinds = [x["type"] for x in records]
    assert kinds[-2:] == ["partition_state", "partition_state"]
    assert kinds.count("isr_change") == 6 and all(
        x["policy"] == "kafka" for x in records if x["type"] == "isr_change")
    assert "kip501" in r.stderr and "shrinks" in r.stderr
    assert "dead letters: not_json 1" in r.stderr
    (dl,) = [json.loads(x) for x in dead.read_text().splitlines()]
    assert (dl["source"], dl["offset"], dl["raw"]) == ("-", 14, "not json")


def test_replay_is_byte_identical_across_runs(tmp_path):
    a = isr("replay", "examples/kafka-4485-small-produces.jsonl", "--policy", "kafka,kip16", "-q")
    b = isr("replay", "examples/kafka-4485-small-produces.jsonl", "--policy", "kafka,kip16", "-q")
    assert a.returncode == 0 and a.stdout == b.stdout and a.stdout


def test_every_subcommand_has_help():
    for cmd in ("replay", "schema", "check-config"):
        assert isr(cmd, "--help").returncode == 0


def test_state_store_provider_is_a_choice():
    from isr.stream.job import STATE_STORE_PROVIDERS

    for name in ("rocksdb", "hdfs"):
        chosen = load_settings(ROOT / "conf/isr.toml", [f"stream.state_store={name}"])
        assert STATE_STORE_PROVIDERS[chosen.stream.state_store].endswith("StateStoreProvider")
    with pytest.raises(ConfigError, match="stream.state_store"):
        load_settings(ROOT / "conf/isr.toml", ["stream.state_store=memory"])
