"""The `isr` command as a user runs it (isr/cli.py, isr/console.py)."""

from __future__ import annotations

import json

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
