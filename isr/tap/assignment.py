"""A partition's replicas, for taps whose lines do not list them
(state-change.log's leader lines, docs/tap.md): from a metadata dump, or by
asking the cluster."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable, Optional

from isr.config import ConfigError
from isr.linecap import DEFAULT_MAX_LINE_BYTES

Replicas = Callable[[tuple[str, int]], Optional[list[int]]]
REFRESH_S = 10.0  # an unknown partition asks the cluster again at most this often
BOOTSTRAP = re.compile(r"^[^\s,/]+:\d+(?:,[^\s,/]+:\d+)*$")  # HOST:PORT[,HOST:PORT...]


def dump_replicas(path: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Replicas:
    """The replicas as the dump's last record of each partition left them."""
    from isr.tap.command import events_of
    from isr.tap.lines import read_lines
    from isr.tap.metadata import MetadataLogTap

    dump = MetadataLogTap(hold=True)
    for _ in events_of(dump, read_lines(path, False, max_line_bytes=max_line_bytes)):
        pass
    replicas = {key: list(reg.replicas) for key, reg in dump.partitions.items()}
    return replicas.get


class ClusterReplicas:
    """Metadata (kafka-python's describe_topics) for a partition not seen yet."""

    def __init__(self, bootstrap: str, timeout_s: float = 10.0) -> None:
        self.bootstrap = bootstrap
        self.timeout_ms = int(timeout_s * 1000)  # kafka.connect_timeout_s
        self.replicas: dict[tuple[str, int], list[int]] = {}
        self._asked = 0.0

    def __call__(self, key: tuple[str, int]) -> Optional[list[int]]:
        if key not in self.replicas and time.monotonic() - self._asked > REFRESH_S:
            self._refresh()
        return self.replicas.get(key)

    def _refresh(self) -> bool:
        """Whether the cluster answered."""
        from kafka.admin import KafkaAdminClient
        from kafka.errors import KafkaError

        self._asked = time.monotonic()
        try:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="isr-tap",
                                     bootstrap_timeout_ms=self.timeout_ms,
                                     request_timeout_ms=self.timeout_ms)
            try:
                for t in admin.describe_topics():
                    for p in t.get("partitions", ()):
                        self.replicas[(t["name"], p["partition_index"])] = list(p["replica_nodes"])
            finally:
                admin.close()
        except KafkaError:
            return False  # the leader line stays an isr event, counted; asked again later
        return True


def replicas_from(where: Optional[str], timeout_s: float = 10.0,
                  max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Optional[Replicas]:
    """`--replicas DUMP|BOOTSTRAP`: a metadata dump file, else bootstrap servers
    (asked for at most `timeout_s`, kafka.connect_timeout_s)."""
    if where is None:
        return None
    if Path(where).exists():
        return dump_replicas(where, max_line_bytes)
    if not BOOTSTRAP.match(where):
        raise ConfigError(f"--replicas {where}: no such file, and not bootstrap servers "
                          "(HOST:PORT[,HOST:PORT...])")
    cluster = ClusterReplicas(where, timeout_s)
    if not cluster._refresh():
        raise ConfigError(f"--replicas {where}: no Kafka cluster answered there within "
                          f"{timeout_s:g} s (kafka.connect_timeout_s)")
    return cluster
