"""confluent-kafka clients built from the settings, and the offset questions
the source and the sinks ask."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, TypeVar

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from isr.errors import KafkaUnavailable

from isr.config import ConfigError, KafkaSettings


def client_config(kafka: KafkaSettings) -> dict[str, str]:
    """librdkafka properties, security included; secrets resolved here only."""
    conf = {"bootstrap.servers": kafka.bootstrap_servers,
            "security.protocol": kafka.security_protocol}
    optional = {"sasl.mechanism": kafka.sasl_mechanism, "sasl.username": kafka.sasl_username,
                "ssl.ca.location": kafka.ssl_ca_location,
                "ssl.certificate.location": kafka.ssl_certificate_location,
                "ssl.key.location": kafka.ssl_key_location}
    conf.update({k: v for k, v in optional.items() if v})
    password = kafka.sasl_password() if kafka.security_protocol.startswith("SASL") else None
    if password:
        conf["sasl.password"] = password
    conf.update(kafka.properties)
    return conf


# The JAAS login module of each SASL mechanism in the Java client
# (clients/src/main/java/org/apache/kafka/common/security/..., apache/kafka 1eb7644).
LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


def _jaas_quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def spark_kafka_options(kafka: KafkaSettings) -> dict[str, str]:
    """The same settings as options of Spark's built-in `kafka` format, in the
    Java client's names (SaslConfigs, SslConfigs): the SASL username and
    password become `sasl.jaas.config`, PEM files the PEM trust and key
    stores (KIP-651). `kafka.java_properties` adds any other Java property;
    `kafka.properties` (librdkafka's names) are not passed."""
    opts = {"kafka.bootstrap.servers": kafka.bootstrap_servers,
            "kafka.security.protocol": kafka.security_protocol}
    if kafka.security_protocol.startswith("SASL"):
        mechanism = kafka.sasl_mechanism or "PLAIN"
        opts["kafka.sasl.mechanism"] = mechanism
        module = LOGIN_MODULES.get(mechanism)
        password = kafka.sasl_password()
        if module is not None and kafka.sasl_username and password is not None:
            opts["kafka.sasl.jaas.config"] = (
                f"{module} required username={_jaas_quoted(kafka.sasl_username)} "
                f"password={_jaas_quoted(password)};")
    if kafka.security_protocol in ("SSL", "SASL_SSL"):
        if kafka.ssl_ca_location:
            opts["kafka.ssl.truststore.type"] = "PEM"
            opts["kafka.ssl.truststore.location"] = kafka.ssl_ca_location
        if kafka.ssl_certificate_location and kafka.ssl_key_location:
            opts["kafka.ssl.keystore.type"] = "PEM"
            opts["kafka.ssl.keystore.certificate.chain"] = _read(kafka.ssl_certificate_location,
                                                                 "kafka.ssl_certificate_location")
            opts["kafka.ssl.keystore.key"] = _read(kafka.ssl_key_location,
                                                   "kafka.ssl_key_location")
    opts.update({f"kafka.{k}": v for k, v in kafka.java_properties.items()})
    return opts


def _read(path: str, setting: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{setting}: {path}: {exc.strerror}") from None


def consumer(conf: dict[str, str], **extra) -> Consumer:
    return Consumer({**conf, "group.id": "isr-monitor-offsets", "enable.auto.commit": False,
                     "enable.partition.eof": True, "log_level": 2, **extra})


def producer(conf: dict[str, str], **extra) -> Producer:
    # Idempotent: a retried send is never written twice.
    return Producer({**conf, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                     "log_level": 2, **extra})


def send(p: Producer, topic: str, value, key=None, **kw) -> None:
    """Producer.produce, waiting while the local queue is full instead of failing."""
    while True:
        try:
            p.produce(topic, value=value, key=key, **kw)
            return
        except BufferError:  # let queued messages go out (and their callbacks run)
            p.poll(0.05)


def admin(conf: dict[str, Any]) -> AdminClient:
    return AdminClient({**conf, "log_level": 2})


NOT_ALLOWED = ("TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
               "POLICY_VIOLATION")


def ensure_topics(conf: dict, names: list[str], partitions: int = -1,
                  replication_factor: int = -1, compacted: Iterable[str] = ()) -> None:
    """Create missing topics (brokers may not auto-create them), with the
    cluster's defaults where given -1, and `cleanup.policy=compact` for the
    `compacted` ones. A principal that may not create topics gets one line
    (ConfigError) saying what to create; an existing topic meant to be
    compacted that is not gets a warning line."""
    compacted = set(compacted)
    client = admin(conf)
    existing = set(client.list_topics(timeout=10).topics)
    missing = [n for n in dict.fromkeys(names) if n not in existing]
    new = [NewTopic(n, partitions, replication_factor,
                    config={"cleanup.policy": "compact"} if n in compacted else {})
           for n in missing]
    for name, future in (client.create_topics(new).items() if new else ()):
        try:
            future.result(timeout=10)
        except KafkaException as exc:
            err = exc.args[0]
            if err.name() == "TOPIC_ALREADY_EXISTS":
                continue  # created meanwhile
            if err.name() in NOT_ALLOWED:
                raise ConfigError(
                    f"output topics: may not create {name} ({err.str()}); create "
                    f"{', '.join(missing)} beforehand (docs/operations.md, \"Output topics\") "
                    "or grant this principal CREATE") from None
            raise ConfigError(f"output topics: creating {name}: {err.str()}") from None
    _warn_not_compacted(client, [n for n in compacted if n in existing])


def _warn_not_compacted(client: AdminClient, names: list[str]) -> None:
    from confluent_kafka.admin import ConfigResource

    if not names:
        return
    try:
        found = client.describe_configs([ConfigResource("topic", n) for n in names])
        for resource, future in found.items():
            policy = future.result(timeout=10).get("cleanup.policy")
            if policy is not None and "compact" not in (policy.value or ""):
                print(f"isr: warning: topic {resource.name} has cleanup.policy={policy.value}; "
                      "the monitor keys its records for compaction (cleanup.policy=compact)",
                      file=sys.stderr)
    except KafkaException:
        pass  # not allowed to describe: nothing to say


class OffsetProbe:
    """Asks a cluster for its partitions and their offsets, with clients kept
    from one question to the next: the Kafka source asks once per
    micro-batch, and a new admin client and consumer (bootstrap, metadata)
    cost ~70-85 ms a time against a local broker, kept ones ~3-8 ms
    (docs/benchmarks.md, "The source's offset questions"; on the embedded
    broker they are not kept, see `watermarks`). `close()` lets
    go of them; a question that fails does too, so the next one starts with
    new clients (a cluster back from an outage)."""

    def __init__(self, conf: dict[str, str]) -> None:
        self.conf = conf
        self._admin: Optional[AdminClient] = None
        self._consumer: Optional[Consumer] = None
        self._ends: dict[tuple[str, int], int] = {}  # partition -> end found at the last question
        # What the fetches found of the cluster's listed ends: one short of
        # the true end (ever), one true (ever). The clients are kept only once
        # one was found true and none short (_judge_listed_ends).
        self._lists_short = self._lists_true = False

    def __enter__(self) -> "OffsetProbe":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def keeps(self) -> bool:
        """Whether the clients are kept between questions: the cluster lists
        true ends (Apache Kafka), as far as the fetches found."""
        return self._consumer is not None

    def close(self) -> None:
        consumer_, self._consumer, self._admin, self._ends = self._consumer, None, None, {}
        if consumer_ is not None:
            consumer_.close()

    def partitions(self, topics: Iterable[str] = (), pattern: Optional[str] = None,
                   timeout: float = 10.0) -> list[tuple[str, int]]:
        """(topic, partition) of the listed topics, or of every topic matching the pattern."""
        if self._admin is None:
            self._admin = admin(self.conf)
        try:
            metadata = self._admin.list_topics(timeout=timeout)
        except BaseException:
            self.close()
            raise
        if pattern is not None:
            regex = re.compile(pattern)
            names = sorted(t for t in metadata.topics if regex.fullmatch(t))
        else:
            names = list(topics)
        found: list[tuple[str, int]] = []
        for name in names:
            topic = metadata.topics.get(name)
            if topic is None or topic.error is not None:
                continue  # not there yet: picked up once it exists
            found.extend((name, p) for p in sorted(topic.partitions))
        return found

    def watermarks(self, partitions: list[tuple[str, int]],
                   timeout: float = 10.0) -> dict[tuple[str, int], tuple[int, int]]:
        """(log start offset, true end) of each partition.

        ListOffsets(latest) is not trusted: the embedded broker answers the
        last batch's base offset + 1, which would leave a partition's tail
        unread. The high watermark carried by a fetch response is right on
        every broker, so one fetch is made per partition, from just below the
        listed end, and the fetched high watermark wins when higher. Raises
        KafkaTimeout when the cluster does not answer.

        A partition whose listed end is the end found at the probe's last
        question is not fetched again: Kafka lists the high watermark, the
        same one only while nothing was appended, so a quiet input costs
        ListOffsets alone at each poll. Until a listed end was found true,
        and once one was found short (the embedded broker: a list asked
        again after the fetch stays below the fetched end;
        `_judge_listed_ends`), every partition is fetched every time, with
        new clients: such a broker's listed end says nothing certain of its
        true end (the same one for another log, a topic deleted and created
        again).
        """
        if not partitions:
            return {}
        if self._consumer is None:
            # A short fetch wait: the fetch left waiting at a partition's end
            # (librdkafka's long poll, 500 ms by default) would hold the next
            # question's fetch back that long on a quiet topic.
            self._consumer = consumer(self.conf, **{"fetch.max.bytes": "1048576",
                                                    "max.partition.fetch.bytes": "65536",
                                                    "fetch.wait.max.ms": "1"})
        c = self._consumer
        try:
            listed = {tp: c.get_watermark_offsets(TopicPartition(*tp), timeout=timeout)
                      for tp in partitions}
            marks = dict(listed)
            # (_ends is empty while the clients are not kept: all fetched)
            fetch = [tp for tp, (low, high) in listed.items()
                     if high > low and self._ends.get(tp) != high]
            marks.update(_fetched_ends(c, fetch, listed, timeout))
            self._judge_listed_ends(c, fetch, listed, marks, timeout)
        except BaseException:
            self.close()
            raise
        if self._lists_short or not self._lists_true:
            # Not (yet) known to list true ends, as the embedded broker does
            # not: librdkafka 2.16's kept consumer crashes (SIGSEGV) at its
            # next fetch once a topic was deleted and made again there, so
            # each question has new clients, as before.
            self.close()
            return marks
        self._ends = {tp: end for tp, (_low, end) in marks.items()}
        return marks

    def _judge_listed_ends(self, c: Consumer, fetched: list[tuple[str, int]],
                           listed: dict, marks: dict, timeout: float) -> None:
        """What the fetches say of the listed ends: true where a fetch found
        the same end; where it found more, a list asked again tells records
        written in between (Kafka lists its high watermark, never below one
        a fetch already answered) from a list that falls short (the embedded
        broker, whose list stays below). Only a list equal to a fetched end
        counts as true: the embedded broker's second list can be above it
        (a batch written meanwhile lists its base offset + 1), Kafka's is
        equal unless records came in between again (then undecided)."""
        self._lists_true |= any(marks[tp][1] == listed[tp][1] for tp in fetched)
        grew = [tp for tp in fetched if marks[tp][1] > listed[tp][1]]
        if not grew or self._lists_short:
            return
        again = {tp: c.get_watermark_offsets(TopicPartition(*tp), timeout=timeout)[1]
                 for tp in grew}
        self._lists_short |= any(again[tp] < marks[tp][1] for tp in grew)
        self._lists_true |= any(again[tp] == marks[tp][1] for tp in grew)


def _fetched_ends(c: Consumer, partitions: list[tuple[str, int]],
                  listed: dict[tuple[str, int], tuple[int, int]],
                  timeout: float) -> dict[tuple[str, int], tuple[int, int]]:
    """(log start, true end) of `partitions`, from one fetch each just below
    the `listed` end: the fetched high watermark, where above it."""
    if not partitions:
        return {}
    c.assign([TopicPartition(t, p, max(listed[(t, p)][0], listed[(t, p)][1] - 1))
              for t, p in partitions])  # (a new assignment: nothing fetched before is polled)
    try:
        waiting = set(partitions)
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None or msg.topic() is None:
                continue  # nothing yet, or a client-wide error (a broker down)
            waiting.discard((msg.topic(), msg.partition()))  # records, EOF or an error
        if waiting:
            raise KafkaTimeout(f"no fetch answer for {sorted(waiting)} within {timeout:g} s")
        marks = {}
        for t, p in partitions:
            _low, high = c.get_watermark_offsets(TopicPartition(t, p), cached=True)
            low, end = listed[(t, p)]
            marks[(t, p)] = (low, high if high is not None and high > end else end)
        return marks
    finally:
        c.unassign()  # kept idle until the next question: no fetching meanwhile


def topic_partitions(conf: dict[str, str], topics: Iterable[str] = (),
                     pattern: Optional[str] = None, timeout: float = 10.0) -> list[tuple[str, int]]:
    """OffsetProbe.partitions, asked once."""
    with OffsetProbe(conf) as probe:
        return probe.partitions(topics, pattern, timeout)


def watermarks(conf: dict[str, str], partitions: list[tuple[str, int]],
               timeout: float = 10.0) -> dict[tuple[str, int], tuple[int, int]]:
    """OffsetProbe.watermarks, asked once."""
    with OffsetProbe(conf) as probe:
        return probe.watermarks(partitions, timeout)


def end_offsets(conf: dict[str, str], partitions: list[tuple[str, int]],
                timeout: float = 10.0) -> dict[tuple[str, int], int]:
    """The true end (high watermark) of each partition (see watermarks)."""
    return {tp: end for tp, (_low, end) in watermarks(conf, partitions, timeout).items()}


T = TypeVar("T")


def riding_out(what: str, budget_s: float, call: Callable[[], T],
               log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> T:
    """`call()`, tried again with backoff while Kafka does not answer, for up
    to `budget_s` seconds: a broker restart of a few minutes is ridden out,
    a longer outage ends in one line (KafkaUnavailable)."""
    started = time.monotonic()
    delay, warned = 0.5, False
    while True:
        try:
            result = call()
            if warned:
                log(f"isr: {what}: Kafka answers again after {time.monotonic() - started:.0f} s")
            return result
        except (KafkaException, KafkaTimeout) as exc:
            waited = time.monotonic() - started
            if waited >= budget_s:
                raise KafkaUnavailable(f"{what}: Kafka unreachable for {waited:.0f} s "
                                       f"(kafka.outage_timeout_s = {budget_s:g}): "
                                       f"{_one_line(exc)}") from None
            if not warned:
                log(f"isr: {what}: Kafka does not answer ({_one_line(exc)}); "
                    f"retrying for up to {budget_s:g} s")
                warned = True
            time.sleep(min(delay, max(0.0, budget_s - waited)))
            delay = min(delay * 2, 10.0)


class KafkaTimeout(RuntimeError):
    """A Kafka request that got no answer in time (retried by riding_out)."""


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]
