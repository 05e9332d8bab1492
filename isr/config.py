"""Configuration (README, "Configuration"): TOML file < environment
(ISR_<SECTION>__<KEY>) < --set.

Everything is validated before any work starts; an unknown key or a bad value
becomes one `ConfigError` line that names the key.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, Optional, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationError,
                      create_model, field_validator, model_validator)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from isr.contract.catalog import CATALOG, RULE_NAMES, THRESHOLDS
from isr.contract.policies import Policy

PolicyName = Policy
DEFAULT_CONFIG = Path("conf/isr.toml")

PositiveMs = Annotated[int, Field(gt=0)]


class ConfigError(Exception):
    """A configuration problem, already phrased as one line for the operator."""


def _regex(value: Optional[str]) -> Optional[str]:
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"{value!r} is not a regular expression: {exc}") from None
    return value


Regex = Annotated[str, AfterValidator(_regex)]


def _matching(pattern: str, what: str):
    compiled = re.compile(pattern, re.IGNORECASE)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"{value!r} is not {what}")
        return value
    return AfterValidator(check)


# Kafka's legal topic names (Topic.java: [a-zA-Z0-9._-], at most 249).
TopicName = Annotated[str, _matching(r"[A-Za-z0-9._-]{1,249}", "a Kafka topic name (letters, "
                                     "digits, '.', '_' and '-', at most 249)")]
# What Spark's Trigger.ProcessingTime reads (IntervalUtils.stringToInterval,
# tried on Spark 4.x): a number, a space and a unit in words; a fraction only
# of seconds ("soon-ish", "1second" and "1.5 minutes" once stopped a job
# that had started, with Spark's traceback).
Interval = Annotated[str, _matching(r"\s*(\d+\s+(milliseconds?|seconds?|minutes?|hours?|days?)"
                                    r"|\d+\.\d+\s+seconds?)\s*",
                                    "an interval Spark reads, e.g. '1 second', '0.5 seconds' or "
                                    "'500 milliseconds'")]
SparkMaster = Annotated[str, _matching(r"local(\[(\d+|\*)(,\d+)?\])?|spark://\S+|yarn|k8s://\S+",
                                       "a Spark master (local, local[N], local[*], "
                                       "spark://host:port, yarn, k8s://...)")]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TopicSettings(_Section):
    """Per-topic overrides, `[monitor.topics."<name>"]`."""

    min_insync_replicas: Optional[Annotated[int, Field(ge=1)]] = None


Severity = Literal["critical", "warning", "info"]
NonNegMs = Annotated[int, Field(ge=0)]


# One rule's settings (contract/catalog.py declares the rules): whether it runs, its
# severity, how long its condition must hold before it fires, and every
# rule's thresholds (a rule reads only its own).
_THRESHOLD_FIELDS: dict[str, Any] = {name: (t.type, t.default)
                                     for name, (_rule, t) in THRESHOLDS.items()}
AlertRule: type[BaseModel] = create_model(
    "AlertRule", __base__=_Section,
    enabled=(bool, True), severity=(Severity, "warning"), for_ms=(NonNegMs, 0),
    **_THRESHOLD_FIELDS)
RULE_DEFAULTS: dict[str, BaseModel] = {
    r.name: AlertRule(severity=r.severity, for_ms=r.for_ms) for r in CATALOG}
RuleName = Literal[RULE_NAMES]  # type: ignore[valid-type]
# Changes to a rule's defaults: the same fields, each optional.
_PATCH_FIELDS: dict[str, Any] = {
    name: (Optional[f.annotation], None) if not f.metadata else
    (Optional[Annotated[(f.annotation, *f.metadata)]], None)
    for name, f in AlertRule.model_fields.items()}
AlertRulePatch = create_model("AlertRulePatch", __base__=_Section, **_PATCH_FIELDS)


def _check_thresholds(rule: str, patch: BaseModel, where: str) -> None:
    for name in patch.model_dump(exclude_none=True):
        owner = THRESHOLDS.get(name, (rule, None))[0]
        if owner != rule:
            raise ValueError(f"{where}.{rule}: {name} is a threshold of {owner}, not of {rule}")


class AlertSettings(_Section):
    """The alert rules (docs/alerts.md), evaluated in event time by the engine. `rules` changes a
    rule's defaults; `topics."<name>"` changes them again for one topic."""

    enabled: bool = True
    # A firing alert is sent again after this much event time (Alertmanager's default: 4 h).
    repeat_interval_ms: PositiveMs = 4 * 3600 * 1000
    # (A model made at import, by create_model: to mypy, a variable.)
    rules: dict[RuleName, AlertRulePatch] = {}  # type: ignore[valid-type]
    topics: dict[str, dict[RuleName, AlertRulePatch]] = {}  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _own_thresholds(self):
        for rule, patch in self.rules.items():
            _check_thresholds(rule, patch, "rules")
        for topic, patches in self.topics.items():
            for rule, patch in patches.items():
                _check_thresholds(rule, patch, f'topics."{topic}"')
        return self

    def rule(self, name: str, topic: str):
        rule = RULE_DEFAULTS[name]
        for patch in (self.rules.get(name), self.topics.get(topic, {}).get(name)):
            if patch is not None:
                rule = rule.model_copy(update=patch.model_dump(exclude_none=True))
        return rule


