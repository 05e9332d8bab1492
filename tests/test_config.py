"""The configuration (isr/config.py): precedence, one-line errors naming the
key, the shipped file, the alert rules' settings derived from the catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from isr.config import ConfigError, load_settings

ROOT = Path(__file__).resolve().parent.parent


def test_config_precedence_file_env_set(tmp_path, monkeypatch):
    conf = tmp_path / "isr.toml"
    conf.write_text('[monitor]\nreplica_lag_time_max_ms = 20000\npolicy = "kip16"\n')
    assert load_settings(conf).monitor.replica_lag_time_max_ms == 20000
    monkeypatch.setenv("ISR_MONITOR__REPLICA_LAG_TIME_MAX_MS", "15000")
    assert load_settings(conf).monitor.replica_lag_time_max_ms == 15000
    s = load_settings(conf, ["monitor.replica_lag_time_max_ms=10000", "monitor.policy=kafka,kip501"])
    assert s.monitor.replica_lag_time_max_ms == 10000
    assert s.monitor.policy == ["kafka", "kip501"]


@pytest.mark.parametrize("override, message", [
    ("monitor.bogus=1", "config: unknown key 'monitor.bogus'"),
    ("monitor.replica_lag_time_max_ms=0", "config: monitor.replica_lag_time_max_ms: Input should be greater than 0 (got 0)"),
    ("monitor.policy=kafka,kafka", "config: monitor.policy: policy ['kafka', 'kafka'] names a policy twice"),
    ("monitor.propagation=etcd", "config: monitor.propagation: Input should be 'kraft' or 'zk' (got 'etcd')"),
    ("policy=kafka", "--set 'policy=kafka': the key needs a section, e.g. monitor.policy"),
])
def test_bad_settings_fail_with_one_line_naming_the_key(override, message):
    with pytest.raises(ConfigError) as exc:
        load_settings(ROOT / "conf/isr.toml", [override])
    assert str(exc.value) == message


def test_shipped_config_is_valid_and_matches_the_defaults():
    from isr.config import Settings
    assert load_settings(ROOT / "conf/isr.toml") == Settings()


def test_state_store_provider_is_a_choice():
    from isr.stream.job import STATE_STORE_PROVIDERS

    for name in ("rocksdb", "hdfs"):
        chosen = load_settings(ROOT / "conf/isr.toml", [f"stream.state_store={name}"])
        assert STATE_STORE_PROVIDERS[chosen.stream.state_store].endswith("StateStoreProvider")
    with pytest.raises(ConfigError, match="stream.state_store"):
        load_settings(ROOT / "conf/isr.toml", ["stream.state_store=memory"])


def test_a_property_map_key_is_set_with_its_dots_and_two_sets_add_up(tmp_path):
    """Spark's and Kafka clients' property names hold dots: `--set
    stream.spark_conf.spark.ui.enabled=false` sets that one key (its value
    as text), and a second --set of the same map adds to it, as over the
    file, instead of replacing what the first gave."""
    conf = tmp_path / "isr.toml"
    conf.write_text('[stream]\nspark_conf = { "spark.driver.memory" = "2g" }\n')
    s = load_settings(conf, ["stream.spark_conf.spark.ui.enabled=false",
                             'stream.spark_conf={"spark.sql.shuffle.partitions"="4"}',
                             "kafka.properties.fetch.max.bytes=1048576",
                             'kafka.java_properties."max.poll.records"=500'])
    assert s.stream.spark_conf == {"spark.driver.memory": "2g", "spark.ui.enabled": "false",
                                   "spark.sql.shuffle.partitions": "4"}
    assert s.kafka.properties == {"fetch.max.bytes": "1048576"}
    assert s.kafka.java_properties == {"max.poll.records": "500"}
