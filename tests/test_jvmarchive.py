"""The JVMs' class-data sharing archives (isr/jvmarchive.py; Spark's driver:
isr/stream/jvm.py): written once under a temporary name and kept whole, a
truncated one never mapped (Java 17 dies of SIGBUS on it), a second session
maps the first one's, a corrupt one leaves the run working, and
ISR_CLASS_ARCHIVE=0 turns it off."""

import json
import os
import subprocess
import sys

import pytest

from isr import jvmarchive
from isr.stream import job, jvm


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ISR_KAFKA_CACHE", str(tmp_path))
    monkeypatch.delenv(jvmarchive.SWITCH, raising=False)
    for name in ("ISR_SPARK_JAVA_OPTIONS", *job.JVM_OPTION_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_a_partial_archive_is_kept_whole_and_a_truncated_one_is_never_used(tmp_path):
    stem = tmp_path / "driver-abc"
    written = jvmarchive.partial(stem)
    written.write_bytes(b"x" * 1000)
    kept = jvmarchive.keep(written)
    assert kept == tmp_path / "driver-abc.1000.jsa" and not written.exists()
    assert jvmarchive.find(stem) == kept
    with open(kept, "r+b") as f:  # a cache copied or restored in part
        f.truncate(500)
    assert jvmarchive.find(stem) is None
    empty = jvmarchive.partial(stem)
    empty.touch()  # the JVM wrote nothing
    assert jvmarchive.keep(empty) is None and not empty.exists()


def test_two_writers_of_one_key_leave_one_archive(tmp_path):
    """Two Kafka clusters (or Spark sessions) started together on a machine
    without the archive each write one: the second to exit keeps none of
    its own (CI left two ~50 MB copies of the brokers' archive)."""
    stem = tmp_path / "classes-abc"
    first, second = jvmarchive.partial(stem), jvmarchive.partial(stem)
    first.write_bytes(b"x" * 1000)
    second.write_bytes(b"y" * 1200)
    kept = jvmarchive.keep(first)
    assert jvmarchive.keep(second) == kept and not second.exists()
    assert sorted(tmp_path.iterdir()) == [kept]


def test_a_partial_archive_whose_process_is_gone_is_abandoned(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    ours = jvmarchive.partial(tmp_path / "driver-abc")
    ours.touch()
    theirs = tmp_path / f"driver-abc.{dead}-0123abcd.partial"
    theirs.touch()
    assert jvmarchive.abandoned(tmp_path) == [theirs]


def test_the_driver_writes_the_archive_once_then_maps_it(cache):
    options = job.driver_java_options(write_archive=True).split()
    writes = [o for o in options if o.startswith(jvmarchive.WRITE)]
    assert len(writes) == 1 and jvmarchive.QUIET in options
    written = jvmarchive.written_by(writes)
    assert written.parent == cache / "spark-classes" and written.name.endswith(".partial")
    written.write_bytes(b"\0" * 4096)  # what the JVM leaves at its clean exit
    kept = jvmarchive.keep(written)
    assert f"{jvmarchive.USE}{kept}" in job.driver_java_options(write_archive=True).split()


def test_another_live_writer_or_a_chosen_cds_option_or_the_switch_leave_it_out(cache, monkeypatch):
    written = jvmarchive.written_by(job.driver_java_options(write_archive=True).split())
    written.touch()  # this process's session writes it now
    assert not any("Archive" in o for o in job.driver_java_options(write_archive=True).split())
    written.unlink()
    monkeypatch.setenv("ISR_SPARK_JAVA_OPTIONS", "-Xshare:off")
    assert job.driver_java_options(write_archive=True).split()[-1] == "-Xshare:off"
    assert not any("Archive" in o for o in job.driver_java_options(write_archive=True).split())
    monkeypatch.delenv("ISR_SPARK_JAVA_OPTIONS")
    monkeypatch.setenv(jvmarchive.SWITCH, "0")
    assert not any("Archive" in o for o in job.driver_java_options(write_archive=True).split())


def test_the_key_follows_the_jars(cache, tmp_path):
    jar = tmp_path / "connector.jar"
    jar.write_bytes(b"1")
    before = jvm.driver_archive([str(jar)])
    assert jvm.driver_archive([str(jar)]) == before
    jar.write_bytes(b"22")  # another connector build
    assert jvm.driver_archive([str(jar)]) != before
    assert jvm.driver_archive([]) != before


SESSION = """
import json, os
from isr.config import load_settings
from isr.stream.job import spark_session
spark = spark_session(load_settings(None, []), "local[1]", "class-archive", write_archive=True)
total = spark.range(1000).selectExpr("sum(id)").collect()[0][0]
pid = spark.sparkContext._gateway.proc.pid
args = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory
            .getRuntimeMXBean().getInputArguments())
with open(f"/proc/{pid}/maps") as f:
    mapped = sorted({line.split()[-1] for line in f if line.rstrip().endswith(".jsa")})
print(json.dumps({"total": total, "args": args, "mapped": mapped}))
"""


@pytest.mark.integration
def test_a_second_session_maps_the_archive_the_first_wrote_and_a_corrupt_one_is_harmless(
        cache):
    env = {k: v for k, v in os.environ.items() if k not in ("ISR_SPARK_JAVA_OPTIONS",)}

    def session() -> dict:
        out = subprocess.run([sys.executable, "-c", SESSION], env=env, cwd=cache,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        lines = out.stdout.splitlines()
        assert len(lines) == 1, out.stdout[-2000:]  # nothing of the JVM's on stdout
        assert "Traceback" not in out.stderr and "[cds" not in out.stderr, out.stderr[-2000:]
        return json.loads(lines[0])

    first = session()
    assert first["total"] == 499500
    assert any(a.startswith(jvmarchive.WRITE) for a in first["args"])
    kept = list((cache / "spark-classes").glob("driver-*.jsa"))
    assert len(kept) == 1 and not list((cache / "spark-classes").glob("*.partial"))

    second = session()
    assert second["total"] == 499500
    assert f"{jvmarchive.USE}{kept[0]}" in second["args"]
    assert str(kept[0]) in second["mapped"]  # the JVM mapped it

    size = kept[0].stat().st_size  # another Java's archive, or garbage of the right size
    kept[0].chmod(0o644)
    kept[0].write_bytes(os.urandom(size))
    third = session()
    assert third["total"] == 499500
    assert f"{jvmarchive.USE}{kept[0]}" in third["args"]
    assert str(kept[0]) not in third["mapped"]


def test_a_session_that_does_not_write_still_maps_a_kept_archive(cache):
    """`isr run` without --available-now (stopped by a signal), the demo, a
    session of a few batch queries: no archive written, a kept one used."""
    assert not any("Archive" in o for o in job.driver_java_options().split())
    written = jvmarchive.written_by(job.driver_java_options(write_archive=True).split())
    written.write_bytes(b"\0" * 4096)
    kept = jvmarchive.keep(written)
    assert f"{jvmarchive.USE}{kept}" in job.driver_java_options().split()