class MonitorSettings(_Section):
    # NoDecode: an env var holds "kafka,kip16", not JSON.
    policy: Annotated[list[PolicyName], NoDecode] = ["kafka"]
    replica_lag_time_max_ms: PositiveMs = 30000
    isr_expiration_interval_ms: Optional[PositiveMs] = None
    replica_lag_max_messages: Annotated[int, Field(ge=0)] = 4000
    min_insync_replicas: Annotated[int, Field(ge=1)] = 1
    propagation: Literal["kraft", "zk"] = "kraft"
    allowed_lateness_ms: Annotated[int, Field(ge=0)] = 5000
    # An event this far ahead of the stream's time is dead-lettered as
    # `future` instead of moving the watermark (docs/reliability.md).
    max_future_ms: PositiveMs = 3_600_000
    topics: dict[str, TopicSettings] = {}
    alerts: AlertSettings = AlertSettings()

    @field_validator("policy", mode="before")
    @classmethod
    def _split_policy_list(cls, value: Any) -> Any:
        # "kafka,kip16" on the command line or in an env var means a list.
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        return value

    @field_validator("policy")
    @classmethod
    def _unique_policies(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one policy is needed")
        if len(set(value)) != len(value):
            raise ValueError(f"policy {value} names a policy twice")
        return value

    def min_isr_for(self, topic: str) -> int:
        override = self.topics.get(topic)
        if override is not None and override.min_insync_replicas is not None:
            return override.min_insync_replicas
        return self.min_insync_replicas


class KafkaSettings(_Section):
    """Connection to the Kafka cluster holding the input and output topics."""

    bootstrap_servers: Annotated[str, _matching(r"\S+", "a list of host:port")] = (
        "127.0.0.1:9092")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Optional[str] = None
    sasl_username: Optional[str] = None
    # Secrets never come from the TOML: the password is read from this
    # environment variable, or from this file.
    sasl_password_env: str = "ISR_KAFKA_SASL_PASSWORD"
    sasl_password_file: Optional[str] = None
    ssl_ca_location: Optional[str] = None
    ssl_certificate_location: Optional[str] = None
    ssl_key_location: Optional[str] = None
    # Any other client property of the monitor's own clients (librdkafka's
    # names), and of Spark's built-in connector (the Java client's names).
    properties: dict[str, str] = {}
    java_properties: dict[str, str] = {}
    # How long the job waits for a Kafka that does not answer (a broker
    # restart) before it stops with one line.
    outage_timeout_s: Annotated[float, Field(gt=0)] = 300.0
    # At start: how long to wait for a first answer before saying Kafka is
    # not there (a wrong address fails fast, in one line).
    connect_timeout_s: Annotated[float, Field(gt=0)] = 10.0

    def sasl_password(self) -> Optional[str]:
        if self.sasl_password_file:
            try:
                return Path(self.sasl_password_file).read_text().strip()
            except OSError as exc:
                raise ConfigError(f"kafka.sasl_password_file: {exc}") from None
        return os.environ.get(self.sasl_password_env)


class InputSettings(_Section):
    # "python": the monitor's own streaming source (confluent-kafka, Spark's
    # Python Data Source API); "kafka": Spark's built-in connector
    # (spark-sql-kafka-0-10_2.13 at pyspark's Spark version: scripts/spark-kafka-jars).
    source: Literal["python", "kafka"] = "python"
    topics: list[TopicName] = ["isr.fetch-events"]
    # A regular expression; when set it replaces `topics`.
    topic_pattern: Optional[Regex] = None
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    # Like Spark's maxOffsetsPerTrigger: records per micro-batch, all partitions.
    max_offsets_per_trigger: Optional[Annotated[int, Field(gt=0)]] = None
    # Spark's failOnDataLoss: input offsets that are gone (a topic created
    # again, retention ahead of the job) stop the job; false reads on and
    # records the gap as a `data_loss` dead letter.
    fail_on_data_loss: bool = True
    # The longest input line `isr replay` and the taps read, like Kafka's
    # message.max.bytes: a longer one is a dead letter (its length), read in
    # pieces and never held in memory (isr/linecap.py).
    max_line_bytes: Annotated[int, Field(ge=1, le=2**31 - 1)] = 1024 * 1024

    @model_validator(mode="after")
    def _something_to_read(self):
        if not self.topics and self.topic_pattern is None:
            raise ValueError("input.topics is empty and input.topic_pattern unset: nothing "
                             "to read")
        return self


class OutputSettings(_Section):
    changes_topic: TopicName = "isr.changes"
    state_topic: TopicName = "isr.partition-state"
    dead_letter_topic: TopicName = "isr.dead-letters"
    # Every alert status change (and repeat), keyed by fingerprint.
    alerts_topic: TopicName = "isr.alerts"
    # One record per written micro-batch: what makes the sinks exactly-once.
    commit_topic: TopicName = "isr.sink-commits"
    # For the topics the job creates (existing ones are left as they are):
    # -1 takes the cluster's num.partitions / default.replication.factor.
    # State, alert and commit topics are created compacted.
    partitions: Annotated[int, Field(ge=-1, le=100_000)] = -1
    replication_factor: Annotated[int, Field(ge=-1, le=32767)] = -1
    # One partition_state per pending partition per this much event time (at
    # the partition's own instant of it: throttle.phase_of), but one at once
    # when its ISR, leader, epoch or min-ISR status changed (0: one per
    # changed partition per micro-batch).
    state_interval_ms: Annotated[int, Field(ge=0)] = 10_000
    # More places for the output records: "module:Class" each, a class with
    # the methods of isr/sinks/base.py, built with the settings.
    sinks: list[Annotated[str, _matching(r"[a-z_][\w.]*:[a-z_]\w*", "module:Class")]] = []

    @model_validator(mode="after")
    def _set_counts(self):
        if self.partitions == 0 or self.replication_factor == 0:
            raise ValueError("output.partitions and output.replication_factor are -1 (the "
                             "cluster's default) or at least 1")
        return self


class StreamSettings(_Section):
    # Used by `isr run` / `isr demo`; spark-submit's --master wins.
    master: SparkMaster = "local[2]"
    trigger_interval: Interval = "1 second"
    checkpoint_location: str = "checkpoints/isr-monitor"
    # State keys: each holds the leader models of many partitions. "auto": one
    # per core of the job (Spark's default parallelism), or what an existing
    # checkpoint was written with.
    state_buckets: Union[Literal["auto"], Annotated[int, Field(ge=1, le=4096)]] = "auto"
    # Spark's state store: "rocksdb" or "hdfs" (in-memory map + delta files).
    state_store: Literal["rocksdb", "hdfs"] = "rocksdb"
    query_name: str = "isr-monitor"
    # Any Spark settings, applied to the session (spark-submit --conf also works).
    spark_conf: dict[str, str] = {}


class Receiver(_Section):
    """One webhook. Secrets come from environment variables, never the TOML."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]
    kind: Literal["json", "alertmanager", "slack"] = "json"
    # alertmanager: the base URL + /api/v2/alerts, e.g. http://am:9093/api/v2/alerts
    url: Annotated[str, Field(pattern=r"^https?://")]
    enabled: bool = True
    headers: dict[str, str] = {}
    token_env: Optional[str] = None     # Authorization: Bearer $token_env
    hmac_key_env: Optional[str] = None  # X-ISR-Signature: sha256=HMAC(key, body)


class DeliverySettings(_Section):
    webhooks: list[Receiver] = []
    # The most one micro-batch (or replay) spends delivering; the rest waits
    # in the outbox for the next call.
    batch_budget_s: Annotated[float, Field(gt=0)] = 5.0
    request_timeout_s: Annotated[float, Field(gt=0)] = 3.0
    backoff_initial_s: Annotated[float, Field(gt=0)] = 0.2
    backoff_max_s: Annotated[float, Field(gt=0)] = 2.0
    # Alertmanager receivers: every firing alert is sent again this often (wall
    # clock), its endsAt 4 intervals ahead; keep it well inside Alertmanager's
    # resolve_timeout (5 min by default).
    alertmanager_resend_s: Annotated[float, Field(gt=0)] = 60.0
    # Outbox (undelivered alerts), ledger (delivered alert ids) and the active
    # alerts re-sent to Alertmanager live here.
    state_dir: str = "checkpoints/isr-delivery"
    generator_url: str = "http://localhost:9464/"  # Alertmanager's generatorURL

    @field_validator("webhooks")
    @classmethod
    def _unique_names(cls, value: list[Receiver]) -> list[Receiver]:
        names = [r.name for r in value]
        if len(set(names)) != len(names):
            raise ValueError(f"webhook names {names} must be unique")
        return value


class MetricsSettings(_Section):
    """The job's Prometheus endpoint (http://<address>:<port>/metrics)."""

    enabled: bool = True
    address: str = "0.0.0.0"
    port: Annotated[int, Field(ge=1, le=65535)] = 9464
    # Cardinality controls: 100 k partitions x 3 replicas is a lot of series.
    per_partition: bool = True
    per_follower: bool = True
    topics: list[Regex] = []  # regular expressions; empty = every topic
    # TLS and basic auth for the endpoint (prometheus-client's own server).
    tls_cert_file: Optional[str] = None
    tls_key_file: Optional[str] = None
    basic_auth_username: Optional[str] = None
    basic_auth_password_env: Optional[str] = None  # the password, from the environment
    # A partition whose state has not changed for this long (a deleted
    # partition) loses its per-partition series.
    series_ttl_s: Annotated[float, Field(gt=0)] = 3600.0
    # A partition whose state did not change (its sessions only fetched it:
    # no membership, offset or lag news) reaches the per-partition series
    # once per this much event time, to move its state timestamp; changed
    # partitions, and those with a follower behind, out of the ISR or not
    # fetching, every micro-batch (docs/operations.md). 0: every partition a
    # batch touched, every batch.
    refresh_interval_ms: Annotated[int, Field(ge=0)] = 30_000
    # A busy partition whose health did not change (the same leader, epoch,
    # replicas, ISR and min ISR: its offsets, lags or times since caught up
    # moved) reaches the per-partition series once per this much event
    # time, at its own phase; a change of health at once, and the cluster
    # counts stay exact (docs/operations.md). 0: every micro-batch. Applies
    # while refresh_interval_ms > 0, and at most that (a busy partition is
    # never refreshed more rarely than a quiet one).
    busy_refresh_interval_ms: Annotated[int, Field(ge=0)] = 5_000

    @model_validator(mode="after")
    def _pairs(self):
        if self.refresh_interval_ms > self.series_ttl_s * 1000:
            raise ValueError("metrics.refresh_interval_ms must not exceed metrics.series_ttl_s: "
                             "a quiet partition would lose its series between two refreshes")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("set both metrics.tls_cert_file and metrics.tls_key_file, or neither")
        if (self.basic_auth_username is None) != (self.basic_auth_password_env is None):
            raise ValueError("set both metrics.basic_auth_username and "
                             "metrics.basic_auth_password_env, or neither")
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="ISR_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    monitor: MonitorSettings = MonitorSettings()
    kafka: KafkaSettings = KafkaSettings()
    input: InputSettings = InputSettings()
    output: OutputSettings = OutputSettings()
    stream: StreamSettings = StreamSettings()
    delivery: DeliverySettings = DeliverySettings()
    metrics: MetricsSettings = MetricsSettings()


# Settings whose keys are another system's property names, dots and all
# (librdkafka's, the Java client's, Spark's): in `--set
# stream.spark_conf.spark.ui.enabled=false` what follows the map's name is
# one key, and its value is the text given (these maps hold strings).
PROPERTY_MAPS = frozenset({("kafka", "properties"), ("kafka", "java_properties"),
                           ("stream", "spark_conf")})


def parse_override(item: str) -> tuple[list[str], Any]:
    """`section.key=value` -> (["section", "key"], value). Values are TOML
    literals (`10000`, `true`, `["a","b"]`); anything else is a string.
    `section.map.some.property=value` names one key of a PROPERTY_MAPS map."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected section.key=value")
    key, raw = item.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if len(path) < 2:
        raise ConfigError(f"--set {item!r}: the key needs a section, e.g. monitor.policy")
    try:
        value = tomllib.loads(f"x = {raw}")["x"]
    except tomllib.TOMLDecodeError:
        value = raw
    if tuple(path[:2]) in PROPERTY_MAPS and len(path) > 2:
        path = [*path[:2], ".".join(path[2:]).strip('"')]  # TOML's quoted form too
        value = value if isinstance(value, str) else raw.strip()
    return path, value


def _nest(overrides: Iterable[str]) -> dict[str, Any]:
    """The overrides as a settings tree; two that give a table (or keys) of
    the same map add up, the later winning key by key, as over the file."""
    tree: dict[str, Any] = {}
    for item in overrides:
        path, value = parse_override(item)
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {part} is not a section")
        before = node.get(path[-1])
        if isinstance(before, dict) and isinstance(value, dict):
            value = _merged(before, value)
        node[path[-1]] = value
    return tree


def flat_keys(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(section.key, value) of a settings tree, in its order."""
    out = []
    for key, value in tree.items():
        if isinstance(value, dict):
            out.extend(flat_keys(value, f"{prefix}{key}."))
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _merged(under: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(under)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _describe(exc: ValidationError, origin: str) -> str:
    err = exc.errors(include_url=False)[0]
    key = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return f"{origin}: unknown key '{key}'"
    # Our own validators already name the value; pydantic's type errors do not.
    shows_value = "input" in err and err["type"] not in ("missing", "value_error")
    got = f" (got {err['input']!r})" if shows_value else ""
    return f"{origin}: {key}: {msg}{got}"


def resolve_config_path(path: str | os.PathLike | None) -> Optional[Path]:
    """The explicit path, else $ISR_CONFIG, else conf/isr.toml if present."""
    if path is not None:
        p = Path(path)
        if p.is_dir():
            raise ConfigError(f"config file {p} is a directory, not a TOML file")
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist")
        return p
    env = os.environ.get("ISR_CONFIG")
    if env:
        try:
            return resolve_config_path(env)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (from $ISR_CONFIG)") from None
    return DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None


def load_settings(
    path: str | os.PathLike | None = None, overrides: Iterable[str] = (),
    base: Optional[dict[str, Any]] = None,
) -> Settings:
    """Load and validate the effective settings, or raise one-line ConfigError.
    `base`: settings under the overrides and over the file and the environment
    (an example's own settings, `isr replay`)."""
    toml_path = resolve_config_path(path)
    origin = "config"
    if toml_path is not None:
        try:
            tomllib.loads(toml_path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{toml_path}: not valid TOML: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{toml_path}: not UTF-8 text (byte {exc.start}); TOML files are "
                              "UTF-8") from None
        except OSError as exc:
            raise ConfigError(f"{toml_path}: {exc.strerror}") from None

    class _FromFile(Settings):
        @classmethod
        def settings_customise_sources(cls, settings_cls, init_settings, env_settings,
                                       dotenv_settings, file_secret_settings):
            sources = [init_settings, env_settings]
            if toml_path is not None:
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_path))
            return tuple(sources)

    try:
        loaded = _FromFile(**_merged(base or {}, _nest(overrides)))
    except ValidationError as exc:
        raise ConfigError(_describe(exc, origin)) from None
    except SettingsError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    return Settings.model_validate(loaded.model_dump())


