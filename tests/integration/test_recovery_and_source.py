"""Crash recovery (kill -9 mid-stream), the Python Kafka source against the
embedded broker's offset quirk, the built-in `kafka` format's options, and
the README's demo command."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import workload
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from isr.config import load_settings
from isr.kafka.client import OffsetProbe, consumer, end_offsets, ensure_topics
from isr.stream import job
from isr.stream.packing import END_OF_RUN
from isr.sinks.kafka import read_to_end

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
# the demo's broker; metrics on the next one
DEMO_PORT = int(os.environ.get("ISR_TEST_DEMO_PORT", "19510"))
# the real-cluster demo's controller, brokers the next three, metrics at +50
DEMO_KAFKA_PORT = int(os.environ.get("ISR_TEST_DEMO_KAFKA_PORT", "19600"))


def _run(config: Path, available_now: bool = True) -> subprocess.Popen:
    """`isr run` on `config`; `available_now`: read what is there, then end
    (without it the job runs on its trigger_interval until killed)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, ISR_SPARK_LOG_LEVEL="ERROR")
    until = ["--available-now"] if available_now else []
    return subprocess.Popen([sys.executable, "-m", "isr.cli", "run", *until,
                             "--config", str(config)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)  # its JVM is in the same group


def _messages(broker, topic: str):
    return list(read_to_end({"bootstrap.servers": broker.bootstrap}, {(topic, 0): 0}))


def _committed_batches(broker, name: str) -> int:
    try:
        return len(_messages(broker, f"{name}.commits"))
    except Exception:  # noqa: BLE001 - topic not created yet
        return 0


def test_kill_9_mid_stream_then_restart_gives_exactly_the_uninterrupted_output(broker, tmp_path):
    input_topic = f"rec{uuid.uuid4().hex[:6]}.in"
    broker.create_topics([input_topic], 2)
    workload.produce(broker.bootstrap, input_topic, workload.lines())

    # Reference: the same input, uninterrupted.
    ref = f"ref{uuid.uuid4().hex[:6]}"
    proc = _run(workload.job_config(tmp_path, broker, ref, input_topic, limit=150))
    assert proc.wait(timeout=600) == 0, proc.stderr.read().decode()[-3000:]

    # Crashed: kill -9 (the Python driver and its JVM) once a few batches are out.
    name = f"crash{uuid.uuid4().hex[:6]}"
    # Batches 3 s apart, whatever the machine's speed: the kill must come
    # before the last one. The trigger interval holds only without
    # --available-now, which runs the batches back to back (~0.5 s each on
    # an idle machine: all 8 once came out between two polls). The batches'
    # contents, set by the read limit, are the same either way.
    config = workload.job_config(tmp_path, broker, name, input_topic, limit=150,
                                 trigger_interval="3 seconds")
    proc = _run(config, available_now=False)
    deadline = time.monotonic() + 300
    while _committed_batches(broker, name) < 3 and time.monotonic() < deadline:
        assert proc.poll() is None, "the job ended before it could be killed"
        time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_after = _committed_batches(broker, name)
    assert 3 <= killed_after
    proc = _run(config)  # restart from the checkpoint, to the end of the input
    assert proc.wait(timeout=600) == 0, proc.stderr.read().decode()[-3000:]

    # Alerts included: the restarted job neither re-fires nor loses a resolve.
    for kind in ("changes", "dead", "state", "alerts"):
        expected = [(m.key(), m.value()) for m in _messages(broker, f"{ref}.{kind}")]
        got = [(m.key(), m.value()) for m in _messages(broker, f"{name}.{kind}")]
        assert Counter(got) == Counter(expected), kind  # none lost, none duplicated
    assert len(_messages(broker, f"{ref}.changes")) >= 4
    statuses = Counter(json.loads(m.value())["status"] for m in _messages(broker, f"{ref}.alerts"))
    assert statuses["firing"] >= 2 and statuses["resolved"] >= 1
    assert _committed_batches(broker, name) > killed_after


def test_source_reads_the_tail_that_list_offsets_misses(broker):
    topic = f"tail{uuid.uuid4().hex[:6]}"
    broker.create_topics([topic], 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 100, "log_level": 0})
    for i in range(500):
        p.produce(topic, value=b"x%d" % i)
    p.flush()
    conf = {"bootstrap.servers": broker.bootstrap}
    c = consumer(conf)
    _low, listed = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.close()
    # The embedded broker's ListOffsets answers the last batch's base offset + 1 ...
    assert listed < 500
    # ... the source asks a fetch instead.
    assert end_offsets(conf, [(topic, 0)]) == {(topic, 0): 500}


