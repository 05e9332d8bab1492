"""The event contract (isr/contract): validation with one-line reasons, the
fast decoder agreeing with pydantic, and no input that makes decoding raise."""

from __future__ import annotations

import json

import orjson
import pytest
from helpers import cli
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import JSON, event_streams

from isr.config import MonitorSettings
from isr.contract import Rejection, decode
from isr.contract.fast import encode
from isr.contract.policies import POLICIES
from isr.pipeline.listeners import local_engine

FETCH = {"v": 1, "type": "fetch", "ts": 10, "topic": "t", "partition": 0, "leader": 1,
         "leader_epoch": 0, "replica": 2, "fetch_offset": 3, "leader_leo": 4}


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


def test_schema_lists_every_record_type():
    out = cli("schema")
    schemas = json.loads(out.stdout)
    assert set(schemas["input"]) == {"fetch", "fetch_start", "append", "leader", "isr", "broker",
                                     "fetch_session"}
    assert {"isr_change", "partition_state", "isr_propagation", "alert", "dead_letter"} <= set(
        schemas["output"])
    one = json.loads(cli("schema", "--type", "fetch").stdout)
    assert one["properties"]["fetch_offset"]["minimum"] == 0


# ---------------------------------------------------------------- fuzz
@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise(raw):
    assert decode(raw) is not None


@settings(max_examples=500, deadline=None)
@given(JSON)
def test_arbitrary_json_never_raises(value):
    result = decode(json.dumps(value))  # stdlib: also integers beyond 64 bits
    assert isinstance(result, Rejection)  # nothing random is a valid event


FIELDS = ["v", "type", "ts", "topic", "partition", "leader", "leader_epoch", "replica",
          "fetch_offset", "leader_leo", "received_ts", "broker_epoch", "replicas", "isr",
          "leader_epoch_start_offset", "hw", "min_insync_replicas", "broker", "state"]


@settings(max_examples=500, deadline=None)
@given(event_streams(max_events=5), st.sampled_from(FIELDS), JSON)
def test_mutated_valid_events_give_an_event_or_a_one_line_rejection(events, name, value):
    data = orjson.loads(encode(events[-1]))
    data[name] = value
    result = decode(json.dumps(data))
    if isinstance(result, Rejection):
        assert result.reason and "\n" not in result.reason
    else:
        engine = local_engine(MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000))
        engine.apply_in_order(events[:-1] + [result])  # and the model takes it


# ---------------------------------------------------------------- fast path
def _both(raw: bytes):
    """(the fast path's verdict, pydantic's verdict), each an event as JSON or None."""
    from pydantic import TypeAdapter

    from isr.contract import fast
    from isr.contract.events import Event

    try:
        quick = orjson.loads(fast.encode(fast.DECODER.decode(raw)))
    except Exception:  # noqa: BLE001 - refused
        quick = None
    try:
        careful = TypeAdapter(Event).validate_json(raw).model_dump(mode="json")
    except Exception:  # noqa: BLE001
        careful = None
    return quick, careful


@settings(max_examples=1500, deadline=None)
@given(event_streams(max_events=3), st.sampled_from(FIELDS), JSON)
def test_the_fast_path_accepts_only_what_pydantic_accepts_with_the_same_values(events, name,
                                                                              value):
    data = orjson.loads(encode(events[-1]))
    data[name] = value
    quick, careful = _both(json.dumps(data).encode())
    if quick is not None:
        assert quick == careful
    # and whatever it refused, decode() still gives pydantic's verdict
    result = decode(json.dumps(data))
    assert isinstance(result, Rejection) == (careful is None)


