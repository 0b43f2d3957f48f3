from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from storagecore.partitioner import murmur2, partition_for_key


@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(key: bytes) -> None:
    theirs = kafka_python_murmur2(bytearray(key))
    assert murmur2(key) & 0xFFFFFFFF == theirs & 0xFFFFFFFF


def test_known_java_values() -> None:
    # From Kafka's UtilsTest.testMurmur2.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107
    assert partition_for_key(b"foobar", 5) == (-790332482 & 0x7FFFFFFF) % 5