@pytest.mark.parametrize("cluster", ["broker", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_the_sources_kept_clients_answer_each_new_end(cluster, request):
    """The Kafka source asks for the input's ends once per micro-batch, with
    the same clients each time (OffsetProbe): every answer must still be the
    end at that moment, records written since included, or the job would
    stop reading new input. On the embedded broker (whose ListOffsets falls
    short, the probe's fetch decides, with new clients each time) and on
    Apache Kafka."""
    conf = {"bootstrap.servers": request.getfixturevalue(cluster).bootstrap}
    topic = f"probe{uuid.uuid4().hex[:6]}"
    ensure_topics(conf, [topic], 2, 1)
    p = Producer({**conf, "linger.ms": 100, "log_level": 0})
    with OffsetProbe(conf) as probe:
        tps = probe.partitions([topic])
        assert tps == [(topic, 0), (topic, 1)]
        written, consumers = 0, set()
        for end in (0, 300, 300, 700, 700):  # (a quiet topic asked again: the end kept)
            for i in range(written, end):
                p.produce(topic, value=b"x%d" % i, partition=i % 2)
                p.produce(topic, value=b"y%d" % i, partition=1 - i % 2)
            p.flush()
            written = end
            assert probe.watermarks(tps) == {(topic, 0): (0, end), (topic, 1): (0, end)}
            assert probe.partitions([topic]) == tps
            if end:
                consumers.add(probe._consumer)
        assert probe.keeps == (cluster == "kafka")
        if cluster == "broker":  # it lists short: new clients each time
            assert consumers == {None}
        else:  # asked anew each time, with the clients made once (from the
            # first fetch that found its listed end true)
            assert len(consumers) == 1 and None not in consumers


@pytest.mark.kafka
def test_the_sources_kept_clients_stay_kept_while_records_arrive(kafka, monkeypatch):
    """On a busy input, records arrive between the probe's list of the ends
    and its fetch, so the fetch finds more than Kafka listed: that is not a
    broker whose list falls short (the embedded broker), and the clients
    must stay kept, or every micro-batch pays for new ones again (~70 ms of
    latestOffset at 20 k). The answers are still the ends at the fetch."""
    from isr.kafka import client

    conf = {"bootstrap.servers": kafka.bootstrap}
    topic = f"busy{uuid.uuid4().hex[:6]}"
    ensure_topics(conf, [topic], 2, 1)
    p = Producer({**conf, "linger.ms": 5, "log_level": 0})
    written = [0, 0]
    fetch = client._fetched_ends

    def records_arrive_then_fetch(*args, **kwargs):
        for partition in (0, 1):
            for _ in range(3):
                p.produce(topic, value=b"x", partition=partition)
            written[partition] += 3
        p.flush()
        return fetch(*args, **kwargs)

    monkeypatch.setattr(client, "_fetched_ends", records_arrive_then_fetch)
    with OffsetProbe(conf) as probe:
        tps = probe.partitions([topic])
        for i in range(4):
            for partition in (0, 1):  # a partition with records: fetched
                p.produce(topic, value=b"y", partition=partition)
                written[partition] += 1
            p.flush()
            assert probe.watermarks(tps) == {(topic, 0): (0, written[0]),
                                             (topic, 1): (0, written[1])}
            assert probe.keeps, f"clients let go at question {i}"


def test_a_batch_between_fetch_and_list_does_not_keep_the_clients_on_the_embedded_broker(
        broker, monkeypatch):
    """The embedded broker lists a partition's end as its last batch's base
    offset + 1. A batch written between the probe's fetch and its second
    list makes that list higher than the fetched end, which says nothing
    of the broker's lists: the clients must not be kept there (librdkafka's
    kept consumer crashes once a topic is made again on it)."""
    from isr.kafka import client

    conf = {"bootstrap.servers": broker.bootstrap}
    topic = f"between{uuid.uuid4().hex[:6]}"
    broker.create_topics([topic], 1)
    p = Producer({**conf, "linger.ms": 100, "log_level": 0})
    written = [0]

    def write(n: int) -> None:
        for _ in range(n):
            p.produce(topic, value=b"x")
        p.flush()  # one batch
        written[0] += n

    fetch = client._fetched_ends

    def fetch_then_a_batch(*args, **kwargs):
        ends = fetch(*args, **kwargs)
        write(20)
        return ends

    write(50)
    monkeypatch.setattr(client, "_fetched_ends", fetch_then_a_batch)
    with OffsetProbe(conf) as probe:
        for _ in range(3):
            before = written[0]
            assert probe.watermarks([(topic, 0)]) == {(topic, 0): (0, before)}
            assert not probe.keeps


def test_the_sources_kept_clients_see_a_topic_made_again_shorter(broker):
    """The embedded broker lists a partition's end as its last batch's base
    offset + 1: a topic deleted and made again with fewer records, each time
    in one batch, lists the same end (1) as before. The kept clients must
    still answer the new, shorter end, or the job reads on where nothing is
    and never says that its input went back."""
    conf = {"bootstrap.servers": broker.bootstrap}
    topic = f"again{uuid.uuid4().hex[:6]}"
    p = Producer({**conf, "linger.ms": 100, "log_level": 0})
    admin = AdminClient(conf)
    with OffsetProbe(conf) as probe:
        for count in (300, 10):
            broker.create_topics([topic], 1)
            for i in range(count):
                p.produce(topic, value=b"x%d" % i)
            p.flush()  # one batch
            assert probe.watermarks([(topic, 0)]) == {(topic, 0): (0, count)}
            assert probe.watermarks([(topic, 0)]) == {(topic, 0): (0, count)}  # asked again
            admin.delete_topics([topic])[topic].result(10)


def test_python_source_delivers_every_record_once_under_a_read_limit(broker, spark, tmp_path):
    topic = f"src{uuid.uuid4().hex[:6]}"
    broker.create_topics([topic], 3)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "log_level": 0})
    for i in range(2000):
        p.produce(topic, key=b"k%d" % (i % 11), value=b"%d" % i)
        if i % 300 == 0:
            p.flush()
    p.flush()
    s = load_settings(None, [f"kafka.bootstrap_servers={broker.bootstrap}",
                             f'input.topics=["{topic}"]', "input.max_offsets_per_trigger=450"])
    df = job.read_source(spark, s)
    batches = []
    q = (df.writeStream.foreachBatch(lambda b, i: batches.append(b.collect()))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    values = [int(r.value) for batch in batches for r in batch if r.partition >= 0]
    assert sorted(values) == list(range(2000))
    # The last batch of the available-now run, and only it, says so
    # (packing.END_OF_RUN); no empty batch follows it.
    ends = [(i, r.value) for i, batch in enumerate(batches) for r in batch if r.partition < 0]
    assert ends == [(len(batches) - 1, END_OF_RUN)]
    assert max(len(b) for b in batches) <= 450 and len([b for b in batches if b]) >= 5


NO_CONNECTOR = """
from isr.config import load_settings
from isr.stream import job
s = load_settings(None, ["input.source=kafka"])
try:
    job.read_source(job.spark_session(s, "local[1]", "no-connector"), s)
except RuntimeError as exc:
    print(exc)
"""


def test_builtin_kafka_format_without_its_jar_fails_with_instructions(tmp_path):
    """A session of its own (the tests' session has the connector): nothing
    resolved in the jar cache, so Spark has no `kafka` format."""
    out = subprocess.run([sys.executable, "-c", NO_CONNECTOR], cwd=tmp_path, text=True,
                         env={**os.environ, "ISR_CACHE": str(tmp_path / "empty-cache")},
                         capture_output=True, timeout=300)
    assert "scripts/spark-kafka-jars" in out.stdout, out.stderr[-3000:]
    assert "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0" in out.stdout


def test_demo_shows_its_stages_then_isr_changes_without_spark_warnings(tmp_path):
    """`isr demo --cluster embedded` (where Java or Maven is missing) as a user runs it: numbered stage lines until the first ISR
    change, changes with milliseconds, no Spark WARN line on the terminal
    (stdout and stderr), and Ctrl-C stops it. It is stopped at the first
    change instead of after a fixed --duration: Spark's start takes 15 s to
    over a minute on a busy machine, the first change comes ~40 s after the
    scenario starts. Its checkpoint goes with it: nothing is left in the
    temporary directory."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, TMPDIR=str(tmp_path))
    env.pop("ISR_SPARK_LOG_LEVEL", None)  # the demo's own defaults, not the tests'
    proc = subprocess.Popen(
        [sys.executable, "-m", "isr.cli", "demo", "--cluster", "embedded", "--duration", "300",
         "--broker-port", str(DEMO_PORT), "--set", f"metrics.port={DEMO_PORT + 1}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)  # its own process group, as in a terminal
    change = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} (shrink|expand) payments-\d ")
    seen, code, stop_s = _until_then_stop(proc, lambda seen: any(map(change.match, seen)), 330,
                                          settle_s=2)  # the rest of that batch's changes
    out = "".join(seen)
    assert code == 0, out
    first = next(i for i, ln in enumerate(seen) if change.match(ln))
    stages = [ln for ln in seen[:first] if re.match(r"^\[\d/4\] \+\d+\.\d s ", ln)]
    names = ["broker up", "topics created", "Spark started", "first batch"]
    assert [ln[:5] for ln in stages] == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"], out
    assert all(ln.split(" s ", 1)[1].startswith(name) for ln, name in zip(stages, names)), out
    assert any(" shrink " in ln and "replica 3: lag" in ln for ln in seen if change.match(ln)), out
    assert not [ln for ln in seen if " WARN " in ln or "%4|" in ln or "%6|" in ln], out
    assert "log4j profile" not in out and "Setting default log level" not in out, out
    assert re.search(r"stopping \([1-9]\d* ISR changes shown\)", out), out
    assert stop_s < 30, f"Ctrl-C took {stop_s:.0f} s"
    assert not list(tmp_path.glob("isr-demo-*")), out


def test_demo_stopped_by_sigterm_while_spark_plans_its_query_ends_at_once_and_quietly(tmp_path):
    """SIGTERM right after `[3/4] Spark started`, while Spark plans the job's
    query (its Python source's schema comes from a worker: seconds, a minute
    on a busy machine, and no signal cuts it short): the demo ends within
    seconds, exit code 0, with no Python or Py4J traceback on the terminal
    (it once waited for the planning and printed Py4J's)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, TMPDIR=str(tmp_path))
    env.pop("ISR_SPARK_LOG_LEVEL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "isr.cli", "demo", "--cluster", "embedded", "--duration", "300",
         "--broker-port", str(DEMO_PORT), "--set", f"metrics.port={DEMO_PORT + 1}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    errors: list[str] = []
    threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True).start()
    seen, code, stop_s = _until_then_stop(
        proc, lambda seen: any(ln.startswith("[3/4]") for ln in seen), 300,
        settle_s=0.3,  # the query is being planned
        stop=lambda: proc.send_signal(signal.SIGTERM),  # a service manager's: the demo only
        drain_s=2)  # what Spark's JVM and its workers print as they go
    out, err = "".join(seen), "".join(errors)
    assert code == 0, out + err
    assert "Traceback" not in out + err and "py4j" not in (out + err).lower(), out + err
    assert "stopping" in out, out
    assert stop_s < 15, f"SIGTERM took {stop_s:.0f} s"
    assert not list(tmp_path.glob("isr-demo-*")), out


def _until_then_stop(proc, done, timeout_s: float, settle_s: float = 0.0, stop=None,
                     drain_s: float = 0.5):
    """Read a demo's output until done(lines seen) or timeout_s, then stop it
    (by default Ctrl-C to its process group: the demo, Spark's JVM, its
    workers, Kafka nodes) and wait for its exit. Returns the lines, the exit
    code and how long the stop took; on any failure the group is killed."""
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout], daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + timeout_s
        while not done(seen) and time.monotonic() < deadline:
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                assert proc.poll() is None, "".join(seen)[-3000:]
        assert done(seen), "".join(seen)[-3000:]
        time.sleep(settle_s)
        (stop or (lambda: os.killpg(proc.pid, signal.SIGINT)))()
        stopping = time.monotonic()
        code = proc.wait(timeout=90)
        stop_s = time.monotonic() - stopping
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    time.sleep(drain_s)
    while not lines.empty():
        seen.append(lines.get())
    return seen, code, stop_s


@pytest.mark.kafka
def test_demo_on_a_real_cluster_shows_the_paused_brokers_shrink_and_expand(tmp_path):
    """`isr demo --cluster kafka` (the default where Java and Maven are): its
    own 3-broker cluster, the producer, the taps and the job; broker 3's
    pause shows as a shrink then an expand of a partition it follows; Ctrl-C
    stops it all, no Kafka node nor tap left running."""
    from isr.kafka.jars import MavenUnreachable, resolve_jars

    try:
        resolve_jars(quiet=True)
    except MavenUnreachable as exc:
        pytest.skip(f"real Kafka cluster: {exc}")
    cluster_dir = tmp_path / "cluster"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, ISR_KAFKA_DIR=str(cluster_dir))
    env.pop("ISR_SPARK_LOG_LEVEL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "isr.cli", "demo", "--cluster", "kafka", "--broker-port",
         str(DEMO_KAFKA_PORT), "--set", f"metrics.port={DEMO_KAFKA_PORT + 50}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    change = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} (shrink|expand) (payments-\d) replicas \[3\] ")

    def shrunk_and_expanded(seen: list[str]) -> set:
        found = [m.groups() for m in map(change.match, seen) if m]
        return {p for a, p in found if a == "shrink"} & {p for a, p in found if a == "expand"}

    seen, code, stop_s = _until_then_stop(proc, shrunk_and_expanded, 200)
    out = "".join(seen)
    assert code == 0, out
    stages = [ln for ln in seen if re.match(r"^\[\d/4\] \+\d+\.\d s ", ln)]
    names = ["Kafka 4.", "topics created", "Spark started", "first batch"]
    assert [ln[:5] for ln in stages] == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"], out
    assert all(ln.split(" s ", 1)[1].startswith(name) for ln, name in zip(stages, names)), out
    assert "broker 3 paused (SIGSTOP" in out and "broker 3 resumed (SIGCONT)" in out, out
    assert re.search(r"stopping \([1-9]\d* ISR changes shown\)", out), out
    assert stop_s < 45, f"Ctrl-C took {stop_s:.0f} s"
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline_has(
        pid, (str(cluster_dir), f"127.0.0.1:{DEMO_KAFKA_PORT + 1}"))]
    assert not left, f"left running: {left}"


