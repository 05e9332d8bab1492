"""Engines that drive the leader model: local (pure Python) and Spark."""
