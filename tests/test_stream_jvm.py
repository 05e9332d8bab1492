"""The driver JVM's options of the sessions `isr` starts (job.driver_java_options):
the client compiler and the serial collector (jvm.DRIVER_JVM) by default,
each family replaced by what ISR_SPARK_JAVA_OPTIONS or the JVM's own
environment variables choose (two collectors refuse to start)."""

import pytest

from isr.stream import job
from isr.stream.jvm import DRIVER_JVM


@pytest.fixture
def clean(monkeypatch):
    for name in ("ISR_SPARK_JAVA_OPTIONS", *job.JVM_OPTION_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_driver_jvm_gets_the_client_compiler_and_the_serial_collector(clean):
    options = job.driver_java_options().split()
    assert "-XX:TieredStopAtLevel=1" in options and "-XX:+UseSerialGC" in options
    assert set(DRIVER_JVM.split()) <= set(options)
    assert options[0] == "-Xss16m"


def test_a_collector_chosen_elsewhere_replaces_only_the_collector(clean):
    clean.setenv("ISR_SPARK_JAVA_OPTIONS", "-XX:+UseG1GC -XX:StartFlightRecording=filename=x.jfr")
    options = job.driver_java_options().split()
    assert "-XX:+UseSerialGC" not in options and "-XX:+UseG1GC" in options
    assert "-XX:TieredStopAtLevel=1" in options
    assert options[-1] == "-XX:StartFlightRecording=filename=x.jfr"


@pytest.mark.parametrize("variable", job.JVM_OPTION_VARIABLES)
def test_a_compiler_chosen_by_the_jvms_variables_replaces_only_the_compiler(clean, variable):
    clean.setenv(variable, "-Xmx2g -XX:TieredStopAtLevel=4")
    options = job.driver_java_options().split()
    assert not any(o.startswith("-XX:TieredStopAtLevel") for o in options)
    assert "-XX:+UseSerialGC" in options


def test_other_use_flags_are_not_collectors(clean):
    clean.setenv("ISR_SPARK_JAVA_OPTIONS", "-XX:+UseCompressedOops -XX:-TieredCompilation")
    options = job.driver_java_options().split()
    assert "-XX:+UseSerialGC" in options and "-XX:TieredStopAtLevel=1" not in options


@pytest.mark.integration
def test_the_options_reach_the_sessions_jvm(tmp_path):
    """A session `isr` starts (job.spark_session), without the tests'
    SPARK_SUBMIT_OPTS: its JVM runs with the client compiler and the serial
    collector; stream.spark_conf's spark.driver.extraJavaOptions, set after
    ours, replaces them all."""
    import json
    import os
    import subprocess
    import sys

    script = """
import json, sys
from isr.config import load_settings
from isr.stream.job import spark_session
conf = sys.argv[1:]
s = load_settings(None, conf)
spark = spark_session(s, "local[1]", "jvm-options")
bean = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
print(json.dumps(list(bean.getInputArguments())))
spark.stop()
"""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ISR_SPARK_JAVA_OPTIONS", *job.JVM_OPTION_VARIABLES)}

    def jvm_args(*conf: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", script, *conf], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    args = jvm_args()
    assert "-XX:TieredStopAtLevel=1" in args and "-XX:+UseSerialGC" in args
    assert "-XX:MaxNewSize=128m" in args
    assert "-XX:MinHeapFreeRatio=20" in args
    args = jvm_args('stream.spark_conf={"spark.driver.extraJavaOptions"="-Xss16m"}')
    assert "-XX:TieredStopAtLevel=1" not in args and "-XX:+UseSerialGC" not in args


def test_the_driver_jvms_young_generation_is_bounded_unless_chosen_elsewhere(clean):
    """The serial collector's young generation is capped (the heap committed
    ~0.2 GB less at 100 k partitions); an operator's young-generation size,
    or another collector (which sizes its own), replaces the cap."""
    assert "-XX:MaxNewSize=128m" in job.driver_java_options().split()
    for chosen in ("-Xmn256m", "-XX:NewRatio=2", "-XX:+UseG1GC", "-XX:+UseParallelGC"):
        clean.setenv("ISR_SPARK_JAVA_OPTIONS", chosen)
        options = job.driver_java_options().split()
        assert "-XX:MaxNewSize=128m" not in options and options[-1] == chosen
    clean.setenv("ISR_SPARK_JAVA_OPTIONS", "-XX:+UseSerialGC -XX:StartFlightRecording")
    assert "-XX:MaxNewSize=128m" in job.driver_java_options().split()


def test_the_driver_jvms_heap_keeps_less_free_room_unless_chosen_elsewhere(clean):
    """The serial collector keeps at least 20 % of the heap free after a full
    collection instead of 40 % (the JVM's peak RSS ~0.1 GB lower at 100 k
    partitions); an operator's MinHeapFreeRatio or MaxHeapFreeRatio replaces
    it (the JVM refuses a minimum above the maximum), another collector
    drops it."""
    ours = {"-XX:MinHeapFreeRatio=20"}
    assert ours <= set(job.driver_java_options().split())
    for chosen in ("-XX:MinHeapFreeRatio=50", "-XX:MaxHeapFreeRatio=10", "-XX:+UseG1GC"):
        clean.setenv("ISR_SPARK_JAVA_OPTIONS", chosen)
        options = job.driver_java_options().split()
        assert not ours & set(options) and options[-1] == chosen
    clean.setenv("JAVA_TOOL_OPTIONS", "-XX:MaxHeapFreeRatio=90")
    clean.delenv("ISR_SPARK_JAVA_OPTIONS")
    assert not ours & set(job.driver_java_options().split())
