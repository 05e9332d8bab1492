"""Spark's own Kafka source (input.source = "kafka"): its jars are not in the
pyspark wheel. scripts/spark-kafka-jars resolves them from Maven Central at
exactly pyspark's Spark version (jvm/spark-kafka/pom.xml) into
~/.cache/isr-monitor/spark-kafka-<version>/; a session this package starts
(`isr run`) hands them to Spark with spark.jars."""

from __future__ import annotations

import os
from pathlib import Path

ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10_2.13"


def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def jars_dir(version: str | None = None) -> Path:
    cache = Path(os.environ.get("ISR_CACHE", Path.home() / ".cache" / "isr-monitor"))
    return cache / f"spark-kafka-{version or spark_version()}"


def kafka_jars(version: str | None = None) -> list[str]:
    """The resolved jars, or [] when scripts/spark-kafka-jars has not run."""
    where = jars_dir(version)
    if not (where / ".complete").exists():
        return []
    return sorted(str(p) for p in where.glob("*.jar"))


def missing_message() -> str:
    return (f"input.source = \"kafka\" needs Spark's Kafka connector ({ARTIFACT}:"
            f"{spark_version()}): run scripts/spark-kafka-jars, which resolves it into "
            f"{jars_dir()} where `isr run` finds it (under spark-submit add "
            "--jars \"$(scripts/spark-kafka-jars --jars)\"), or set input.source = \"python\"")
