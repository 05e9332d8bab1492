"""The streaming job's end-of-run summary (isr/stream/tally.py) counts what
`isr replay` counts, from the records the job writes."""

from __future__ import annotations

from pathlib import Path

from isr.config import load_settings
from isr.contract.records import to_record
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
