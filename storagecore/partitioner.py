"""Kafka's default key → partition mapping (murmur2 of the key bytes, made positive, modulo the
partition count), so that the CLI and the demo place keys where a Java producer would."""

from __future__ import annotations


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` as a signed 32-bit integer."""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    r = 24
    h = (seed ^ length) & 0xFFFFFFFF
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    extra = length % 4
    index = length4 * 4
    if extra >= 3:
        h ^= data[index + 2] << 16
    if extra >= 2:
        h ^= data[index + 1] << 8
    if extra >= 1:
        h ^= data[index]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    if partitions < 1:
        raise ValueError(f"partition count must be >= 1, got {partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions
