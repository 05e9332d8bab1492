"""Topic ids to names from a live cluster (FetchRequest v13+ names topics by id).

Every question to the cluster waits at most kafka.connect_timeout_s, and in
kafka-python's Python loop, so Ctrl-C / SIGTERM interrupt it (isr/signals.py).
"""

from __future__ import annotations

import re
import time
from typing import Optional

from isr.config import ConfigError
from isr.tap.request_log import kafka_topic_id

REFRESH_S = 10.0  # an unknown id asks the cluster again at most this often
_HOST_PORT = r"(\[[0-9a-fA-F:.]+\]|[^\s,/:\[\]]+):\d+"
BOOTSTRAP = re.compile(rf"{_HOST_PORT}(,{_HOST_PORT})*")  # host:port[,host:port...]


class ClusterLookup:
    """What a live cluster says of its topics (kafka-python's describe_topics),
    asked again at most every REFRESH_S for something not known yet; each
    question waits at most `timeout_s` (kafka.connect_timeout_s)."""

    def __init__(self, bootstrap: str, timeout_s: float = 10.0) -> None:
        self.bootstrap = bootstrap
        self.timeout_ms = int(timeout_s * 1000)
        self._asked = 0.0

    def _learn(self, topic: dict) -> None:
        raise NotImplementedError

    def _stale(self) -> bool:
        return time.monotonic() - self._asked > REFRESH_S

    def _refresh(self) -> Optional[str]:
        """Ask the cluster for every topic; the problem, if it did not answer."""
        from kafka.admin import KafkaAdminClient
        from kafka.errors import KafkaError

        self._asked = time.monotonic()
        try:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="isr-tap",
                                     bootstrap_timeout_ms=self.timeout_ms,
                                     request_timeout_ms=self.timeout_ms)
            try:
                for topic in admin.describe_topics():
                    self._learn(topic)
            finally:
                admin.close()
        except KafkaError as exc:
            self._asked = time.monotonic()  # the next try counts from the end of this one
            return str(exc)  # what is unknown stays so (counted); asked again later
        return None


class ClusterTopicIds(ClusterLookup):
    def __init__(self, bootstrap: str, timeout_s: float = 10.0) -> None:
        super().__init__(bootstrap, timeout_s)
        self.names: dict[str, str] = {}

    @classmethod
    def reachable(cls, bootstrap: str, timeout_s: float) -> "ClusterTopicIds":
        """The resolver, once the cluster has answered (else one line)."""
        if not BOOTSTRAP.fullmatch(bootstrap):
            raise ConfigError(f"--topic-ids {bootstrap}: no such metadata dump file, and not "
                              "bootstrap servers (HOST:PORT)")
        ids = cls(bootstrap, timeout_s)
        problem = ids._refresh()
        if problem is not None:
            raise ConfigError(f"--topic-ids {bootstrap}: no answer within {timeout_s:g} s "
                              f"(kafka.connect_timeout_s): {problem}")
        return ids

    def __call__(self, topic_id: str) -> Optional[str]:
        if topic_id not in self.names and self._stale():
            self._refresh()
        return self.names.get(topic_id)

    def _learn(self, topic: dict) -> None:
        if topic.get("topic_id"):
            self.names[kafka_topic_id(str(topic["topic_id"]))] = topic["name"]
