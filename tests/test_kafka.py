"""The Kafka helpers (isr/kafka) that need no broker: riding out an outage."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from isr.errors import KafkaUnavailable
from isr.kafka.client import KafkaTimeout, riding_out


def test_an_outage_shorter_than_the_budget_is_ridden_out_with_two_lines(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    calls, lines = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 4:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down"))
        return "answer"

    assert riding_out("input", 60, flaky, lines.append) == "answer"
    assert len(calls) == 4
    assert lines[0].startswith("isr: input: Kafka does not answer (")
    assert lines[1].startswith("isr: input: Kafka answers again after")


def test_a_longer_outage_ends_in_one_line(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("time.monotonic", lambda: now[0])
    monkeypatch.setattr("time.sleep", lambda s: now.__setitem__(0, now[0] + s))

    def down():
        raise KafkaTimeout("no fetch answer within 10 s")

    with pytest.raises(KafkaUnavailable) as exc:
        riding_out("sink", 30, down, lambda line: None)
    assert str(exc.value).startswith("sink: Kafka unreachable for 3")
    assert "kafka.outage_timeout_s = 30" in str(exc.value) and "\n" not in str(exc.value)


# ---------------------------------------------------------------- Spark's connector
def options(*overrides: str, password: str | None = None, monkeypatch=None) -> dict:
    from isr.config import load_settings
    from isr.stream import job

    if password is not None:
        monkeypatch.setenv("ISR_KAFKA_SASL_PASSWORD", password)
    s = load_settings(None, ["input.source=kafka", "kafka.bootstrap_servers=b1:9093",
                             'input.topics=["isr.events"]', *overrides])
    return {k: v for k, v in job.source_options(s).items() if k.startswith("kafka.")}


def test_plaintext_for_sparks_connector():
    assert options() == {"kafka.bootstrap.servers": "b1:9093",
                         "kafka.security.protocol": "PLAINTEXT"}


@pytest.mark.parametrize("mechanism, module", [
    ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule")])
def test_sasl_ssl_becomes_a_jaas_config(monkeypatch, mechanism, module):
    got = options("kafka.security_protocol=SASL_SSL", f"kafka.sasl_mechanism={mechanism}",
                  "kafka.sasl_username=isr", password='s3"cr\\et', monkeypatch=monkeypatch)
    assert got == {
        "kafka.bootstrap.servers": "b1:9093", "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": mechanism,
        "kafka.sasl.jaas.config": f'{module} required username="isr" '
                                  f'password="s3\\"cr\\\\et";'}
    assert not any("username" in k or "password" in k for k in got)  # librdkafka's names


def test_ssl_with_a_ca_and_a_client_certificate_becomes_pem_stores(tmp_path):
    (tmp_path / "ca.pem").write_text("CA")
    (tmp_path / "cert.pem").write_text("-----BEGIN CERTIFICATE-----\nX\n")
    (tmp_path / "key.pem").write_text("-----BEGIN PRIVATE KEY-----\nY\n")
    got = options("kafka.security_protocol=SSL", f"kafka.ssl_ca_location={tmp_path}/ca.pem",
                  f"kafka.ssl_certificate_location={tmp_path}/cert.pem",
                  f"kafka.ssl_key_location={tmp_path}/key.pem",
                  'kafka.java_properties={"client.dns.lookup"="use_all_dns_ips"}')
    assert got == {
        "kafka.bootstrap.servers": "b1:9093", "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": f"{tmp_path}/ca.pem",
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.certificate.chain": "-----BEGIN CERTIFICATE-----\nX\n",
        "kafka.ssl.keystore.key": "-----BEGIN PRIVATE KEY-----\nY\n",
        "kafka.client.dns.lookup": "use_all_dns_ips"}


def test_the_python_source_keeps_librdkafkas_names(monkeypatch):
    from isr.config import load_settings
    from isr.stream import job

    monkeypatch.setenv("ISR_KAFKA_SASL_PASSWORD", "pw")
    s = load_settings(None, ["kafka.security_protocol=SASL_SSL", "kafka.sasl_mechanism=PLAIN",
                             "kafka.sasl_username=isr", "input.max_offsets_per_trigger=1000"])
    opts = job.source_options(s)
    assert opts["kafka.sasl.username"] == "isr" and opts["kafka.sasl.password"] == "pw"
    assert opts["maxOffsetsPerTrigger"] == "1000" and opts["failOnDataLoss"] == "true"


def test_an_end_below_what_was_read_is_looked_at_again_before_the_job_stops(monkeypatch):
    """A partition back from a broker restart (or led by a replica whose high
    watermark has not caught up) can show an end below the offset read: the
    source reads nothing from it for a while, and stops with the data-loss
    line only if it stays below; back above, it is forgotten."""
    from isr.errors import DataLossError
    from isr.stream import source

    reader = source.KafkaStreamReader({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"})
    now = [1000.0]
    monkeypatch.setattr(source.time, "monotonic", lambda: now[0])
    assert reader._lost({"t/0": 300}, {"t/0": (0, 0)}) == {}
    now[0] += source.WENT_BACK_GRACE_S - 1
    assert reader._lost({"t/0": 300}, {"t/0": (0, 120)}) == {}
    assert reader._lost({"t/0": 300}, {"t/0": (0, 300)}) == {}  # refilled: forgotten
    now[0] += 5
    assert reader._lost({"t/0": 300}, {"t/0": (0, 10)}) == {}  # below again: a new grace
    now[0] += source.WENT_BACK_GRACE_S
    with pytest.raises(DataLossError, match="offsets went back from 300 to 10"):
        reader._lost({"t/0": 300}, {"t/0": (0, 10)})


class _Message:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def error(self):
        return None

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"v"

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self._offset)


class _Consumer:
    """A partition of 100 records, and the client properties it was given."""

    made: list[dict] = []

    def __init__(self, conf: dict) -> None:
        self.conf, self.position = conf, 0
        _Consumer.made.append(conf)

    def assign(self, tps) -> None:
        self.position = tps[0].offset

    def consume(self, num_messages: int, timeout: float) -> list:
        got = [_Message(o) for o in range(self.position, min(self.position + num_messages, 100))]
        self.position += len(got)
        return got

    def close(self) -> None:
        pass


@pytest.mark.parametrize("properties, read_ahead", [
    ({}, str(2 * 8192)),                             # two Arrow batches, not librdkafka's 100,000
    ({"queued.min.messages": "50000"}, "50000"),     # kafka.properties say otherwise
])
def test_a_read_task_fetches_little_ahead_of_its_range(monkeypatch, properties, read_ahead):
    """librdkafka's consumer fetches up to 100,000 messages (64 MB) of a
    partition ahead by default: a read task of a micro-batch held up to its
    whole range again, beyond its end, at the read's peak. The records read
    are the range's, whatever the setting."""
    from isr.kafka import client
    from isr.stream import source

    monkeypatch.setattr(client, "Consumer", _Consumer)
    _Consumer.made.clear()
    r = source.KafkaRange("t", 0, 10, 60, {"bootstrap.servers": "127.0.0.1:1", **properties},
                          30.0, True)
    batches = list(source.read_range(r))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(10, 60))
    assert _Consumer.made[0]["queued.min.messages"] == read_ahead


