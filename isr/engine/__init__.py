"""Drives the leader model: event-time ordering (sequencer.py), fan-out of
each event to every policy's model (local.py), the listeners that follow the
models (listeners.py), engine state as bytes (snapshot.py) and run summaries
(summary.py). `isr replay` and each bucket of the Spark job (isr/stream) run
the same LocalEngine."""
