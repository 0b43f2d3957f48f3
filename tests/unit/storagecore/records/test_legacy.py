"""Legacy v0/v1 entries (storagecore/records/legacy.py) against kafka-python's legacy records,
the independent oracle, in both directions, and on damaged inputs."""

from __future__ import annotations

import struct
import zlib

import pytest

from storagecore.errors import CorruptRecordError
from storagecore.records.batch import TimestampType
from storagecore.records.codecs import Compression
from storagecore.records.legacy import (
    KEY_LENGTH_OFFSET_V0,
    RECORD_OVERHEAD_V0,
    RECORD_OVERHEAD_V1,
    LegacyRecordBatch,
    LegacyRecordToWrite,
    build_legacy_entry,
    encode_message,
    fix_lz4_header_checksum,
    xxh32,
)
from tests.legacy_data import Message, entries, kp_entry, kp_read

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]
VARIANTS = [(magic, codec) for magic in (0, 1) for codec in CODECS]


def variant_id(variant: tuple[int, Compression]) -> str:
    return f"v{variant[0]}-{variant[1].config_name}"


def messages(
    count: int, ts: int = 1_700_000_000_000
) -> list[tuple[int, bytes | None, bytes | None]]:
    """Keyed, keyless (every 5th) and tombstones (every 4th), values of growing size."""
    return [
        (
            ts + (index * 7) % 13,
            None if index % 5 == 3 else b"key-%d" % (index % 6),
            None if index % 4 == 1 else b"value-%d-" % index + b"x" * index,
        )
        for index in range(count)
    ]


def ours(data: bytes) -> list[Message]:
    out: list[Message] = []
    for entry in entries(data):
        batch = LegacyRecordBatch(entry)
        batch.validate()
        out += [Message(r.offset, r.timestamp, r.key, r.value) for r in batch.records()]
    return out


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
@pytest.mark.parametrize("count", [1, 3, 200])
def test_kafka_python_entries_read_identically(
    variant: tuple[int, Compression], count: int
) -> None:
    magic, codec = variant
    data = kp_entry(magic, codec.value, messages(count), 1000)
    expected = kp_read(data)
    assert ours(data) == expected
    assert [m.offset for m in expected] == list(range(1000, 1000 + count))
    if magic == 0:
        assert {m.timestamp for m in expected} == {-1}  # v0 has no timestamp
    last = LegacyRecordBatch(entries(data)[-1])
    assert (last.last_offset, last.next_offset, last.magic) == (999 + count, 1000 + count, magic)
    assert last.compression is codec
    assert last.producer_id == -1 and not last.is_control and not last.is_transactional
    if codec is not Compression.NONE:
        assert (last.base_offset, last.records_count) == (1000, count)
        assert last.max_timestamp == (max(t for t, _, _ in messages(count)) if magic else -1)


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_our_entries_read_identically_by_kafka_python(variant: tuple[int, Compression]) -> None:
    """What the cleaner writes: offsets with gaps (kept records), a wrapper of many messages."""
    magic, codec = variant
    kept = [
        LegacyRecordToWrite(500 + 3 * i, ts, key, value)
        for i, (ts, key, value) in enumerate(messages(50))
    ]
    data = build_legacy_entry(magic, codec, TimestampType.CREATE_TIME, kept)
    expected = [Message(r.offset, r.timestamp if magic else -1, r.key, r.value) for r in kept]
    assert kp_read(data) == expected
    assert ours(data) == expected


def test_v1_log_append_time_wrapper_overrides_inner_timestamps() -> None:
    data = kp_entry(1, Compression.GZIP.value, messages(4), 10, log_append_time=42)
    batch = LegacyRecordBatch(data)
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME and batch.max_timestamp == 42
    assert (
        [r.timestamp for r in batch.records()] == [42] * 4 == [m.timestamp for m in kp_read(data)]
    )
    kept = [LegacyRecordToWrite(r.offset, r.timestamp, r.key, r.value) for r in batch.records()]
    rebuilt = build_legacy_entry(
        1, Compression.LZ4, TimestampType.LOG_APPEND_TIME, kept[1:], log_append_time=42
    )
    again = LegacyRecordBatch(rebuilt)
    assert again.timestamp_type is TimestampType.LOG_APPEND_TIME and again.max_timestamp == 42
    assert [(r.offset, r.timestamp) for r in again.records()] == [(11, 42), (12, 42), (13, 42)]


