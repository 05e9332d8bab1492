"""Bucket keys that Spark spreads one per task.

The stateful operator's input is hash-partitioned on its key:
`pmod(murmur3(key, seed 42), spark.sql.shuffle.partitions)`. With keys
0..n-1 that is far from one key per partition: for n = 4, keys 0, 1 and 3
all land in partition 3, so three of four buckets ran one after the other in
one task while the other core idled (docs/benchmarks.md, third pass). So each
bucket index gets a *label*, the smallest int that Spark sends to the
partition of the same index, and the label is the state key.
"""

from __future__ import annotations

from functools import lru_cache

SPARK_HASH_SEED = 42  # Spark's HashPartitioning and SQL hash() use Murmur3 with seed 42
_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def spark_hash_int(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's `Murmur3_x86_32.hashInt` (what `hash(int_column)` returns)."""
    k1 = (value & _MASK) * 0xCC9E2D51 & _MASK
    k1 = _rotl(k1, 15) * 0x1B873593 & _MASK
    h1 = _rotl((seed & _MASK) ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _MASK
    h1 ^= 4  # the input's length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1  # a Java int


def shuffle_partition(label: int, partitions: int) -> int:
    """The shuffle partition (= state store partition) Spark gives an int key."""
    return spark_hash_int(label) % partitions  # Python's % is Spark's pmod here


@lru_cache(maxsize=None)
def bucket_labels(buckets: int) -> tuple[int, ...]:
    """For bucket index i (0..buckets-1), the smallest non-negative int key that
    Spark hash-partitions into shuffle partition i of `buckets`."""
    labels: dict[int, int] = {}
    label = 0
    while len(labels) < buckets:
        labels.setdefault(shuffle_partition(label, buckets), label)
        label += 1
    return tuple(labels[i] for i in range(buckets))