class _EndOfPartition(_Message):
    def error(self):
        from confluent_kafka import KafkaError

        return KafkaError(KafkaError._PARTITION_EOF)


class _GappyConsumer(_Consumer):
    """Every third offset gone (a compacted log), consumes that run past the
    range's end, and an end-of-partition event after offset 30."""

    def consume(self, num_messages: int, timeout: float) -> list:
        got = []
        while len(got) < num_messages and self.position <= 30:
            if self.position % 3:
                got.append(_Message(self.position))
            self.position += 1
        return got + [_EndOfPartition(self.position)] if self.position > 30 else got


@pytest.mark.parametrize("start, end", [(0, 31), (2, 20), (4, 5)])
def test_a_read_task_reads_its_range_in_bulk_as_record_by_record(monkeypatch, start, end):
    """A consume's messages are taken in bulk when all are records below the
    range's end, else one by one: either way the range's records only, in
    order, with their keys and timestamps unless packing leaves them out."""
    from isr.kafka import client
    from isr.stream import source

    monkeypatch.setattr(client, "Consumer", _GappyConsumer)
    monkeypatch.setattr(source, "ARROW_BATCH_ROWS", 4)
    r = source.KafkaRange("t", 0, start, end, {"bootstrap.servers": "127.0.0.1:1"}, 30.0, True)
    expected = [o for o in range(start, min(end, 31)) if o % 3]
    read = list(source.range_columns(r))
    assert [o for c in read for o in c["offset"]] == expected
    assert [t for c in read for t in c["timestamp"]] == [
        (1_700_000_000_000 + o) * 1000 for o in expected]
    assert [k for c in read for k in c["key"]] == [b"k"] * len(expected)
    packing = list(source.range_columns(r, source.PACKED_FIELDS))
    assert [set(c) for c in packing] == [{"value", "offset"}] * len(packing)
    assert [o for c in packing for o in c["offset"]] == expected