@pytest.mark.parametrize("raw", [
    b'{"v":1,"type":"append","ts":1,"ts":2,"topic":"t","partition":0,"leader":1,'
    b'"leader_epoch":1,"leader_leo":3}',                                      # duplicate key
    b'{"v":1,"type":"append","ts":1,"topic":"t","partition":0,"leader":1,"leader_epoch":1,'
    b'"leader_leo":3,"cluster":null}',                                        # null default
    b'{"v":true,"type":"append","ts":1,"topic":"t","partition":0,"leader":1,"leader_epoch":1,'
    b'"leader_leo":3}',
    b'{"v":1,"type":"append","ts":1.0,"topic":"t","partition":0,"leader":1,"leader_epoch":1,'
    b'"leader_leo":3}',
    b'{"v":1,"type":"append","ts":9223372036854775808,"topic":"t","partition":0,"leader":1,'
    b'"leader_epoch":1,"leader_leo":3}',
    b'{"v":1,"type":"fetch_start","ts":5,"topic":"t","partition":0,"leader":1,'
    b'"leader_epoch":1,"replica":2,"fetch_offset":1,"leader_leo":3,"received_ts":9}',
    b'{"v":1,"type":"leader","ts":5,"topic":"t","partition":0,"leader":1,"leader_epoch":1,'
    b'"replicas":[1,2],"isr":[2,2],"leader_epoch_start_offset":0}',
])
def test_the_fast_path_and_pydantic_agree_on_edge_cases(raw):
    quick, careful = _both(raw)
    assert quick is None or quick == careful
    assert isinstance(decode(raw), Rejection) == (careful is None)


# ---------------------------------------------------------------- batches
def _verdicts(results) -> list:
    return [(r.reason, r.reason_class) if isinstance(r, Rejection) else encode(r)
            for r in results]


