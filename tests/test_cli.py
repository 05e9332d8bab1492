"""The `isr` command as a user runs it (isr/cli.py, isr/console.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT, cli


def test_check_config_prints_effective_settings_or_one_error_line():
    ok = cli("check-config", "--set", "monitor.policy=kip501")
    assert ok.returncode == 0 and json.loads(ok.stdout)["monitor"]["policy"] == ["kip501"]
    bad = cli("check-config", "--set", "monitor.replica_lag_time_max_ms=fast")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "isr: config: monitor.replica_lag_time_max_ms: Input should be a valid integer, "
        "unable to parse string as an integer (got 'fast')"]


def test_replay_writes_decisions_then_states_and_a_summary(tmp_path):
    dead = tmp_path / "dead.jsonl"
    events = (ROOT / "examples/kip501-slow-leader.jsonl").read_text() + "not json\n"
    r = cli("replay", "-", "--policy", "kafka,kip501", "--set",
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
    a = cli("replay", "examples/kafka-4485-small-produces.jsonl", "--policy", "kafka,kip16", "-q")
    b = cli("replay", "examples/kafka-4485-small-produces.jsonl", "--policy", "kafka,kip16", "-q")
    assert a.returncode == 0 and a.stdout == b.stdout and a.stdout


def test_every_subcommand_has_help():
    for cmd in ("replay", "schema", "check-config"):
        assert cli(cmd, "--help").returncode == 0


def test_a_failed_job_is_told_in_its_own_words():
    from isr.errors import one_line_reason

    spark_text = ("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
                  "...\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
                  "isr.errors.DataLossError: input t/0: offsets went back from 9 to 2; set "
                  "input.fail_on_data_loss = false to read on\n\tat org.apache.spark...")
    assert one_line_reason(spark_text) == ("input t/0: offsets went back from 9 to 2; set "
                                           "input.fail_on_data_loss = false to read on")
    assert one_line_reason("java.lang.OutOfMemoryError: heap\n\tat x") == (
        "java.lang.OutOfMemoryError: heap")


def test_replay_of_a_far_future_time_ends_at_once_with_a_dead_letter(tmp_path):
    """One append at year 3 million once made the alert repeats walk up to it."""
    lines = (ROOT / "examples/kip501-slow-leader.jsonl").read_text().splitlines()
    far = json.loads(lines[3])
    far["ts"] = 10**17
    path = tmp_path / "far.jsonl"
    path.write_text("\n".join(lines[:5] + [json.dumps(far)] + lines[5:]) + "\n")
    r = cli("replay", str(path), "-q", "--dead-letters", str(tmp_path / "dl.jsonl"))
    assert r.returncode == 0, r.stderr
    (dl,) = [json.loads(x) for x in (tmp_path / "dl.jsonl").read_text().splitlines()]
    assert dl["reason_class"] == "invalid" and "253402300799999" in dl["reason"]


# ---------------------------------------------------------------- user errors
BAD_TOML = b'[monitor]\npolicy = "kafka\xff"\n'
USER_ERRORS = [
    # (arguments, files to create {name: bytes}, what the one line says)
    (["replay", "missing.jsonl"], {}, "replay: missing.jsonl: no such file"),
    (["replay", "."], {}, "replay: . is a directory"),
    (["replay", "e.jsonl", "-o", "nodir/out.jsonl"], {"e.jsonl": b"{}\n"},
     "--output: nodir/out.jsonl: the directory nodir does not exist"),
    (["replay", "e.jsonl", "--dead-letters", "."], {"e.jsonl": b"{}\n"},
     "--dead-letters: . is a directory"),
    (["check-config", "--config", "bad.toml"], {"bad.toml": BAD_TOML}, "not UTF-8 text"),
    (["simulate", "--scenario", "demo", "--to", "."], {}, "--to: . is a directory"),
    (["simulate", "--scenario", "demo", "--to", "nodir/x.jsonl"], {},
     "the directory nodir does not exist"),
    (["check-config", "--set", "input.topic_pattern=a("], {}, "is not a regular expression"),
    (["check-config", "--set", 'metrics.topics=["b("]'], {}, "is not a regular expression"),
    (["check-config", "--set", "stream.trigger_interval=soon-ish"], {},
     "'soon-ish' is not an interval Spark reads"),
    (["check-config", "--set", "stream.master=bogus[9]"], {}, "is not a Spark master"),
    (["check-config", "--set", "input.topics=[]"], {}, "nothing to read"),
    (["check-config", "--set", 'input.topics=[""]'], {}, "is not a Kafka topic name"),
    (["check-config", "--set", "kafka.bootstrap_servers="], {}, "is not a list of host:port"),
    (["check-config", "--set", 'kafka.properties={"bogus.prop"="x"}'], {},
     'No such configuration property: "bogus.prop"'),
    (["run", "--set", "kafka.bootstrap_servers=127.0.0.1:1", "--set",
      "kafka.connect_timeout_s=1"], {}, "kafka: no answer from 127.0.0.1:1 within 1 s"),
    (["run", "--set", "kafka.bootstrap_servers=no-such-host.invalid:9092", "--set",
      "kafka.connect_timeout_s=1"], {}, "no answer from no-such-host.invalid:9092"),
    (["run", "--set", "stream.checkpoint_location=afile/ck"], {"afile": b"x"},
     "afile is a file, not a directory"),
    (["run", "--set", "delivery.state_dir=afile", "--set",
      'delivery.webhooks=[{name="a", url="http://127.0.0.1:1/"}]'], {"afile": b"x"},
     "delivery.state_dir: afile: afile is a file"),
]


@pytest.mark.parametrize("args, files, says", USER_ERRORS,
                         ids=[" ".join(a)[:60] for a, _f, _s in USER_ERRORS])
def test_a_users_mistake_is_one_line_and_a_non_zero_exit(tmp_path, args, files, says):
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    r = subprocess.run([sys.executable, "-m", "isr.cli", *args], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "ISR_CONFIG": ""})
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and lines[0].startswith("isr: ") and says in lines[0], r.stderr


def test_a_missing_input_topic_is_one_line(broker, tmp_path):
    r = cli("run", "--set", f"kafka.bootstrap_servers={broker.bootstrap}", "--set",
            'input.topics=["no.such.topic"]', "--set", f"stream.checkpoint_location={tmp_path}")
    assert r.returncode == 2
    assert r.stderr.strip() == (f"isr: input.topics: no.such.topic does not exist on "
                                f"{broker.bootstrap}; create it, or set input.topic_pattern to "
                                "read topics as they appear")


def test_replay_that_accepts_nothing_exits_3(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('nope\n{"v": 2}\n')
    r = cli("replay", str(path), "-q")
    assert r.returncode == 3
    assert r.stderr.strip() == "isr: replay: none of the 2 input lines was accepted (exit code 3)"


def test_a_mistyped_environment_variable_is_named_with_a_guess():
    r = cli("check-config", env={**os.environ, "ISR_MONITOR_REPLICA_LAG_TIME_MAX_MS": "5"})
    assert r.returncode == 0
    assert ("isr: warning: environment variable ISR_MONITOR_REPLICA_LAG_TIME_MAX_MS matches no "
            "setting; did you mean ISR_MONITOR__REPLICA_LAG_TIME_MAX_MS?") in r.stderr
    assert "configuration OK: file conf/isr.toml" in r.stderr


def test_check_config_never_prints_a_secret():
    r = cli("check-config", "--set", 'kafka.properties={"sasl.password"="hunter2"}', "--set",
            'delivery.webhooks=[{name="ops", url="http://x/", '
            'headers={Authorization="Bearer s3cret"}}]')
    assert r.returncode == 0, r.stderr
    assert "hunter2" not in r.stdout and "s3cret" not in r.stdout
    shown = json.loads(r.stdout)
    assert shown["kafka"]["properties"]["sasl.password"] == "***"
    assert shown["delivery"]["webhooks"][0]["headers"]["Authorization"] == "***"
    assert shown["kafka"]["sasl_password_env"] == "ISR_KAFKA_SASL_PASSWORD"  # a name, shown
