"""How many state buckets a job runs with (`stream.state_buckets`).

`auto` (the default) follows the cores: Spark's default parallelism (local[N]:
N; a cluster: its executors' cores), so each core runs one bucket's task per
micro-batch. A checkpoint keeps its bucket count for life (every bucket's
state records its layout, operator.py), so a restart from an existing
checkpoint takes the count it was written with. Spark itself pins it: the
first run's `spark.sql.shuffle.partitions` is in the metadata line of every
offset log entry (`<checkpoint>/offsets/<batch>`: a `v1` line, then that
JSON with its `conf`, then one offset per source; Spark's `OffsetSeqLog`
and `OffsetSeqMetadata`), and a restart runs the stateful operator with it.
"""

from __future__ import annotations

import json
import os
from typing import Optional, Union
from urllib.parse import urlparse

AUTO = "auto"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def from_offset_entry(text: str) -> Optional[int]:
    """The shuffle partitions recorded in one offset log entry, if any."""
    lines = text.splitlines()
    if len(lines) < 2 or not lines[0].startswith("v"):
        return None
    try:
        value = json.loads(lines[1]).get("conf", {}).get(SHUFFLE_PARTITIONS)
        return int(value) if value is not None else None
    except (ValueError, AttributeError):
        return None


def checkpoint_buckets(spark, checkpoint: str) -> Optional[int]:
    """The bucket count of an existing checkpoint (None: a new one)."""
    offsets = checkpoint.rstrip("/") + "/offsets"
    url = urlparse(offsets)
    if url.scheme in ("", "file"):  # no Spark job for the common local case
        path = url.path if url.scheme else offsets
        if not os.path.isdir(path):
            return None
        entries = sorted((n for n in os.listdir(path) if n.isdigit()), key=int)
        for name in reversed(entries):
            with open(os.path.join(path, name), encoding="utf-8", errors="replace") as f:
                found = from_offset_entry(f.read())
            if found is not None:
                return found
        return None
    try:  # HDFS, S3, ...: through Spark's own file systems
        rows = spark.read.text(offsets, wholetext=True).collect()
    except Exception:  # noqa: BLE001 - Spark's AnalysisException: no such path
        return None
    numbers = [n for n in (from_offset_entry(r.value) for r in rows) if n is not None]
    return numbers[-1] if numbers else None


def resolve(spark, configured: Union[str, int], checkpoint: str) -> int:
    """The bucket count to run with: the configured number, else the
    checkpoint's, else one per core of the job."""
    if configured != AUTO:
        return int(configured)
    return checkpoint_buckets(spark, checkpoint) or max(1, spark.sparkContext.defaultParallelism)
