"""The project's real Apache Kafka cluster (isr/kafka/cluster.py): it starts,
replicates, writes the logs the taps read, and leaves nothing behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from isr.kafka.cluster import BROKER_IDS, CONTROLLER_ID, REPO
from isr.kafka.load import create_rf3_topics, produce
from isr.tap.request_log import RequestLogTap

pytestmark = pytest.mark.kafka


def test_three_brokers_replicate_and_log_their_followers_fetches(kafka):
    assert kafka.metadata_brokers() == list(BROKER_IDS)
    create_rf3_topics(kafka.bootstrap, ("smoke", 3))
    assert produce(kafka.bootstrap, "smoke", 300) == 300
    time.sleep(1.0)  # followers fetch what was produced
    names = {}
    dump = kafka.dump_metadata()
    for line in dump.splitlines():  # topic ids of FetchRequest v13+
        if '"TOPIC_RECORD"' in line and '"smoke"' in line:
            names[line.split('"topicId":"')[1].split('"')[0]] = "smoke"
    fetchers = set()
    for broker in BROKER_IDS:
        for name in ("server.log", "state-change.log", "kafka-request.log"):
            assert kafka.log(broker, name).stat().st_size > 0, (broker, name)
        tap = RequestLogTap(broker, topic_names=names.get)
        for line in kafka.log(broker, "kafka-request.log").read_text().splitlines():
            for ev in tap.feed(line):
                if ev["type"] == "fetch" and ev["topic"] == "smoke":
                    assert ev["leader"] == broker and ev["replica"] != broker
                    fetchers.add((broker, ev["replica"]))
    # every broker leads one of the 3 partitions and both others fetch from it
    assert fetchers == {(b, r) for b in BROKER_IDS for r in BROKER_IDS if r != b}
    assert kafka.log(CONTROLLER_ID, "controller.log").stat().st_size > 0


CHILD = """
import sys, time
from isr.kafka.cluster import ClusterConfig, KafkaCluster
c = KafkaCluster(ClusterConfig(dir=sys.argv[1], port_base=int(sys.argv[2]), detach=False))
c.start(ready=False)  # interrupted while its nodes start, as a test run often is
print(" ".join(str(c.pid(n)) for n in c.nodes), flush=True)
time.sleep(600)
"""


def test_no_node_outlives_a_killed_test_run(kafka, tmp_path):
    """kill -9 of the process that started a cluster (an interrupted test
    run, here while its nodes start) takes its nodes with it."""
    base = kafka.conf.port_base + 20
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "c"), str(base)],
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        pids = [int(p) for p in child.stdout.readline().split()]
        assert len(pids) == 4, "the child cluster did not start"
        assert all(os.path.exists(f"/proc/{p}") for p in pids)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")]


def test_a_broker_that_dies_is_reported_with_its_server_log(kafka):
    """A node gone without the test asking (here a kill behind the cluster's
    back) fails the test that used it, with the last lines of its logs."""
    from isr.kafka.cluster import NodeDied

    os.kill(kafka.pid(3), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while kafka.pid(3) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.raises(NodeDied) as died:
        kafka.check()
    text = str(died.value)
    assert text.startswith("Kafka broker-3 died (exit -9); last lines of ")
    assert "/broker-3/logs/server.log:\n" in text
    assert re.search(r"\n\[\d{4}-\d\d-\d\d [\d:,]+\] [A-Z]+ ", text)  # its log's tail
    kafka.check()  # reported once; the next test's `kafka` restarts it
