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