# Environment variables of ours that are no setting.
OPERATIONAL_ENV = frozenset({
    "ISR_CONFIG", "ISR_SPARK_LOG_LEVEL", "ISR_SPARK_UI", "ISR_TANSU_BIN", "ISR_SPARK_JAVA_OPTIONS",
    "ISR_CLASS_ARCHIVE",
    "ISR_CACHE", "ISR_SCENARIO_DIR", "ISR_STATE_CACHE_ENTRIES", "ISR_STATE_CACHE_LOG",
    "ISR_ENGINE_PROCESS", "ISR_ENGINE_IDLE_S",
    # scripts/kafka-cluster (isr/kafka/cluster.py, jars.py)
    "ISR_KAFKA_DIR", "ISR_KAFKA_CACHE", "ISR_KAFKA_PORT_BASE", "ISR_KAFKA_BROKER_HEAP",
    "ISR_KAFKA_CONTROLLER_HEAP", "ISR_KAFKA_JMX_EXPORTER", "ISR_KAFKA_MVN_ARGS",
    "ISR_KAFKA_REPLICA_LAG_MS", "ISR_KAFKA_SESSION_TIMEOUT_MS",
    # the test suite's ports and directories (tests/conftest.py), set around the commands it runs
    "ISR_KAFKA_TEST_DIR", "ISR_KAFKA_TEST_PORT_BASE", "ISR_TEST_DEMO_PORT",
    "ISR_TEST_DEMO_KAFKA_PORT", "ISR_SESSION_EXAMPLES"})