def test_v0_lz4_carries_kafkas_broken_header_checksum() -> None:
    """KAFKA-3160: v0 frames hash the frame magic too; Kafka and kafka-python write it so, and
    the reader ignores it for v0 only (v1 checks it, as liblz4 does)."""
    kept = [LegacyRecordToWrite(i, -1, b"k", b"v" * i) for i in range(5)]
    ours_v0 = build_legacy_entry(0, Compression.LZ4, TimestampType.CREATE_TIME, kept)
    theirs = kp_entry(0, Compression.LZ4.value, [(-1, b"k", b"v" * i) for i in range(5)], 0)
    assert ours_v0 == theirs  # byte for byte, the HC byte included
    value = ours_v0[KEY_LENGTH_OFFSET_V0 + 8 :]
    assert value != fix_lz4_header_checksum(value)  # the broken byte differs from the right one
    # The same broken frame inside a v1 wrapper is refused, naming the offset.
    v1 = encode_message(4, 1, Compression.LZ4.value, 0, key=None, value=value)
    with pytest.raises(CorruptRecordError, match="offset 4"):
        LegacyRecordBatch(v1).records()


def test_xxh32_matches_the_reference() -> None:
    xxhash = pytest.importorskip("xxhash")
    for data in (b"", b"a", b"abcd", bytes(range(15)), b"\x04\x22\x4d\x18\x64\x40"):
        assert xxh32(data) == xxhash.xxh32_intdigest(data)


def _recrc(entry: bytearray) -> bytes:
    struct.pack_into(">I", entry, 12, zlib.crc32(entry[16:]))
    return bytes(entry)


def test_damage_is_named() -> None:
    good = bytearray(kp_entry(1, Compression.SNAPPY.value, messages(3), 7))
    flipped = bytearray(good)
    flipped[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="offset 9: CRC-32 mismatch"):
        LegacyRecordBatch(flipped).validate()
    # Wrapper offset below the last relative inner offset (and not zero).
    low = bytearray(good)
    struct.pack_into(">q", low, 0, 1)
    with pytest.raises(CorruptRecordError, match="wrapper offset 1 is less than the last inner"):
        LegacyRecordBatch(low).records()
    # A v1 wrapper offset of 0: relative offsets are taken as they are (old librdkafka).
    zero = bytearray(good)
    struct.pack_into(">q", zero, 0, 0)
    assert [r.offset for r in LegacyRecordBatch(zero).records()] == [0, 1, 2]
    # A compressed wrapper with a null value; inner messages compressed again.
    null = encode_message(3, 1, Compression.GZIP.value, 0, key=None, value=None)
    with pytest.raises(CorruptRecordError, match="null value"):
        LegacyRecordBatch(null).records()
    nested_inner = build_legacy_entry(
        1, Compression.GZIP, TimestampType.CREATE_TIME, [LegacyRecordToWrite(0, 1, b"k", b"v")]
    )
    nested = encode_message(
        0, 1, Compression.GZIP.value, 1, key=None, value=zlib.compress(nested_inner, wbits=31)
    )
    with pytest.raises(CorruptRecordError, match="must not be compressed"):
        LegacyRecordBatch(nested).records()


@pytest.mark.parametrize(("magic", "minimum"), [(0, RECORD_OVERHEAD_V0), (1, RECORD_OVERHEAD_V1)])
def test_minimum_sizes(magic: int, minimum: int) -> None:
    """14 bytes for v0, 22 for v1: a message declaring less is invalid."""
    assert (RECORD_OVERHEAD_V0, RECORD_OVERHEAD_V1) == (14, 22)
    smallest = encode_message(5, magic, 0, 1, key=None, value=None)
    assert len(smallest) == 12 + minimum
    LegacyRecordBatch(smallest).validate()
    short = bytearray(smallest[:-1])
    struct.pack_into(">i", short, 8, minimum - 1)
    with pytest.raises(CorruptRecordError, match=f"below the v{magic} minimum of {minimum}"):
        LegacyRecordBatch(_recrc(short)).validate()
