"""The one tap configuration of a running cluster (isr/tap/live.py) that the
tests, `isr demo` and compose (`isr tap cluster`) run; its live run is
tests/integration/test_real_kafka_faults.py and the demo's test."""

from __future__ import annotations

from helpers import cli

from isr.tap.live import ClusterTaps


def test_every_broker_gets_its_three_taps_and_the_cluster_one_poller():
    taps = ClusterTaps("/logs/broker-{broker}/{file}", (1, 2), "k:9092", "kafka://in",
                       cluster="c", poll_interval_s=0.5, extra=["--set", "a.b=1"]).commands()
    assert [name for name, _ in taps] == ["request-log-1", "state-change-1", "server-log-1",
                                          "request-log-2", "state-change-2", "server-log-2",
                                          "metadata"]
    args = dict(taps)
    assert args["request-log-2"] == [
        "tap", "request-log", "/logs/broker-2/kafka-request.log", "-F", "--broker", "2",
        "--topic-ids", "k:9092", "--cluster", "c", "--to", "kafka://in", "-q", "--set", "a.b=1"]
    # no --replicas: the poller stays the one source of leader events (docs/tap.md)
    assert args["state-change-1"][:4] == ["tap", "state-change", "/logs/broker-1/state-change.log",
                                          "-F"] and "--replicas" not in args["state-change-1"]
    assert args["metadata"][:6] == ["tap", "metadata", "--poll", "k:9092", "--interval-s", "0.5"]
    # a job that does not read fetch_session gets per-partition fetches
    pinned = dict(ClusterTaps("/l/{broker}/{file}", (1,), "k:1", "-", grain="partition").commands())
    assert pinned["request-log-1"][6:10] == ["--topic-ids", "k:1", "--grain", "partition"]


def test_a_file_per_tap_where_the_destination_names_it():
    taps = ClusterTaps("/l/{broker}/{file}", (3,), "k:1", "/tmp/out/{tap}.jsonl").commands()
    assert [a[a.index("--to") + 1] for _n, a in taps] == [
        "/tmp/out/request-log-3.jsonl", "/tmp/out/state-change-3.jsonl",
        "/tmp/out/server-log-3.jsonl", "/tmp/out/metadata.jsonl"]


def test_tap_cluster_bad_arguments_are_one_line():
    r = cli("tap", "cluster", "--log-path", "/logs/{broker}/{file}", "--brokers", "one",
            "--bootstrap", "k:1", "--to", "-")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "isr tap cluster: --brokers one: broker ids separated by commas"], r.stderr
    r = cli("tap", "cluster", "--log-path", "/logs/server.log", "--brokers", "1",
            "--bootstrap", "k:1", "--to", "-")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "isr tap cluster: --log-path needs {broker} and {file}, --brokers at least one id"]
