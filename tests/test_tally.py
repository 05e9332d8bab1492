"""The streaming job's end-of-run summary (isr/stream/tally.py) counts what
`isr replay` counts, from the records the job writes."""

from __future__ import annotations

from pathlib import Path

from isr.config import load_settings
from isr.contract.records import state_record, to_record
from isr.pipeline.local import replay
from isr.stream.tally import RunTally

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kafka-4485-small-produces.jsonl"


def test_the_jobs_summary_counts_what_replay_counts():
    monitor = load_settings(None, ["monitor.policy=kafka,kip16"]).monitor
    result = replay([str(EXAMPLE)], monitor)
    tally = RunTally(monitor.policy)
    records = [to_record(d, several_policies=True)
               for d in result.decisions + result.states + result.dead_letters]
    half = len(records) // 2  # two micro-batches
    tally.observe_records(records[:half])
    tally.observe_records(records[half:])
    for batch, n in enumerate([result.stats.lines - 7, 7]):
        tally.observe_progress({"batchId": batch, "sources": [{"numInputRows": n}]})
    # A report seen again (the listener, then the query's recent progress): once.
    tally.observe_progress({"batchId": 1, "sources": [{"numInputRows": 7}]})
    got = tally.result()
    for mine, theirs in zip(got.summary, result.summary):
        assert (mine.policy, mine.shrinks, mine.expands, mine.controller_removals,
                mine.partitions) == (theirs.policy, theirs.shrinks, theirs.expands,
                                     theirs.controller_removals, theirs.partitions)
    assert sum(r.shrinks for r in got.summary) > 0
    assert got.stats.lines == result.stats.lines
    assert sorted(d.id for d in got.decisions if d.type == "alert") == sorted(
        d.id for d in result.decisions if d.type == "alert" and not d.is_repeat)


def _state(topic: str, partition: int, ts: int, isr: list[int], policy: str = "kafka"):
    """A partition_state record of a 3-replica partition (min ISR 2) whose
    ISR is `isr`, as the job writes it (records.state_record)."""
    under_min = len(isr) < 2
    return state_record({
        "type": "partition_state", "cluster": "c1", "topic": topic, "partition": partition,
        "ts": ts, "leader": 1, "leader_epoch": 4, "replicas": [1, 2, 3], "isr": isr,
        "hw": 50, "leader_leo": 70, "under_replicated": len(isr) < 3,
        "under_min_isr": under_min, "at_min_isr": len(isr) == 2, "min_insync_replicas": 2,
        "policy": policy,
        "followers": [{"replica": r, "leo": 50, "lag_ms": 900, "last_caught_up_ts": ts - 900,
                       "last_fetch_ts": ts - 100, "in_isr": r in isr} for r in (2, 3)],
        "bootstrap": False}, several_policies=True)


def test_the_summary_counts_time_under_min_isr_from_the_states_written():
    """`isr run`'s summary: partitions seen, ever under min ISR and the time
    under it, per policy, from the partition_state records of its batches
    (a partition still under at the end counts up to the last state's time)."""
    tally = RunTally(["kafka", "kip16"])
    tally.observe_records([_state("orders", 0, 1_000, [1, 2, 3]),
                           _state("orders", 1, 1_000, [1, 2]),       # at min: not under
                           _state("orders", 0, 2_000, [1]),           # under from 2 000
                           _state("orders", 0, 2_000, [1], "kip16")])  # under from 2 000
    tally.observe_records([_state("orders", 0, 5_000, [1, 2]),        # back: 3 000 ms under
                           _state("orders", 1, 6_000, [1]),           # under from 6 000
                           _state("payments", 0, 9_000, [1, 2, 3])])  # the last ts: 9 000
    rows = {r.policy: r for r in tally.result().summary}
    assert (rows["kafka"].partitions, rows["kafka"].partitions_under_min_isr,
            rows["kafka"].time_under_min_isr_ms) == (3, 2, 3_000 + 3_000)
    assert (rows["kip16"].partitions, rows["kip16"].partitions_under_min_isr,
            rows["kip16"].time_under_min_isr_ms) == (1, 1, 7_000)
