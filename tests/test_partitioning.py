"""Bucket labels (isr/stream/partitioning.py): Spark's Murmur3 hash of an int
in Python, and the labels that put bucket i in shuffle partition i. The
integration test test_every_bucket_gets_its_own_stateful_task checks the same
against Spark itself; these pin the values so a change shows without Spark."""

from __future__ import annotations

import pytest

from isr.stream.partitioning import bucket_labels, shuffle_partition, spark_hash_int


def test_spark_hash_of_small_ints():
    # Values of Spark SQL's hash(0), hash(1), hash(42), hash(-1) (seed 42).
    assert [spark_hash_int(v) for v in (0, 1, 42, -1)] == [
        933211791, -559580957, 29417773, -1604776387]


@pytest.mark.parametrize("buckets, labels", [(1, (0,)), (2, (2, 0)), (4, (12, 6, 2, 0))])
def test_labels_for_common_bucket_counts(buckets, labels):
    assert bucket_labels(buckets) == labels


@pytest.mark.parametrize("buckets", [1, 2, 3, 4, 7, 16, 64])
def test_label_i_goes_to_shuffle_partition_i(buckets):
    labels = bucket_labels(buckets)
    assert len(set(labels)) == buckets
    assert [shuffle_partition(label, buckets) for label in labels] == list(range(buckets))


# An offset log entry as Spark's OffsetSeqLog writes it: a version line, the
# batch metadata (OffsetSeqMetadata, with the confs a checkpoint pins), then
# one offset per source (this one the Python Kafka source's).
OFFSET_ENTRY = (
    'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1763950000000,"conf":{'
    '"spark.sql.streaming.stateStore.providerClass":"org.apache.spark.sql.execution.streaming.'
    'state.RocksDBStateStoreProvider","spark.sql.shuffle.partitions":"3"}}\n'
    '{"isr.in/0":450}\n')


def test_an_existing_checkpoint_keeps_its_bucket_count_and_a_new_one_has_none(tmp_path):
    from isr.stream.buckets import checkpoint_buckets, from_offset_entry, resolve

    assert from_offset_entry(OFFSET_ENTRY) == 3
    assert from_offset_entry("not an offset log entry") is None
    offsets = tmp_path / "ck" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "0").write_text(OFFSET_ENTRY.replace('"3"', '"5"'))
    (offsets / "1").write_text(OFFSET_ENTRY)
    (offsets / ".1.crc").write_text("")
    assert checkpoint_buckets(None, str(tmp_path / "ck")) == 3  # the latest entry
    assert checkpoint_buckets(None, f"file://{tmp_path / 'ck'}") == 3
    assert checkpoint_buckets(None, str(tmp_path / "new")) is None
    assert resolve(None, "auto", str(tmp_path / "ck")) == 3
    assert resolve(None, 7, str(tmp_path / "ck")) == 7  # a number is taken as it is
