"""The job's outputs behind one protocol (isr/sinks/base.py), from the
configuration (isr/pipeline/sinks.py): a new sink is one file and one line."""

from __future__ import annotations

import pytest
from recording_sink import RecordingSink

from isr.config import ConfigError, load_settings
from isr.contract.records import OutputRecord
from isr.pipeline.sinks import Outputs, extra_sinks

LINE = 'output.sinks=["recording_sink:RecordingSink"]'


def test_a_sink_named_in_the_configuration_gets_every_batch():
    sinks = extra_sinks(load_settings(None, [LINE]))
    assert [type(s) for s in sinks] == [RecordingSink]
    outputs = Outputs(sinks)
    outputs.open(load_settings(None, [LINE]), lambda _on_progress: None)
    outputs.started("query-id")
    batch = [OutputRecord("isr_change", "default/t/0", "id-1", 1000, "{}")]
    outputs.write_batch(7, batch)
    sink = RecordingSink.last
    assert sink.calls == ["open", "started", "write_batch"]
    assert sink.batches == {7: batch} and sink.others == ["RecordingSink"]


@pytest.mark.parametrize("spec, error", [
    ("recording_sink:NoSuchSink", "has no attribute 'NoSuchSink'"),
    ("no_such_module:Sink", "No module named 'no_such_module'"),
])
def test_a_sink_that_cannot_be_found_is_one_line(spec, error):
    with pytest.raises(ConfigError, match=error) as err:
        extra_sinks(load_settings(None, [f'output.sinks=["{spec}"]']))
    assert str(err.value).startswith(f"output.sinks '{spec}'") and "\n" not in str(err.value)


def test_a_sink_must_be_named_module_colon_class():
    with pytest.raises(ConfigError, match="module:Class"):
        load_settings(None, ['output.sinks=["recording_sink.RecordingSink"]'])
