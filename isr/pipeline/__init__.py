"""The flow composed from the configuration: source -> decode -> sequencer -> engine -> listeners -> sinks."""
