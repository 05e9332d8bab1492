"""Kafka ISR monitor: re-computes partition leaders' ISR decisions from fetch-state events."""

__version__ = "0.1.0"
