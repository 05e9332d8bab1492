"""The job on a real Spark standalone cluster (issue 26): a master and two
1-core workers on 127.0.0.1 started from the installed pyspark
(tests/cluster.py), executors whose Python has the dependencies but not
`isr`, and the job submitted exactly as docs/streaming.md ("On a cluster")
says. Its outputs must equal `isr replay` of the same events."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import workload
from cluster import clean_env, spark_home

from workload import assert_outputs_equal_replay

pytestmark = [pytest.mark.integration, pytest.mark.cluster]
ROOT = Path(__file__).resolve().parents[2]


def config_file(tmp_path: Path, broker, name: str, limit: int = 2000,
                source: str = "python") -> Path:
    """The job's configuration for one test: topics and a query of its own,
    at most `limit` records per micro-batch; no metrics endpoint (its port is
    one for the whole machine, and two of these jobs run at once)."""
    path = workload.job_config(tmp_path, broker, name, f"{name}.in", limit=limit, source=source)
    with open(path, "a") as f:
        f.write("[metrics]\nenabled = false\n")
    return path


def submit_env(driver_python: Path, executor_python: Path, env: dict | None = None) -> dict:
    """A clean environment: nothing puts `isr` on a path but what the command ships."""
    return {**clean_env(PYSPARK_PYTHON=str(executor_python),
                        PYSPARK_DRIVER_PYTHON=str(driver_python),
                        ISR_SPARK_LOG_LEVEL="ERROR"), **(env or {})}


def submit_command(cluster, args: list[str]) -> list[str]:
    return [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master_url,
            *cluster.conf(), *args]


def spark_submit(cluster, driver_python: Path, executor_python: Path, args: list[str],
                 cwd: Path, env: dict | None = None, timeout: float = 300):
    """spark-submit to the cluster, as a user runs it."""
    return subprocess.run(submit_command(cluster, args), cwd=cwd,
                          env=submit_env(driver_python, executor_python, env),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cluster(spark_cluster):
    """The session's standalone cluster, every worker up (the kill test takes
    one away; the next test, if any, gets it back)."""
    spark_cluster.ensure_workers()
    return spark_cluster


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """`isr replay` of the workload: what every run on the cluster must write."""
    return workload.replayed_outputs(tmp_path_factory.mktemp("replay"))


def input_topic(broker, name: str) -> None:
    broker.create_topics([f"{name}.in"], 2)
    workload.produce(broker.bootstrap, f"{name}.in", workload.lines())


def app_id(driver_log: str) -> str:
    return re.search(r"Connected to Spark cluster with app ID (app-[\d-]+)", driver_log).group(1)


def state_partitions_by_executor(cluster, app: str) -> dict[str, set[int]]:
    """The state store partitions (buckets) each executor of the application
    loaded, from the executors' own logs (work/APP/EXECUTOR/stderr)."""
    found: dict[str, set[int]] = {}
    for log in cluster.base.glob(f"work*/{app}/*/stderr"):
        parts = {int(m) for m in re.findall(r"StateStoreId\[ operatorId=\d+, partitionId=(\d+)",
                                            log.read_text(errors="replace"))}
        if parts:
            found[log.parent.name] = parts
    return found


