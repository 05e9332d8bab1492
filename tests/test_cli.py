"""The `isr` command as a user runs it (isr/cli.py, isr/console.py)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
from helpers import ROOT, cli


def test_check_config_prints_effective_settings_or_one_error_line():
    ok = cli("check-config", "--set", "monitor.policy=kip501")
    assert ok.returncode == 0 and json.loads(ok.stdout)["monitor"]["policy"] == ["kip501"]
    bad = cli("check-config", "--set", "monitor.replica_lag_time_max_ms=fast")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "isr check-config: config: monitor.replica_lag_time_max_ms: Input should be a valid "
        "integer, "
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


def test_both_examples_run_as_shipped():
    """Issue 24: an example shows what it is for with the README's command
    alone; the slow-leader example's settings travel beside it."""
    r = cli("replay", "examples/kip501-slow-leader.jsonl", "-o", "/dev/null")
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines()[0] == (
        "isr replay: settings from examples/kip501-slow-leader.toml, beside the events: "
        'monitor.policy = ["kafka", "kip501"], monitor.replica_lag_time_max_ms = 10000 '
        "(--policy and --set win)")
    assert summary_rows(r.stderr) == {"kafka": (2, 4), "kip501": (0, 0)}
    r = cli("replay", "examples/kafka-4485-small-produces.jsonl", "--policy",
            "kafka,kip16,legacy,kip501", "-o", "/dev/null")
    assert r.returncode == 0, r.stderr
    assert summary_rows(r.stderr) == {"kafka": (0, 0), "kip16": (1, 0), "legacy": (0, 0),
                                      "kip501": (0, 0)}


def test_a_policy_that_changed_nothing_while_followers_lagged_says_why():
    r = cli("replay", "examples/kip501-slow-leader.jsonl", "--policy", "kip501",
            "-o", "/dev/null")
    assert r.returncode == 0, r.stderr
    assert ("kip501: no ISR change although followers lagged (FollowerLagging fired 2x): no lag "
            "reached monitor.replica_lag_time_max_ms = 10,000 ms under kip501's rule"
            in r.stderr.splitlines()), r.stderr


def summary_rows(stderr: str) -> dict[str, tuple[int, int]]:
    """policy -> (shrinks, expands) from the summary table."""
    rows = {}
    for line in stderr.splitlines():
        cells = line.split()
        if len(cells) >= 7 and cells[0] in ("kafka", "kip16", "legacy", "kip501"):
            rows[cells[0]] = (int(cells[1]), int(cells[2]))
    return rows


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
    # Spark's Kafka source refused by a SASL listener (the Java client's words).
    refused = ("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: x\n"
               "Caused by: org.apache.kafka.common.errors.SaslAuthenticationException: "
               "Authentication failed: Invalid username or password\n\tat org.apache.kafka...")
    assert one_line_reason(refused) == (
        "Kafka refused the SASL login of Spark's Kafka source (Authentication failed: Invalid "
        "username or password): check kafka.sasl_mechanism, kafka.sasl_username and the "
        "password (kafka.sasl_password_env or kafka.sasl_password_file)")


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
    (["verify", "missing.jsonl"], {}, "isr verify: missing.jsonl: no such file"),
    (["verify", "-"], {}, "isr verify: reads its files twice"),
    (["tap", "server-log", "missing.log", "--to", "-"], {},
     "isr tap server-log: missing.log: no such file"),
    (["tap", "request-log", "v13.log", "--broker", "1", "--topic-ids", "dump.txt", "--to", "-"],
     {"v13.log": b""}, "--topic-ids dump.txt: no such metadata dump file, and not bootstrap"),
    (["check-config", "--config", "."], {}, "config file . is a directory, not a TOML file"),
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
    # (Spark refuses both at the job's start, with a traceback)
    (["check-config", "--set", "stream.trigger_interval=1second"], {},
     "'1second' is not an interval Spark reads"),
    (["check-config", "--set", "stream.trigger_interval=1.5 minutes"], {},
     "'1.5 minutes' is not an interval Spark reads"),
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
    command = " ".join(args[:2] if args[0] == "tap" else args[:1])
    assert len(lines) == 1 and says in lines[0], r.stderr
    assert lines[0].startswith(f"isr {command}: "), r.stderr  # the command the user ran


def test_a_missing_input_topic_is_one_line(broker, tmp_path):
    r = cli("run", "--set", f"kafka.bootstrap_servers={broker.bootstrap}", "--set",
            'input.topics=["no.such.topic"]', "--set", f"stream.checkpoint_location={tmp_path}")
    assert r.returncode == 2
    assert r.stderr.strip() == (f"isr run: input.topics: no.such.topic does not exist on "
                                f"{broker.bootstrap}; create it, or set input.topic_pattern to "
                                "read topics as they appear")


