"""Shared fixtures: one embedded broker and one local Spark session per run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `import helpers`
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("ISR_SPARK_LOG_LEVEL", "ERROR")


@pytest.fixture(scope="session")
def broker():
    from isr.kafka.embedded import EmbeddedBroker

    with EmbeddedBroker() as b:
        yield b


@pytest.fixture(scope="session")
def spark():
    from isr.config import Settings
    from isr.stream.job import spark_session

    session = spark_session(Settings(), "local[2]", "isr-tests")
    yield session
    session.stop()