def documented_commands(block: int) -> list[str]:
    """The commands of the `block`th shell block of docs/streaming.md's "On a
    cluster" section, continuation lines joined."""
    text = (ROOT / "docs/streaming.md").read_text()
    section = text.split("### On a cluster", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    return [c.strip() for c in blocks[block].replace("\\\n", " ").splitlines() if c.strip()]


def checkout_copy(workdir: Path) -> Path:
    """A copy of the repository, as a user's checkout."""
    shutil.copytree(ROOT, workdir, ignore=shutil.ignore_patterns(
        ".git", ".venv", "tests", "bench", "dist", "build", "*.egg-info", "__pycache__",
        "tmp"),  # tmp/: the test and demo clusters' data (logs of hundreds of MB)
        dirs_exist_ok=True)
    return workdir


def documented_workdir(workdir: Path, broker, name: str, wheel: Path) -> Path:
    """A user's checkout with the test's isr.toml and the wheel the documented
    build made (dist/)."""
    checkout_copy(workdir)
    shutil.copytree(wheel.parent, workdir / "dist", dirs_exist_ok=True)
    config_file(workdir, broker, name).rename(workdir / "isr.toml")
    return workdir


def run_commands(cluster, commands: list[str], workdir: Path, python: Path):
    """Run documented commands as a user would (nothing on the path but what
    they install); spark-defaults.conf pins the test cluster's ports."""
    conf_dir = workdir / "spark-conf"
    conf_dir.mkdir(exist_ok=True)
    (conf_dir / "spark-defaults.conf").write_text(
        "".join(c.replace("=", " ", 1) + "\n" for c in cluster.conf()[1::2]))
    env = clean_env(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python),
                    ISR_SPARK_LOG_LEVEL="ERROR", SPARK_MASTER=cluster.master_url,
                    SPARK_CONF_DIR=str(conf_dir),
                    PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    last = None
    for command in commands:
        last = subprocess.run(["bash", "-c", command], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=600)
        assert last.returncode == 0, f"{command}\n{last.stderr[-3000:]}\n{last.stdout[-2000:]}"
    return last


@pytest.fixture(scope="session")
def documented_build(tmp_path_factory):
    """The documented build command (the first of the wheel's block), started
    in a user's checkout before the cluster (the first test asks for it
    first: pip builds while the master's and workers' JVMs start). Gives a
    function that waits for it and returns the wheel."""
    build = documented_commands(0)[0]
    assert build == "pip wheel --no-deps . -w dist", build
    workdir = checkout_copy(tmp_path_factory.mktemp("build") / "repo")
    log = workdir.parent / "build.log"
    env = clean_env(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", "-c", build], cwd=workdir, env=env, stdout=out,
                                stderr=subprocess.STDOUT)

    def wheel() -> Path:
        assert proc.wait(timeout=600) == 0, f"{build}\n{log.read_text()[-3000:]}"
        (path,) = (workdir / "dist").glob("isr_monitor-*.whl")
        return path

    yield wheel
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def documented_wheel(documented_build) -> Path:
    """The wheel the documented build made: shipped by every test."""
    return documented_build()


def test_the_wheel_shipped_with_py_files_runs_on_executors_without_isr(
        documented_build, cluster, python_without_isr, broker, documented_wheel, replayed,
        tmp_path):
    name = f"cl{uuid.uuid4().hex[:6]}"
    input_topic(broker, name)
    build, *submit = documented_commands(0)  # the build: documented_wheel
    assert "--py-files dist/isr_monitor-0.1.0-py3-none-any.whl" in submit[-1]
    workdir = documented_workdir(tmp_path / "repo", broker, name, documented_wheel)
    out = run_commands(cluster, submit, workdir, python_without_isr)
    assert_outputs_equal_replay(broker, name, replayed)
    # The end-of-run summary, as `isr replay` prints it (spark-submit sends
    # the Python driver's stdout and stderr to its stdout).
    assert "ISR decisions by policy" in out.stdout
    shrinks = sum(1 for c in replayed["isr_change"] if c["action"] == "shrink"
                  and c["cause"] == "leader")
    assert re.search(rf"kafka\s+{shrinks}\s+0\s+1\s+4\s", out.stdout), out.stdout
    read = len(workload.lines())
    assert f"{read} events read, {read - 3} accepted" in out.stdout, out.stdout
    # Both buckets' state, on both executors.
    by_executor = state_partitions_by_executor(cluster, app_id(out.stderr))
    assert len(by_executor) == 2, by_executor
    assert set().union(*by_executor.values()) == {0, 1}


def project_dependencies() -> list[str]:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


@pytest.fixture(scope="module")
def unshipped_submit(spark_cluster, python_without_isr, broker, tmp_path_factory):
    """A submit that ships nothing to executors without `isr`, started in the
    background on one core (spark.cores.max=1): the test that asks for it
    first (the packed environment's) runs its own submit beside it, on the
    other worker, instead of after it; the drivers' start and planning, one
    core's work each, overlap. Gives a function that waits for its end:
    (exit code, stdout, stderr)."""
    tmp = tmp_path_factory.mktemp("unshipped")
    name = f"cl{uuid.uuid4().hex[:6]}"
    input_topic(broker, name)
    config = config_file(tmp, broker, name)
    # The driver has the package (this checkout), the executors have not.
    cmd = submit_command(spark_cluster, ["--conf", "spark.cores.max=1",
                                         str(ROOT / "jobs/isr_monitor.py"), "--config",
                                         str(config), "--available-now"])
    env = submit_env(Path(sys.executable), python_without_isr, {"PYTHONPATH": str(ROOT)})
    with open(tmp / "stdout", "w") as out, open(tmp / "stderr", "w") as err:
        job = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=out, stderr=err,
                               start_new_session=True)

    def result() -> tuple[int, str, str]:
        code = job.wait(timeout=400)
        return code, (tmp / "stdout").read_text(), (tmp / "stderr").read_text()

    yield result
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()