def test_replay_that_accepts_nothing_exits_3(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('nope\n{"v": 2}\n')
    r = cli("replay", str(path), "-q")
    assert r.returncode == 3
    assert r.stderr.strip() == "isr replay: none of the 2 input lines was accepted (exit code 3)"


def test_verify_of_a_file_that_is_not_events_exits_3_instead_of_finding_no_difference(tmp_path):
    path = tmp_path / "server.log"  # the raw log given where the tap's output belongs
    path.write_text("[2026-11-29 04:00:00,000] INFO [Partition t-0 broker=1] ISR updated\n" * 2)
    r = cli("verify", str(path))
    assert r.returncode == 3
    assert r.stderr.splitlines() == [
        "isr verify: 2 events read, 0 accepted, dead letters: not_json 2 "
        "(`isr replay --dead-letters FILE` lists them)",
        "isr verify: none of the 2 input lines was accepted: nothing to compare (exit code 3)"]


def test_verify_counts_the_lines_it_rejected_beside_its_comparison(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"v": 1, "type": "leader", "ts": 1, "topic": "t", "partition": 0, '
                    '"leader": 1, "leader_epoch": 0, "leader_epoch_start_offset": 0, '
                    '"replicas": [1, 2], "isr": [1, 2]}\nnot json\n')
    r = cli("verify", str(path))
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [
        "isr verify: 2 events read, 1 accepted, dead letters: not_json 1 "
        "(`isr replay --dead-letters FILE` lists them)",
        "no ISR changes on either side: nothing to compare"]


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


# ---------------------------------------------------------------- stopping
# Commands that wait on something that does not come, without Spark: nothing
# listens on the port (this suite's range), a pipe that is never written.
NOBODY = "127.0.0.1:19101"
BLOCKED = {
    "tap request-log --topic-ids": ["tap", "request-log", "v13.log", "--broker", "1",
                                    "--topic-ids", NOBODY, "--to", "out.jsonl"],
    "tap metadata --poll": ["tap", "metadata", "--poll", NOBODY, "--to", "out.jsonl"],
    "tap server-log -F": ["tap", "server-log", "not-yet.log", "-F", "--to", "out.jsonl"],
    "tap server-log - (stdin)": ["tap", "server-log", "-", "--to", "out.jsonl"],
    "replay - (stdin)": ["replay", "-"],
    "verify FIFO": ["verify", "fifo"],
    "simulate --to kafka://": ["simulate", "--scenario", "demo", "--to", "kafka://t", "--set",
                               f"kafka.bootstrap_servers={NOBODY}"],
    "run (before Spark)": ["run", "--set", f"kafka.bootstrap_servers={NOBODY}",
                           "--set", "stream.checkpoint_location=ck"],
}


@pytest.mark.parametrize("name", list(BLOCKED))
def test_sigterm_stops_a_waiting_command_within_seconds(tmp_path, name):
    """Issue 24: a service manager's stop (SIGTERM) must not become a kill.
    The command waits (up to kafka.connect_timeout_s = 10 s, or forever);
    SIGTERM ends it within a few seconds with exit code 130."""
    (tmp_path / "v13.log").write_text((ROOT / "tests/fixtures/tap/kafka-request-v13.log")
                                      .read_text())
    os.mkfifo(tmp_path / "fifo")
    stdin_read, stdin_write = os.pipe()  # stdin open and silent, as a pipe from a quiet writer
    try:
        proc = subprocess.Popen([sys.executable, "-m", "isr.cli", *BLOCKED[name]], cwd=tmp_path,
                                stdin=stdin_read, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "ISR_CONFIG": "", "PYTHONPATH": str(ROOT)})
        time.sleep(3)  # started (imports take ~1-2 s here) and waiting
        assert proc.poll() is None, proc.communicate()[1]
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        err = proc.communicate(timeout=30)[1]
        took = time.monotonic() - sent
    finally:
        os.close(stdin_read)
        os.close(stdin_write)
    assert proc.returncode == 130, err
    assert took < 5, f"{took:.1f} s"
    assert "Traceback" not in err, err


def _catches_sigterm(pid: int) -> bool:
    """The process has its own SIGTERM handler (proc(5): SigCgt, a hex mask)."""
    status = (pathlib.Path("/proc") / str(pid) / "status").read_text()
    caught = int(status.split("SigCgt:")[1].split()[0], 16)
    return bool(caught & 1 << (signal.SIGTERM - 1))


@pytest.mark.parametrize("after_s", [0.0, 0.3, 0.8])
def test_sigterm_while_the_command_is_still_starting_is_a_clean_stop(tmp_path, after_s):
    """A stop that comes while the command still imports its modules (1-2 s
    here, longer on a busy machine) is exit code 130 too, not a kill (-15),
    wherever in the imports it lands (isr/signals.py: -2 and a SchemaError
    traceback were seen, ~1 run in 30)."""
    proc = subprocess.Popen([sys.executable, "-m", "isr.cli", *BLOCKED["run (before Spark)"]],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "ISR_CONFIG": "",
                                            "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 20
    while not _catches_sigterm(proc.pid):  # before that, Python itself is still starting
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(after_s)  # the commands are being imported
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=30)[1]
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err


