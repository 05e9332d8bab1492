"""What Spark's progress reports say about the input, read the same way by
the metrics and the benchmarks."""

from __future__ import annotations

import json
from typing import Optional

# The Kafka records the batch reads. Spark's numInputRows counts the rows the
# source returns, which are packed rows when the reader packs.
RECORDS = "~records"


def input_records(progress: dict) -> int:
    """Input records of one micro-batch (a StreamingQueryProgress as a dict):
    what the Python source says it read, else Spark's row count."""
    total = 0
    for source in progress.get("sources") or []:
        try:
            end = _offsets(source.get("endOffset"))
        except ValueError:
            end = None
        if isinstance(end, dict) and RECORDS in end:
            total += end[RECORDS]
        else:
            total += source.get("numInputRows", 0) or 0
    return total


def _offsets(value):
    """A source's offsets in a progress report: JSON text, or already parsed."""
    return json.loads(value) if isinstance(value, str) else value


def input_lag(source: dict) -> Optional[int]:
    """Records between a source's end offset and the latest it saw: the Python
    source's {"topic/partition": n} or Spark's {"topic": {"partition": n}}."""
    def flat(text) -> Optional[dict]:
        if not text:
            return None
        data = _offsets(text)
        out = {}
        for k, v in data.items():
            if k.startswith("~"):  # the Python source's flags (source.py), not partitions
                continue
            if isinstance(v, dict):
                out.update({f"{k}/{p}": n for p, n in v.items()})
            elif isinstance(v, int):
                out[k] = v
        return out

    try:
        latest, end = flat(source.get("latestOffset")), flat(source.get("endOffset"))
    except (ValueError, AttributeError):
        return None
    if latest is None or end is None:
        return None
    return sum(max(0, n - end.get(k, 0)) for k, n in latest.items())
