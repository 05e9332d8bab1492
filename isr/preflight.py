"""What can be checked before Spark starts, each failure one ConfigError line:
files to read and places to write, the Kafka client settings, and (for the
streaming job) that Kafka answers and the input topics exist."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from isr.config import ConfigError, Settings


def readable_inputs(paths: Iterable[str], what: str = "an event file") -> None:
    """Files to read (`-`: stdin). The message names the file; the CLI
    prefixes the command the user ran."""
    for name in paths:
        if name == "-":
            continue
        p = Path(name)
        if p.is_dir():
            raise ConfigError(f"{name} is a directory, not {what}")
        if not p.exists():
            raise ConfigError(f"{name}: no such file")
        if not os.access(p, os.R_OK):
            raise ConfigError(f"{name}: not readable")


def writable_file(name: str | None, what: str) -> None:
    """A file the command will write (None or "-": stdout)."""
    if name in (None, "-"):
        return
    p = Path(name)
    if p.is_dir():
        raise ConfigError(f"{what}: {name} is a directory")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"{what}: {name}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise ConfigError(f"{what}: {name}: not writable")


def writable_dir(name: str, what: str) -> None:
    """A directory the command will create or write into (local paths only;
    hdfs://, s3a:// and the like are Spark's to check)."""
    if "://" in name and not name.startswith("file://"):
        return
    p = Path(name.removeprefix("file://"))
    for ancestor in [p, *p.parents]:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise ConfigError(f"{what}: {name}: {ancestor} is a file, not a directory")
            if not os.access(ancestor, os.W_OK):
                raise ConfigError(f"{what}: {name}: {ancestor} is not writable")
            return


def kafka_client_config(settings: Settings) -> dict[str, str]:
    """The librdkafka properties, checked by librdkafka itself (offline)."""
    from confluent_kafka import KafkaException, Producer

    from isr.kafka.client import client_config

    conf = client_config(settings.kafka)
    try:
        Producer({**conf, "log_level": 0})
    except KafkaException as exc:
        raise ConfigError(f"kafka: {exc.args[0].str()} (kafka.properties are librdkafka's "
                          "names)") from None
    return conf


def kafka_reachable(settings: Settings) -> dict[str, str]:
    """The client config, once Kafka has answered within kafka.connect_timeout_s."""
    from confluent_kafka import KafkaError, KafkaException

    from isr.kafka.client import admin

    from isr.signals import run_interruptibly

    conf = kafka_client_config(settings)
    timeout = settings.kafka.connect_timeout_s
    errors: list[KafkaError] = []  # a refused SASL login comes only as an error event
    client = admin({**conf, "error_cb": errors.append})
    try:
        # librdkafka's wait does not look at signals: waited for in a thread
        run_interruptibly(lambda: client.list_topics(timeout=timeout), timeout)
    except (KafkaException, TimeoutError) as exc:
        client.poll(0.5)  # serves the error events
        refused = next((e for e in errors if e.code() == KafkaError._AUTHENTICATION), None)
        if refused is not None:
            raise ConfigError(f"kafka: {settings.kafka.bootstrap_servers} refused the login "
                              f"({refused.str()}); check kafka.sasl_mechanism, "
                              "kafka.sasl_username and the password (kafka.sasl_password_env "
                              "or kafka.sasl_password_file)") from None
        why = exc.args[0].str() if isinstance(exc, KafkaException) else str(exc)
        raise ConfigError(f"kafka: no answer from {settings.kafka.bootstrap_servers} within "
                          f"{timeout:g} s ({why}); check "
                          "kafka.bootstrap_servers and the security settings") from None
    return conf


def streaming_job(settings: Settings) -> dict[str, str]:
    """Everything `isr run` can check before Spark starts; the client config."""
    writable_dir(settings.stream.checkpoint_location, "stream.checkpoint_location")
    if settings.delivery.webhooks:
        writable_dir(settings.delivery.state_dir, "delivery.state_dir")
    conf = kafka_reachable(settings)
    if settings.input.topic_pattern is None:
        from isr.kafka.client import admin
        from isr.signals import run_interruptibly

        timeout = settings.kafka.connect_timeout_s
        existing = set(run_interruptibly(lambda: admin(conf).list_topics(timeout=timeout),
                                         timeout).topics)
        missing = [t for t in settings.input.topics if t not in existing]
        if missing:
            raise ConfigError(f"input.topics: {', '.join(missing)} does not exist on "
                              f"{settings.kafka.bootstrap_servers}; create it, or set "
                              "input.topic_pattern to read topics as they appear")
    return conf