def test_a_packed_environment_ships_the_dependencies(
        unshipped_submit, cluster, broker, documented_wheel, replayed, tmp_path):
    name = f"cl{uuid.uuid4().hex[:6]}"
    input_topic(broker, name)
    # The nodes' Python has nothing: the base interpreter without packages.
    bare = Path(sys._base_executable)
    commands = documented_commands(1)
    build, submit = commands[:4], commands[4:]
    assert build[-1].startswith("env/bin/venv-pack") and "--archives env.tar.gz#env" in submit[0]
    workdir = documented_workdir(tmp_path / "repo", broker, name, documented_wheel)
    # The environment depends on the dependencies only: built by the
    # documented commands once per set of them, then kept.
    key = hashlib.sha256(json.dumps([build, project_dependencies(), sys.version]).encode())
    cache = Path(os.environ.get("ISR_CACHE", Path.home() / ".cache" / "isr-monitor"))
    packed = cache / f"packed-env-{key.hexdigest()[:16]}"
    if not (packed / ".complete").exists():
        shutil.rmtree(packed, ignore_errors=True)
        packed.mkdir(parents=True)
        shutil.copytree(workdir / "dist", packed / "dist")
        run_commands(cluster, build, packed, bare)
        (packed / ".complete").touch()
    for made in ("env", "env.tar.gz"):
        (workdir / made).symlink_to(packed / made)
    run_commands(cluster, submit, workdir, bare)
    assert_outputs_equal_replay(broker, name, replayed)


def test_a_submit_whose_executors_cannot_import_isr_ends_in_one_line(unshipped_submit):
    code, stdout, stderr = unshipped_submit()
    assert code == 1, stderr[-4000:]
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("isr_monitor: the job stopped: the executors cannot import 'isr': "
                           "ship the package with spark-submit --py-files"), stderr[-3000:]
    printed = stdout + stderr
    assert "Traceback" not in printed and "Py4J" not in printed, printed[-3000:]


@pytest.mark.kafka
def test_sparks_kafka_source_on_the_cluster_equals_replay(
        cluster, python_without_isr, kafka, spark_kafka_jars, documented_wheel, replayed,
        tmp_path):
    """Spark's own Kafka source (input.source = "kafka") on the executors, its
    jars only from --jars (the job's own cache lookup finds nothing), reading
    the real Kafka cluster: the outputs are exactly `isr replay`'s."""
    from isr.kafka.client import ensure_topics
    from isr.stream.connector import missing_message

    assert spark_kafka_jars, missing_message()
    name = f"cl{uuid.uuid4().hex[:6]}"
    ensure_topics({"bootstrap.servers": kafka.bootstrap}, [f"{name}.in"], 2, 3)
    workload.produce(kafka.bootstrap, f"{name}.in", workload.lines())
    config = config_file(tmp_path, kafka, name, source="kafka")
    out = spark_submit(cluster, python_without_isr, python_without_isr,
                       ["--jars", ",".join(spark_kafka_jars), "--py-files", str(documented_wheel),
                        str(ROOT / "jobs/isr_monitor.py"), "--config", str(config),
                        "--available-now"], cwd=tmp_path,
                       env={"ISR_CACHE": str(tmp_path / "no-cache")}, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:] + out.stdout[-2000:]
    assert_outputs_equal_replay(kafka, name, replayed)
    by_executor = state_partitions_by_executor(cluster, app_id(out.stderr))
    assert set().union(*by_executor.values()) == {0, 1}, by_executor


