"""Topic ids to names from a live cluster (FetchRequest v13+ names topics by id)."""

from __future__ import annotations

import time
from typing import Optional

from isr.tap.request_log import kafka_topic_id

REFRESH_S = 10.0  # an unknown id asks the cluster again at most this often


class ClusterTopicIds:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.names: dict[str, str] = {}
        self._asked = 0.0

    def __call__(self, topic_id: str) -> Optional[str]:
        name = self.names.get(topic_id)
        if name is None and time.monotonic() - self._asked > REFRESH_S:
            self._refresh()
            name = self.names.get(topic_id)
        return name

    def _refresh(self) -> None:
        from kafka.admin import KafkaAdminClient
        from kafka.errors import KafkaError

        self._asked = time.monotonic()
        try:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="isr-tap",
                                     bootstrap_timeout_ms=10_000)
            try:
                for t in admin.describe_topics():
                    if t.get("topic_id"):
                        self.names[kafka_topic_id(str(t["topic_id"]))] = t["name"]
            finally:
                admin.close()
        except KafkaError:
            pass  # counted as unknown topic ids; asked again later
