"""Apache Kafka's jars from Maven Central, cached, and the Java to run them
(isr/kafka/cluster.py, docs/real-kafka.md). jvm/kafka/pom.xml pins the
version; the jars land in ~/.cache/isr-monitor/kafka-<version>/libs once,
and later starts read that cache without network."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
JVM_DIR = REPO / "jvm" / "kafka"
POM = JVM_DIR / "pom.xml"
JMX_AGENT = "jmx_prometheus_javaagent"  # moved to libs/agent/: not on the classpath


class ClusterError(RuntimeError):
    """Why the cluster cannot start or go on, as one line."""


class MavenUnreachable(ClusterError):
    """The jars are not cached and Maven Central did not answer."""


def kafka_version() -> str:
    m = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text())
    if m is None:
        raise ClusterError(f"{POM} does not set <kafka.version>")
    return m.group(1)


def cache_root() -> Path:
    explicit = os.environ.get("ISR_KAFKA_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "isr-monitor"


# ------------------------------------------------------------------ jars
def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()[:16]


def check_cache(libs: Path) -> Optional[str]:
    """None when `libs` holds every jar of its manifest, whole; else why not."""
    manifest = libs / "manifest.json"
    if not manifest.is_file():
        return "no manifest"
    try:
        meta = json.loads(manifest.read_text())
        jars = meta["jars"]
    except (ValueError, KeyError, TypeError):
        return "unreadable manifest.json"
    if meta.get("pom") != _pom_digest():
        return "stale"  # jvm/kafka/pom.xml changed: resolve again
    for name, size in jars.items():
        jar = libs / name
        if not jar.is_file() or jar.stat().st_size != size:
            return f"{name} missing or of the wrong size"
        try:
            with zipfile.ZipFile(jar):  # reads the central directory: cheap
                pass
        except (zipfile.BadZipFile, OSError):
            return f"{name} is not a readable jar"
    return None


def _mvn(args: list[str], offline: bool) -> subprocess.CompletedProcess:
    # ISR_KAFKA_MVN_ARGS: e.g. `-s settings.xml` for a mirror of Maven Central.
    extra = os.environ.get("ISR_KAFKA_MVN_ARGS", "").split()
    cmd = ["mvn", "-B", "-q", "-f", str(POM), *(["-o"] if offline else []), *extra, *args]
    return subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=900)


# Pinned: Maven 3.8's default (2.8) is from 2013.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
NETWORK_ERRORS = re.compile(
    r"UnknownHost|Connection refused|Connect(ion)? timed out|Network is unreachable|"
    r"No route to host|Could not transfer|transfer failed|Temporary failure in name resolution|"
    r"SocketTimeout|Remote host terminated", re.I)


def resolve_jars(quiet: bool = False) -> Path:
    """The directory of Kafka's jars, resolved with Maven once and cached
    (~/.cache/isr-monitor/kafka-<version>/libs). A later start reads the cache
    and needs no network; Maven's own repository (~/.m2) is tried offline
    before Maven Central."""
    libs = cache_root() / f"kafka-{kafka_version()}" / "libs"
    problem = check_cache(libs)
    if problem is None:
        return libs
    if libs.exists() and problem not in ("no manifest", "stale"):
        raise ClusterError(f"the Kafka jar cache {libs} is corrupt ({problem}): "
                           f"remove it (rm -rf {libs}) and start again")
    if shutil.which("mvn") is None:
        raise ClusterError("Maven (mvn) is needed once to fetch Kafka's jars: "
                           "apt-get install maven (Java 17 too)")
    partial = libs.with_name("libs.partial")
    shutil.rmtree(partial, ignore_errors=True)
    args = [f"{DEPENDENCY_PLUGIN}:copy-dependencies", f"-DoutputDirectory={partial}"]
    done = _mvn(args, offline=True)
    if done.returncode != 0:
        if not quiet:
            print(f"kafka-cluster: fetching Kafka {kafka_version()}'s jars from Maven Central "
                  "(once, about 30 s)", file=sys.stderr)
        done = _mvn(args, offline=False)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()
        if NETWORK_ERRORS.search(output):
            raise MavenUnreachable(
                f"Maven Central is unreachable and Kafka {kafka_version()}'s jars are not cached "
                f"in {libs}: connect once (or copy that directory from a machine that has it)")
        last = next((line for line in reversed(output.splitlines()) if "ERROR" in line),
                    output.splitlines()[-1] if output else "no output")
        raise ClusterError(f"mvn could not resolve {POM}: {last.strip()[:300]}")
    (partial / "agent").mkdir()
    for agent in partial.glob(f"{JMX_AGENT}-*.jar"):
        agent.rename(partial / "agent" / agent.name)
    jars = {str(p.relative_to(partial)): p.stat().st_size
            for p in sorted(partial.glob("*.jar")) + sorted(partial.glob("agent/*.jar"))}
    (partial / "manifest.json").write_text(json.dumps({"pom": _pom_digest(), "jars": jars},
                                                      indent=1))
    shutil.rmtree(libs, ignore_errors=True)
    partial.rename(libs)
    return libs


def java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        raise ClusterError("Java 17+ is needed to run Kafka: apt-get install openjdk-17-jre-headless")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(m.group(1)) if m else 0
    if major == 1 and m and m.group(2):
        major = int(m.group(2))
    if major < 17:
        raise ClusterError(f"Kafka {kafka_version()} needs Java 17+, {java} is {major or '?'}: "
                           "apt-get install openjdk-17-jre-headless (or set JAVA_HOME)")
    return java