@pytest.mark.parametrize("args", [
    ["tap", "request-log", "v13.log", "--broker", "1", "--topic-ids", NOBODY, "--to", "o.jsonl"],
    ["tap", "metadata", "--poll", NOBODY, "--to", "o.jsonl"],
], ids=["request-log --topic-ids", "metadata --poll"])
def test_an_unreachable_cluster_is_one_line_within_the_connect_timeout(tmp_path, args):
    (tmp_path / "v13.log").write_text((ROOT / "tests/fixtures/tap/kafka-request-v13.log")
                                      .read_text())
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "isr.cli", *args, "--set",
                        "kafka.connect_timeout_s=1"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60,
                       env={**os.environ, "ISR_CONFIG": "", "PYTHONPATH": str(ROOT)})
    took = time.monotonic() - started
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and f"{NOBODY}: no answer within 1 s" in r.stderr, r.stderr
    assert took < 1 + 6, f"{took:.1f} s"  # the timeout + starting Python; was 10 s and more


# Where a signal may land while modules import (isr/signals.py): each body
# stands for one library seen doing it in a SIGTERM during start-up.
CUT_SHORT = {
    # dataclasses and namedtuple exec a string: CPython then ended `python -m`
    # by its own SIGINT (-2), whatever exit code the command returned
    "inside an exec'd string": "exec('os.kill(os.getpid(), signal.SIGTERM)\\ntime.sleep(5)')",
    # type.__set_name__ (3.11) re-raises it as RuntimeError, its cause kept
    "wrapped, cause kept": ("class D:\n"
                            "        def __set_name__(self, owner, name):\n"
                            "            os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)\n"
                            "    type('C', (), {'d': D()})"),
    # pydantic-core's SchemaError keeps only the text: 'Field "type": ...
    # SignalInterrupt: '
    "wrapped, text kept": ("try:\n        os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)\n"
                           "    except KeyboardInterrupt as exc:\n"
                           "        raise ValueError(f'{type(exc).__name__}: {exc}') from None"),
    # a weakref callback (the import system's module locks) cannot raise:
    # Python printed "Exception ignored" and the command went on
    "in a weakref callback": ("import weakref\n    class X: pass\n    x = X()\n"
                              "    r = weakref.ref(x, lambda _: (os.kill(os.getpid(), "
                              "signal.SIGTERM), time.sleep(1)))\n"
                              "    del x\n    time.sleep(5)"),
}


@pytest.mark.parametrize("body", CUT_SHORT.values(), ids=CUT_SHORT.keys())
def test_a_signal_that_cuts_a_library_short_is_still_exit_code_130(tmp_path, body):
    """`python -m` as in the tests above; the command body replaced by one
    that signals itself where the library would have been."""
    (tmp_path / "cut.py").write_text(
        "import os, signal, sys, time\nfrom isr import cli\n"
        f"def body(argv):\n    {body}\n    return 0\n"
        "cli._main = body\nsys.exit(cli.main([]))\n")
    r = subprocess.run([sys.executable, "-m", "cut"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (r.returncode, r.stderr) == (130, "")


def test_a_command_that_swallows_the_interrupt_still_ends():
    """The last resort (isr/signals.py): 3 s after the interrupt, a process
    still busy (here: code that catches KeyboardInterrupt and goes on) exits
    with one line and 130."""
    # 'ready' is printed inside the try: a signal that lands between the print
    # and the sleep must be swallowed too (outside the try it ended Python by
    # its own SIGINT, -2, once in CI).
    code = ("import time\nfrom isr.signals import handled\nwith handled('isr test'):\n"
            "    while True:\n        try:\n            print('ready', flush=True)\n"
            "            time.sleep(10)\n        except KeyboardInterrupt:\n            pass\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    err = proc.communicate(timeout=30)[1]
    assert proc.returncode == 130 and time.monotonic() - sent < 6
    assert err == "isr test: still busy 3 s after SIGTERM; exiting now\n"


def test_a_call_no_signal_cuts_short_is_given_up_when_a_stop_comes():
    """signals.call_until (the demos' wait for Spark planning a query): the
    call's value or error when it ends first; Stopped within a moment of the
    stop flag when it does not, the call left to run on in silence."""
    import threading
    import time

    import pytest

    from isr.signals import Stopped, call_until

    assert call_until(lambda: 42, lambda: False) == 42
    with pytest.raises(ValueError, match="bad"):
        call_until(lambda: (_ for _ in ()).throw(ValueError("bad")), lambda: False)
    release, stop = threading.Event(), threading.Event()
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    with pytest.raises(Stopped):
        call_until(lambda: release.wait(30), stop.is_set)
    assert time.monotonic() - started < 1.5
    release.set()
