"""The reasons the streaming job stops, each already phrased as one line for
the operator (`isr run` prints it and nothing else; details go to a file)."""

from __future__ import annotations

import re


class JobError(RuntimeError):
    """A reason the job cannot go on."""


class KafkaUnavailable(JobError):
    """Kafka did not answer for longer than kafka.outage_timeout_s."""


class DataLossError(JobError):
    """Input offsets are gone (a topic created again, retention ahead of the job)."""


class SinkError(JobError):
    """The output could not be written."""


class CheckpointError(JobError, ValueError):
    """The checkpoint belongs to another layout or version of the job."""


_NAMES = "|".join(c.__name__ for c in (KafkaUnavailable, DataLossError, SinkError,
                                       CheckpointError))
_LINE = re.compile(rf"\b({_NAMES}): ([^\n]+)")


# Executors without the package: Python's own words in the worker's traceback.
_NOT_SHIPPED = re.compile(r"No module named '(isr|pydantic|msgspec|orjson|confluent_kafka|"
                          r"pandas|pyarrow)[.']")
SHIP_HINT = ("the executors cannot import {module!r}: ship the package with spark-submit "
             "--py-files isr_monitor-<version>-py3-none-any.whl (the job puts it on the "
             "executors' path), and its dependencies with a packed environment "
             "(--archives env.tar.gz#env; docs/streaming.md, \"On a cluster\")")

# Spark's Kafka source (the Java client) refused by the broker's SASL listener:
# clients/src/main/java/org/apache/kafka/common/errors/SaslAuthenticationException.java.
_SASL_REFUSED = re.compile(r"org\.apache\.kafka\.common\.errors\.SaslAuthenticationException: "
                           r"([^\n]+)")
SASL_HINT = ("Kafka refused the SASL login of Spark's Kafka source ({why}): check "
             "kafka.sasl_mechanism, kafka.sasl_username and the password "
             "(kafka.sasl_password_env or kafka.sasl_password_file)")


def one_line_reason(text: str) -> str:
    """The job's own reason in a failure's text (a Spark exception carries the
    Python traceback of the worker or the driver callback), else its first line."""
    missing = _NOT_SHIPPED.search(text or "")
    if missing:
        return SHIP_HINT.format(module=missing.group(1))
    refused = _SASL_REFUSED.search(text or "")
    if refused:
        return SASL_HINT.format(why=refused.group(1).strip())
    found = _LINE.findall(text or "")
    if found:
        return found[-1][1].strip()
    first = next((line.strip() for line in (text or "").splitlines() if line.strip()),
                 "unknown error")
    return first[:300]
