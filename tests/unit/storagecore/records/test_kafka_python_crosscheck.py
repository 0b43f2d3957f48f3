"""Cross-check against an independent implementation: kafka-python's record code.

Batches written here parse there, and batches written there parse here, for every codec, with
headers, tombstones and control batches; lz4 with inputs above 64 KiB (the linked-block trap).
"""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from storagecore import ControlType, NewRecord, RecordBatch, build_batch, build_control_batch
from storagecore.records.codecs import Compression


def _records(count: int, value_size: int) -> list[NewRecord]:
    out = []
    for i in range(count):
        value = None if i % 7 == 3 else (b"payload-%06d|" % i) * (value_size // 15 + 1)
        headers = (("trace", b"t-%d" % i), ("empty", None)) if i % 2 else ()
        out.append(
            NewRecord(
                key=None if i % 11 == 5 else b"key-%d" % (i % 13),
                value=None if value is None else value[:value_size],
                timestamp=1_700_000_000_000 + i * 3,
                headers=headers,
            )
        )
    return out


SIZES = [(1, 10), (50, 100), (400, 400)]  # the last one: ~170 KB uncompressed, > 64 KiB


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize(("count", "value_size"), SIZES)
def test_written_here_parses_in_kafka_python(
    codec: Compression, count: int, value_size: int
) -> None:
    expected = _records(count, value_size)
    built = build_batch(
        expected,
        base_offset=500,
        compression=codec,
        producer_id=9,
        producer_epoch=1,
        base_sequence=0,
    )
    theirs = DefaultRecordBatch(bytearray(built))
    assert theirs.validate_crc()
    assert theirs.compression_type == int(codec)
    assert (theirs.base_offset, theirs.last_offset_delta, theirs.records_count) == (
        500,
        count - 1,
        count,
    )
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (9, 1, 0)
    parsed = list(theirs)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in parsed] == [
        (500 + i, e.timestamp, e.key, e.value) for i, e in enumerate(expected)
    ]
    assert [list(r.headers) for r in parsed] == [list(e.headers) for e in expected]


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize(("count", "value_size"), SIZES)
def test_written_by_kafka_python_parses_here(
    codec: Compression, count: int, value_size: int
) -> None:
    expected = _records(count, value_size)
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i, record in enumerate(expected):
        builder.append(
            i,
            timestamp=record.timestamp,
            key=record.key,
            value=record.value,
            headers=list(record.headers),
        )
    theirs = bytes(builder.build())
    ours = RecordBatch(theirs)
    ours.validate()
    if codec is not Compression.NONE and count > 1:  # kafka-python skips codecs that do not help
        assert ours.compression is codec, "kafka-python fell back to no compression"
    parsed = ours.records()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in parsed] == [
        (i, e.timestamp, e.key, e.value, e.headers) for i, e in enumerate(expected)
    ]


def test_control_batch_parses_in_kafka_python() -> None:
    built = build_control_batch(
        ControlType.ABORT,
        producer_id=1000,
        producer_epoch=2,
        coordinator_epoch=5,
        timestamp=1_700_000_000_000,
        base_offset=42,
    )
    theirs = DefaultRecordBatch(bytearray(built))
    assert theirs.validate_crc()
    assert theirs.is_control_batch and theirs.is_transactional
    (record,) = list(theirs)
    assert record.abort and not record.commit


def test_control_batch_from_kafka_python_parses_here() -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=True,
        producer_id=1000,
        producer_epoch=2,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.append(
        0,
        timestamp=1,
        key=bytes.fromhex("00000001"),
        value=bytes.fromhex("000000000005"),
        headers=[],
    )
    raw = bytearray(builder.build())
    raw[22] |= 0x20  # kafka-python's builder has no control flag: set it, then fix the CRC
    from storagecore.records.crc import crc32c

    raw[17:21] = crc32c(bytes(raw[21:])).to_bytes(4, "big")
    ours = RecordBatch(bytes(raw))
    ours.validate()
    assert ours.is_control and ours.control_type() is ControlType.COMMIT


@pytest.mark.parametrize("codec", list(Compression))
def test_tombstone_only_batch(codec: Compression) -> None:
    built = build_batch([NewRecord(key=b"k", value=None, timestamp=1)] * 1, compression=codec)
    (record,) = list(DefaultRecordBatch(bytearray(built)))
    assert record.value is None