MESSAGE = st.one_of(
    st.builds(lambda evs: encode(evs[-1]), event_streams(max_events=2)),
    st.builds(lambda evs: encode(evs[-1]).replace(b",", b",\n", 1), event_streams(max_events=2)),
    st.binary(max_size=40), st.sampled_from([b"", b"  ", None, b"{}", b"[1", b"2]", b"1,2"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(MESSAGE, max_size=12))
def test_a_batch_decodes_exactly_as_its_messages_one_by_one(raws):
    from isr.contract.decode import decode_many

    assert _verdicts(decode_many(raws)) == _verdicts(decode(r) for r in raws)


@pytest.mark.parametrize("between", [b"\n", b" ", b""])
def test_messages_that_join_into_other_valid_values_are_still_decoded_one_by_one(between):
    """Joined by newlines, the two halves of a split object make one valid
    event again, and a message holding two events makes two: as many events
    as messages, all valid, yet no message alone is an event."""
    from isr.contract.decode import decode_many

    good = b'{"v":1,"type":"append","ts":1,"topic":"t","partition":0,"leader":1,' \
           b'"leader_epoch":1,"leader_leo":3}'
    cut = good.index(b'"topic"')  # between two fields
    raws = [good[:cut], good[cut:], good + between + good]
    assert [type(r) for r in decode_many(raws)] == [Rejection] * 3
    assert [r.reason for r in decode_many(raws)] == [decode(r).reason for r in raws]


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_standard_json_numbers_are_not_json_even_in_an_ignored_field(literal):
    """RFC 8259 has no NaN or Infinity (pydantic's own parser takes them; the
    monitor does not: docs/semantics-choices.md)."""
    raw = (b'{"v":1,"type":"append","ts":1,"topic":"t","partition":0,"leader":1,'
           b'"leader_epoch":1,"leader_leo":3,"x":' + literal + b'}')
    result = decode(raw)
    assert isinstance(result, Rejection) and result.reason_class == "not_json"


# ---------------------------------------------------------------- poison
def test_a_null_value_is_a_one_line_rejection():
    result = decode(None)
    assert isinstance(result, Rejection) and result.reason == "null value (a Kafka tombstone)"


@pytest.mark.parametrize("ts", [10**17, 2**63 - 1, 253402300800000])
def test_times_past_year_9999_are_rejected(ts):
    result = decode(json.dumps({**FETCH, "ts": ts}))
    assert isinstance(result, Rejection)
    assert result.reason == (f"fetch: ts: Input should be less than or equal to "
                             f"253402300799999 (got {ts})")
    assert decode(json.dumps({**FETCH, "ts": 253402300799999, "received_ts": 1})).ts > 0


def test_a_dead_letter_keeps_16_kib_of_a_huge_message_with_its_size_and_hash():
    import hashlib

    from isr.contract import DeadLetter

    huge = b'{"topic": "' + b"t" * 900_000 + b'"}'
    result = decode(huge)
    assert len(result.reason) <= 500 and "\n" not in result.reason
    d = DeadLetter.of("in/0", 7, huge, result.reason, result.reason_class)
    assert d.raw_truncated and d.raw_size == len(huge)
    assert d.raw_sha256 == hashlib.sha256(huge).hexdigest()
    assert len(d.model_dump_json()) < 20_000
    small = DeadLetter.of("in/0", 8, b"oops", "not JSON", "not_json")
    assert not small.raw_truncated and small.raw_size is None


def test_each_event_type_states_its_scope_and_routing_key_once():
    """The engine, the packer, the taps and the simulator all route by it."""
    from isr.contract.events import BROKER, EVENT_TYPES, PARTITION, SCOPE, routing_key

    assert set(SCOPE) == set(EVENT_TYPES)
    assert SCOPE["fetch"] == PARTITION and SCOPE["broker"] == BROKER
    assert routing_key({"type": "fetch", "topic": "orders", "partition": 3}) == b"orders/3"
    assert routing_key({"type": "broker", "broker": 2}) == b"broker/2"
    assert routing_key({"type": "fetch_session", "leader": 1}) == b"leader/1"


# ---------------------------------------------------------------- fetch_session
SESSION = {"v": 1, "type": "fetch_session", "ts": 1000, "received_ts": 990, "leader": 1,
           "replica": 2, "broker_epoch": 5, "session_id": 7, "session_epoch": 3, "full": False,
           "partitions": [{"topic": "t", "partition": 0, "leader_epoch": 2, "fetch_offset": 10,
                           "leader_leo": 12}],
           "forgotten": [{"topic": "t", "partition": 4}]}


def test_a_fetch_session_event_decodes_and_round_trips():
    ev = decode(orjson.dumps(SESSION))
    assert not isinstance(ev, Rejection), ev.reason
    assert (ev.session_id, ev.session_epoch, ev.fetch_ts) == (7, 3, 990)
    assert ev.partitions[0].fetch_offset == 10 and ev.forgotten[0].partition == 4
    assert decode(encode(ev)) == ev
    one = json.loads(cli("schema", "--type", "fetch_session").stdout)
    assert {"session_id", "session_epoch", "full", "partitions"} <= set(one["required"])


@pytest.mark.parametrize("change, reason", [
    ({"full": True}, "full is true but session_epoch 3 makes the request incremental"),
    ({"session_epoch": 0}, "full is false but session_epoch 0 makes the request full"),
    ({"replica": 1}, "replica 1 is the leader itself"),
    ({"received_ts": 2000}, "received_ts 2000 is after ts 1000"),
    ({"forgotten": [{"topic": "t", "partition": 0}]}, "t-0 is both listed and forgotten"),
    ({"partitions": [SESSION["partitions"][0]] * 2}, "partition t-0 is listed twice"),
    ({"session_epoch": -2}, "session_epoch"),
    ({"partitions": [{"topic": "t", "partition": 0, "fetch_offset": 1}]}, "leader_epoch"),
])
def test_a_malformed_fetch_session_is_a_dead_letter_with_its_reason(change, reason):
    result = decode(orjson.dumps({**SESSION, **change}))
    assert isinstance(result, Rejection)
    assert reason in result.reason and result.reason.startswith("fetch_session")
