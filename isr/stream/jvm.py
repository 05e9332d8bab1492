"""JVM options for Spark's short runs, in a module of its own: the demo and
the tests name them without importing pyspark."""

# A JVM that starts on about half the CPU: the client compiler only (C2's
# compilations are most of a starting JVM's CPU) and the serial collector.
# Measured on 2 shared cores: a local session's start and first query took
# 31.7 CPU-seconds of the JVM by default, 17.2 with these (docs/streaming.md).
# For short runs (the demo, the tests).
QUICK_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# The driver JVM of every session `isr` starts (job.driver_java_options):
# the same options. Measured on the realistic clusters through `isr run`
# (issue 23, docs/benchmarks.md, branch `sparkcost`): with the JVM's
# defaults the compiler threads (C2 most) were ~35 % of the JVM's CPU and
# G1's threads ~12 %, and C2 kept compiling in every micro-batch (~1 CPU s
# a batch at 100 k partitions); with these the JVM took 37-42 % less CPU
# and the batches after the first were not slower. ISR_SPARK_JAVA_OPTIONS
# (or SPARK_SUBMIT_OPTS, JAVA_TOOL_OPTIONS, ...) choosing a compiler
# (-XX:TieredStopAtLevel=4) or a collector (-XX:+UseG1GC) replaces that one.
DRIVER_JVM = QUICK_START_JVM
