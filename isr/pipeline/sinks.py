"""The job's outputs, from the configuration: the Kafka topics always, the
alert webhooks if [delivery] names any, Prometheus if [metrics] is enabled,
the run's tally if the command keeps one, then every `output.sinks` entry.
Each micro-batch's records go to all of them here, in that order (Kafka
first: the alert topic is the record of what was decided)."""

from __future__ import annotations

import importlib
from typing import Callable, Optional

from isr.config import ConfigError, Settings
from isr.contract.records import OutputRecord
from isr.gc_tuning import no_gc_passes_in_call
from isr.sinks.base import Run, Sink
from isr.sinks.kafka import KafkaSink
from isr.sinks.prometheus import Metrics
from isr.sinks.webhooks import Deliverer


def configured_sinks(settings: Settings, tally: Optional[Sink] = None) -> list[Sink]:
    sinks: list[Sink] = [KafkaSink.from_settings(settings)]
    if settings.delivery.webhooks:
        sinks.append(Deliverer(settings.delivery))
    if settings.metrics.enabled:
        sinks.append(Metrics(settings.metrics))
    if tally is not None:
        sinks.append(tally)
    return sinks + extra_sinks(settings)


def extra_sinks(settings: Settings) -> list[Sink]:
    """The `output.sinks` entries, "module:Class", each built with the settings."""
    return [sink_class(spec)(settings) for spec in settings.output.sinks]


def sink_class(spec: str) -> Callable[[Settings], Sink]:
    module, _, name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"output.sinks {spec!r}: {exc}") from None


class Outputs:
    """All the sinks of a run, as one."""

    def __init__(self, sinks: list[Sink]) -> None:
        self.sinks = sinks
        self.wants_partition_metrics = any(s.wants_partition_metrics for s in sinks)

    def open(self, settings: Settings,
             watch_progress: Callable[[Callable[[dict], None]], None]) -> None:
        run = Run(settings, watch_progress, self.sinks)
        for sink in self.sinks:
            sink.open(run)

    def started(self, query_id: str) -> None:
        for sink in self.sinks:
            sink.started(query_id)

    def write_batch(self, batch_id: int, records: list[OutputRecord]) -> None:
        """Every sink's turn at the batch, without the cyclic GC's passes
        meanwhile (gc_tuning.no_gc_passes_in_call): the sinks parse and drop
        a few objects per record (~600 k containers per batch at 100 k
        partitions), and each pass the allocations set off walks the
        driver's whole heap again, the metrics' series store included."""
        with no_gc_passes_in_call():
            for sink in self.sinks:
                sink.write_batch(batch_id, records)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
