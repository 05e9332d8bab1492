"""JVM options for Spark's short runs, in a module of its own: the demo and
the tests name them without importing pyspark."""

# A JVM that starts on about half the CPU: the client compiler only (C2's
# compilations are most of a starting JVM's CPU) and the serial collector.
# Measured on 2 shared cores: a local session's start and first query took
# 31.7 CPU-seconds of the JVM by default, 17.2 with these (docs/streaming.md).
# For short runs (the demo, the tests).
QUICK_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# The driver JVM of every session `isr` starts (job.driver_java_options):
# the same options. Measured on the realistic 100 k cluster through `isr run`
# (issue 23, docs/benchmarks.md, branch `sparkcost`): C2 kept compiling in
# every micro-batch (Spark generates and loads code per batch) and C2 and
# G1 were about half of the JVM's CPU; the client compiler's code was not
# slower where the JVM works (the Kafka source, Arrow to and from Python,
# the shuffle, the state store's commits). ISR_SPARK_JAVA_OPTIONS choosing
# a compiler (-XX:TieredStopAtLevel=4) or a collector (-XX:+UseG1GC)
# replaces that one.
DRIVER_JVM = QUICK_START_JVM