def _cmdline_has(pid: str, needles) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return any(n in cmd for n in needles)


def test_spark_submit_runs_the_job_script(broker, tmp_path):
    input_topic = f"sub{uuid.uuid4().hex[:6]}.in"
    broker.create_topics([input_topic], 2)
    workload.produce(broker.bootstrap, input_topic, workload.lines())
    name = f"sub{uuid.uuid4().hex[:6]}"
    config = workload.job_config(tmp_path, broker, name, input_topic, limit=100000)
    spark_submit = Path(sys.executable).with_name("spark-submit")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               ISR_SPARK_LOG_LEVEL="ERROR")
    out = subprocess.run([str(spark_submit), "--master", "local[2]", "jobs/isr_monitor.py",
                          "--config", str(config), "--available-now"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    # The summary `isr replay` prints (spark-submit passes the driver's
    # stderr on to its stdout).
    assert "ISR decisions by policy" in out.stdout, out.stdout[-3000:]
    read = len(workload.lines())
    assert f"{read} events read, {read - 3} accepted" in out.stdout, out.stdout[-3000:]
    changes = [json.loads(m.value()) for m in _messages(broker, f"{name}.changes")]
    assert {(c["partition"], c["ts"] - workload.T0) for c in changes} >= {(1, 25000), (0, 25000)}
    assert len(_messages(broker, f"{name}.dead")) == 3


def test_topics_by_pattern_include_only_matching_topics(broker):
    from isr.kafka.client import topic_partitions

    tag = uuid.uuid4().hex[:6]
    broker.create_topics([f"pat{tag}.events.a", f"pat{tag}.events.b", f"pat{tag}.other"], 2)
    found = topic_partitions({"bootstrap.servers": broker.bootstrap},
                             pattern=rf"pat{tag}\.events\..*")
    assert found == [(f"pat{tag}.events.a", 0), (f"pat{tag}.events.a", 1),
                     (f"pat{tag}.events.b", 0), (f"pat{tag}.events.b", 1)]


def test_a_killed_owner_leaves_no_embedded_broker_behind():
    script = ("import time; from isr.kafka.embedded import EmbeddedBroker; "
              "b = EmbeddedBroker().start(); print(b._proc.pid, flush=True); time.sleep(120)")
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    broker_pid = int(owner.stdout.readline())
    os.kill(owner.pid, signal.SIGKILL)  # no `with`, no atexit: only the kernel can tell it
    owner.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(broker_pid):
        time.sleep(0.1)
    assert not _running(broker_pid)


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting for init to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