class _EventMessage(_Message):
    """A record whose value is an event (an append, a fetch session listing two
    partitions, now and then a line that is no event or one from the future)."""

    def value(self) -> bytes:
        o = self._offset
        if o % 7 == 3:
            return b"not json"
        ts = 1_700_000_000_000 + o * 10 + (10_000_000 if o % 11 == 5 else 0)
        if o % 3:
            return (b'{"v":1,"type":"append","ts":%d,"cluster":"c","topic":"t","partition":%d,'
                    b'"leader":1,"leader_epoch":0,"leader_leo":%d}' % (ts, o % 5, o))
        return (b'{"v":1,"type":"fetch_session","ts":%d,"cluster":"c","leader":1,"replica":2,'
                b'"session_id":7,"session_epoch":%d,"full":false,"partitions":[{"topic":"t",'
                b'"partition":0,"leader_epoch":0,"fetch_offset":3},{"topic":"t","partition":1,'
                b'"leader_epoch":0,"fetch_offset":4}]}' % (ts, o))


class _EventConsumer(_Consumer):
    def consume(self, num_messages: int, timeout: float) -> list:
        return [_EventMessage(m.offset()) for m in super().consume(num_messages, timeout)]


def test_a_packing_read_task_packs_the_columns_as_through_arrow(monkeypatch):
    """The Python source packs what it reads (`isr.pack`) from the columns as
    lists (source.packed_range), without making Arrow batches of them first:
    the same rows, buckets and summaries as packing the Arrow batches
    (packed_batches of read_range), across batch bounds."""
    from isr.kafka import client
    from isr.stream import source
    from tests.test_stream_files import summaries, unpacked

    monkeypatch.setattr(client, "Consumer", _EventConsumer)
    monkeypatch.setattr(source, "ARROW_BATCH_ROWS", 8)
    pack = {"labels": [0, 1, 2], "max_future_ms": 60_000}
    r = source.KafkaRange("in", 3, 10, 60, {"bootstrap.servers": "127.0.0.1:1"}, 30.0, True,
                          behind=True)
    clock = 1_700_000_000_000 + 1_000
    direct = list(source.packed_range(r, pack, clock))
    through_arrow = list(source.packed_batches(pack, source.read_range(r), clock))
    rows = unpacked(direct)
    assert rows == unpacked(through_arrow)
    assert summaries(direct) == summaries(through_arrow)
    assert len(direct) == 7  # 50 records, 8 a batch
    assert {row["reason_class"] for row in rows} >= {None, "future"}  # judged alike
    assert sum(row["reason"] is not None for row in rows) >= 7  # the lines that are no events
    assert {row["bucket"] for row in rows} == {0, 1, 2}
