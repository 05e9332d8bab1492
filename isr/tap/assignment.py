"""A partition's replicas, for taps whose lines do not list them
(state-change.log's leader lines, docs/tap.md): from a metadata dump, or by
asking the cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from isr.config import ConfigError
from isr.linecap import DEFAULT_MAX_LINE_BYTES
from isr.tap.resolve import BOOTSTRAP, ClusterLookup

Replicas = Callable[[tuple[str, int]], Optional[list[int]]]


def dump_replicas(path: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Replicas:
    """The replicas as the dump's last record of each partition left them."""
    from isr.tap.lines import events_of
    from isr.tap.lines import read_lines
    from isr.tap.metadata import MetadataLogTap

    dump = MetadataLogTap(hold=True)
    for _ in events_of(dump, read_lines(path, False, max_line_bytes=max_line_bytes)):
        pass
    replicas = {key: list(reg.replicas) for key, reg in dump.partitions.items()}
    return replicas.get


class ClusterReplicas(ClusterLookup):
    """Metadata for a partition not seen yet."""

    def __init__(self, bootstrap: str, timeout_s: float = 10.0) -> None:
        super().__init__(bootstrap, timeout_s)
        self.replicas: dict[tuple[str, int], list[int]] = {}

    def __call__(self, key: tuple[str, int]) -> Optional[list[int]]:
        if key not in self.replicas and self._stale():
            self._refresh()  # unanswered: the leader line stays an isr event, counted
        return self.replicas.get(key)

    def _learn(self, topic: dict) -> None:
        for p in topic.get("partitions", ()):
            self.replicas[(topic["name"], p["partition_index"])] = list(p["replica_nodes"])


def replicas_from(where: Optional[str], timeout_s: float = 10.0,
                  max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Optional[Replicas]:
    """`--replicas DUMP|BOOTSTRAP`: a metadata dump file, else bootstrap servers
    (asked for at most `timeout_s`, kafka.connect_timeout_s)."""
    if where is None:
        return None
    if Path(where).exists():
        return dump_replicas(where, max_line_bytes)
    if not BOOTSTRAP.fullmatch(where):
        raise ConfigError(f"--replicas {where}: no such file, and not bootstrap servers "
                          "(HOST:PORT[,HOST:PORT...])")
    cluster = ClusterReplicas(where, timeout_s)
    if cluster._refresh() is not None:
        raise ConfigError(f"--replicas {where}: no Kafka cluster answered there within "
                          f"{timeout_s:g} s (kafka.connect_timeout_s)")
    return cluster
