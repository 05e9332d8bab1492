"""JVM options for Spark's short runs, in a module of its own: the demo and
the tests name them without importing pyspark."""

# A JVM that starts on about half the CPU: the client compiler only (C2's
# compilations are most of a starting JVM's CPU) and the serial collector.
# Measured on 2 shared cores: a local session's start and first query took
# 31.7 CPU-seconds of the JVM by default, 17.2 with these (docs/streaming.md).
# For short runs (the demo, the tests); a long-running job wants C2's code.
QUICK_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
