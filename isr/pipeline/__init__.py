"""The flow composed from the configuration: source -> decode -> sequencer ->
engine -> listeners -> sinks. local.py and streaming.py compose it (top
floor); listeners.py, sinks.py and results.py are their parts, on a low floor
(docs/architecture.md)."""