def submit_in_background(cluster, python: Path, wheel: Path, config: Path, log: Path):
    env = clean_env(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python),
                    ISR_SPARK_LOG_LEVEL="ERROR")
    with open(log, "a") as out:
        return subprocess.Popen([str(spark_home() / "bin" / "spark-submit"), "--master",
                                 cluster.master_url, *cluster.conf(), "--py-files", str(wheel),
                                 str(ROOT / "jobs/isr_monitor.py"), "--config", str(config),
                                 "--available-now"], cwd=config.parent, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def wait_for_commits(commits: Path, n: int, job: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 240
    while commits_of(commits) < n:  # n micro-batches done
        assert job.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


def small_batches(tmp_path: Path, broker, name: str) -> Path:
    """4 micro-batches of the workload's 1061 records: one before the worker
    dies, one after, then the driver dies, and two more after its restart."""
    return config_file(tmp_path, broker, name, limit=300)


def small_batches_job(cluster, python: Path, broker, wheel: Path, tmp_path: Path):
    """A fresh input topic and the job submitted on it in small batches, in
    the background: (name, config, checkpoint commits dir, driver log, job)."""
    name = f"cl{uuid.uuid4().hex[:6]}"
    input_topic(broker, name)
    config = small_batches(tmp_path, broker, name)
    log = tmp_path / "driver.log"
    job = submit_in_background(cluster, python, wheel, config, log)
    return name, config, tmp_path / name / "checkpoint" / "commits", log, job


def commits_of(commits: Path) -> int:
    return len(list(commits.glob("[0-9]*")))


def test_a_worker_then_the_driver_killed_mid_stream_change_nothing_in_the_outputs(
        cluster, python_without_isr, broker, documented_wheel, replayed, tmp_path):
    """Both faults of one run (one submit fewer than a run each):
    - executor lost: a worker killed after a micro-batch; its tasks and its
      buckets' state move to the other executor (the state is reloaded from
      the checkpoint), and the job goes on (a batch more commits);
    - then the driver (spark-submit's JVM and its Python) killed without a
      word, and submitted again: it continues from the checkpoint exactly once.
    The outputs are still exactly `isr replay`'s: nothing lost, nothing twice.
    The restarted driver runs on the one worker left (the `cluster` fixture
    puts a new one in its place for a test that follows)."""
    name, config, commits, log, job = small_batches_job(
        cluster, python_without_isr, broker, documented_wheel, tmp_path)
    victim = cluster.workers[-1]
    try:
        wait_for_commits(commits, 1, job, log)
        victim.kill()
        at_kill = commits_of(commits)
        wait_for_commits(commits, at_kill + 1, job, log)  # it went on with one executor
    finally:  # the driver dies without a word
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    # The job's log names the executor that was lost; the job went on.
    assert re.search(r"isr_monitor: executor \d+ lost \(its worker or process died\); Spark runs "
                     r"its tasks again on the other executors", log.read_text()), \
        log.read_text()[-3000:]
    done = commits_of(commits)
    again = submit_in_background(cluster, python_without_isr, documented_wheel, config, log)
    assert again.wait(timeout=400) == 0, log.read_text()[-4000:]
    assert commits_of(commits) > done >= 2
    assert_outputs_equal_replay(broker, name, replayed)  # nothing lost, nothing twice
