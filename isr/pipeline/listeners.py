"""The engine's listeners the configuration asks for, for the local and the
Spark path alike: the engine takes whatever listeners its caller gives it."""

from __future__ import annotations

from typing import Any

from isr.alerts.listener import AlertListener
from isr.config import MonitorSettings
from isr.engine.listeners import Listener
from isr.engine.local import LocalEngine
from isr.engine.propagation import ZkPropagation


def standard_listeners(monitor: MonitorSettings, propagation: bool = True) -> list[Listener]:
    """The alert rules, and the ZooKeeper-era propagation stage in `zk` mode
    (`propagation=False`: not here; the Spark job runs it per leader on the
    driver, across its buckets: stream/propagation.py)."""
    listeners: list[Listener] = []
    if monitor.alerts.enabled:
        listeners.append(AlertListener(monitor.alerts, monitor.replica_lag_time_max_ms))
    if propagation and monitor.propagation == "zk":
        listeners.append(ZkPropagation())
    return listeners


def local_engine(monitor: MonitorSettings, **options: Any) -> LocalEngine:
    """A LocalEngine with the standard listeners."""
    return LocalEngine(monitor, listeners=standard_listeners(monitor), **options)
