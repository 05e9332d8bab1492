"""A job restarted from a checkpoint written with an earlier state layout
(tests/data/checkpoint-layout1 and checkpoint-layout2, README there) carries
on with the same outputs as an uninterrupted run."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from isr.config import load_settings
from isr.contract.records import OutputRecord
from isr.pipeline.local import replay
from isr.stream.replay_spark import Admission, collect

pytestmark = pytest.mark.integration
DATA = Path(__file__).resolve().parents[1] / "data"


def _make_module(fixture: Path):
    spec = importlib.util.spec_from_file_location(f"make_{fixture.name}", fixture / "make.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# layout 1: pickled rows, zk propagation; layout 2: rows whose deltas hold
# fetch sessions whole (the session workload)
@pytest.mark.parametrize("layout", [1, 2])
def test_restart_from_an_earlier_layouts_checkpoint_gives_the_uninterrupted_outputs(
        spark, tmp_path, layout):
    fixture = DATA / f"checkpoint-layout{layout}"
    make = _make_module(fixture)
    settings = load_settings(None, make.SETTINGS)
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(fixture / "checkpoint", checkpoint)
    before = [OutputRecord(*row[1:]) for row in
              map(json.loads, (fixture / "outputs.jsonl").read_text().splitlines())]
    batches: list[int] = []
    after: list[OutputRecord] = []

    def write_batch(batch_id, records):
        batches.append(batch_id)
        after.extend(records)

    query = make.query(spark, settings, fixture / "input.jsonl", checkpoint, write_batch)
    query.awaitTermination()
    assert query.exception() is None
    assert batches[0] == make.STOP_AT  # the failed batch again, from the checkpoint

    path = str(fixture / "input.jsonl")
    admitted = Admission([path], ["input.jsonl"], settings)
    restarted = collect(before + after, settings, admitted.lines, admitted.dead)
    local = replay([path], settings.monitor)
    dump = lambda rs: [r.model_dump_json() for r in rs]  # noqa: E731
    assert dump(restarted.decisions) == dump(local.decisions)
    assert dump(restarted.states) == dump(local.states)
    assert [(d.offset, d.reason) for d in restarted.dead_letters] == [
        (d.offset, d.reason) for d in local.dead_letters]
    assert len(local.decisions) >= 4 and any(d.type == "alert" for d in local.decisions)
    assert len(after) > 0