def _env_names(model: type[BaseModel], prefix: str) -> set[str]:
    names = set()
    for field, info in model.model_fields.items():
        name = f"{prefix}{field.upper()}"
        names.add(name)
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            names |= _env_names(info.annotation, name + "__")
    return names


def secret_env_names(settings: Settings) -> set[str]:
    """The environment variables the settings read secrets from."""
    names = {settings.kafka.sasl_password_env}
    for r in settings.delivery.webhooks:
        names |= {n for n in (r.token_env, r.hmac_key_env) if n}
    if settings.metrics.basic_auth_password_env:
        names.add(settings.metrics.basic_auth_password_env)
    return names


def unknown_env_vars(settings: Settings, environ=None) -> list[str]:
    """One warning line per ISR_* variable that sets nothing (a typo is
    otherwise ignored in silence), with the closest setting's name."""
    environ = os.environ if environ is None else environ
    known = _env_names(Settings, "ISR_")
    accepted = known | OPERATIONAL_ENV | secret_env_names(settings)
    lines = []
    for name in sorted(n for n in environ if n.upper().startswith("ISR_")):
        upper = name.upper()
        if upper in accepted or any(upper.startswith(k + "__") for k in known):
            continue
        guess = difflib.get_close_matches(upper, sorted(known | OPERATIONAL_ENV), n=1,
                                          cutoff=0.75)
        hint = f"; did you mean {guess[0]}?" if guess else ""
        lines.append(f"isr: warning: environment variable {name} matches no setting{hint}")
    return lines


# Keys whose values are secrets wherever settings are shown; `_env`, `_file`
# and `_location` name where a secret is, not the secret.
_SECRET = re.compile(r"password|secret|token|key|authorization", re.IGNORECASE)
_REFERENCE = re.compile(r"(_env|_file|_location)$")


def redacted(value: Any, key: str = "") -> Any:
    """Settings (as plain data) with every secret-looking value masked."""
    if isinstance(value, dict):
        return {k: redacted(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v, key) for v in value]
    if value and _SECRET.search(key) and not _REFERENCE.search(key):
        return "***"
    return value
