"""The partition_state records written without pydantic
(contract/decisions.py `partition_state_json`, `PartitionStates`;
contract/records.py `state_record`, the Spark job's records): the same
bytes as the PartitionState model writes, on whatever state a model reaches."""

from __future__ import annotations

import io

from hypothesis import HealthCheck, given, settings
from strategies import event_streams

from isr.config import MonitorSettings
from isr.contract.decisions import PartitionState, PartitionStates, partition_state_json
from isr.contract.policies import POLICIES
from isr.contract.records import state_record, to_record
from isr.pipeline.listeners import local_engine
from isr.pipeline.local import write_jsonl
from isr.sim.cluster import Simulator
from isr.sim.scenario import load_scenario

from helpers import T0, broker, fetch, leader


def _pydantic(fields: dict) -> bytes:
    return PartitionState.model_validate(fields).model_dump_json().encode()


def _same_as_pydantic(states: PartitionStates) -> None:
    for fields in states.fields:
        assert list(fields) == list(PartitionState.model_fields)  # the contract describes them
        assert partition_state_json(fields) == _pydantic(fields)
        for several in (False, True):  # the Spark job's record: its key, id, ts and value
            view = PartitionState.model_validate(fields)
            assert state_record(fields, several) == to_record(view, several)
    fast, slow = io.BytesIO(), io.BytesIO()
    write_jsonl(states, fast)
    write_jsonl(states.views(), slow)  # a list of PartitionState: each through pydantic
    assert fast.getvalue() == slow.getvalue()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event_streams())
def test_any_state_is_written_as_pydantic_writes_it(events):
    engine = local_engine(MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000))
    engine.apply_in_order(events)
    engine.finish()
    _same_as_pydantic(engine.states())


def test_the_states_of_a_scenario_under_every_policy_vary_and_are_written_alike():
    sc = load_scenario("broker-fencing")
    engine = local_engine(MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000))
    from isr.contract import decode
    import orjson
    for seq, e in enumerate(Simulator(sc).events()):
        engine.submit(decode(orjson.dumps(e)), seq)
    engine.finish()
    # a bootstrapped partition (no leader event), a leaderless one, a follower never caught up
    engine.apply_in_order([fetch(0, 2, 5, 9, topic="boot\u00e9\n\"\x01", partition=7),
                           leader(10, partition=3, isr=(1, 2), start=5),
                           broker(20, 1, "fenced")])
    engine.finish()
    states = engine.states()
    assert {s.policy for s in states} == set(POLICIES)
    assert any(s.bootstrap for s in states) and any(s.leader == -1 for s in states)
    assert any(f.lag_ms is None for s in states for f in s.followers)
    assert any(not f.in_isr for s in states for f in s.followers)
    _same_as_pydantic(states)


def test_an_int_beyond_64_bits_takes_the_pydantic_way():
    engine = local_engine(MonitorSettings(policy=["kafka"], replica_lag_time_max_ms=10000))
    engine.apply_in_order([leader(0)])
    (fields,) = engine.states().fields
    fields["hw"] = 2**70
    assert partition_state_json(fields) == _pydantic(fields)


def test_the_states_read_as_a_list_of_partition_state():
    engine = local_engine(MonitorSettings(policy=["kafka"], replica_lag_time_max_ms=10000))
    engine.apply_in_order([leader(0, partition=p) for p in range(3)])
    states = engine.states()
    views = states.views()
    assert len(states) == 3 and states[1] is views[1] and list(states) == views
    assert states == views and [0] + states == [0, *views] and states + [0] == [*views, 0]
    assert [s.partition for s in states] == [0, 1, 2] and states[0].ts == T0


def test_a_replay_without_states_decides_and_counts_the_same(tmp_path):
    """`isr replay --no-state` skips the final catch-up and views: nothing
    else it reports may change."""
    from pathlib import Path

    from isr.pipeline.local import replay

    src = str(Path(__file__).resolve().parents[1] / "examples" / "kip501-slow-leader.jsonl")
    monitor = MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000)
    full, bare = replay([src], monitor), replay([src], monitor, states=False)
    assert len(full.states) > 0 and bare.states == []
    assert [d.model_dump_json() for d in bare.decisions] == [
        d.model_dump_json() for d in full.decisions] and full.decisions
    assert bare.stats == full.stats and bare.summary == full.summary
