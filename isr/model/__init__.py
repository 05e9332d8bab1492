"""The leader model: pure, deterministic, Spark-free (docs/rules.md)."""

from isr.model.brokers import Brokers
from isr.model.follower import Follower
from isr.model.partition import PartitionModel
from isr.model.propagation import Propagation
from isr.model.rules import Rules

__all__ = ["Brokers", "Follower", "PartitionModel", "Propagation", "Rules"]
