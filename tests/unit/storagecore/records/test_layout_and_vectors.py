"""Golden byte vectors (kafka-log-layer.md §1.9) and the layout's constant relations."""

from __future__ import annotations

import pytest

from storagecore import ControlType, NewRecord, RecordBatch, build_batch, build_control_batch
from storagecore.records import layout
from storagecore.records.batch import TimestampType
from storagecore.records.codecs import Compression

VECTOR_A = bytes.fromhex(
    "000000000000000000000049ffffffff024109046f0000000000010000018bcfe568000000018bcfe56805"
    "ffffffffffffffffffffffffffff0000000214000000046b310476310018000a02046b32010202680278"
)
VECTOR_B = bytes.fromhex(
    "000000000000002a000000420000000302fc84b0340030000000000000018bcfe568000000018bcfe56800"
    "00000000000003e80000ffffffff000000012000000008000000010c00000000000500"
)


def test_layout_relations_match_kafka() -> None:
    # Re-checked here because `python -O` would strip the module-level asserts.
    assert layout.RECORD_BATCH_OVERHEAD == layout.BATCH_HEADER.size == 61
    assert layout.LOG_OVERHEAD == 12
    assert layout.CRC_OFFSET == 17
    assert layout.ATTRIBUTES_OFFSET == 21
    assert layout.RECORDS_COUNT_OFFSET == 57
    assert layout.RECORDS_OFFSET == 61


def test_vector_a_is_built_byte_for_byte() -> None:
    built = build_batch(
        [
            NewRecord(key=b"k1", value=b"v1", timestamp=1_700_000_000_000),
            NewRecord(key=b"k2", value=None, timestamp=1_700_000_000_005, headers=(("h", b"x"),)),
        ]
    )
    assert built == VECTOR_A
    assert len(built) == 85


def test_vector_a_parses() -> None:
    batch = RecordBatch(VECTOR_A)
    batch.validate()
    assert batch.crc == 0x4109046F
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (0, 1, 2)
    assert batch.partition_leader_epoch == -1
    assert batch.max_timestamp == 1_700_000_000_005
    assert batch.compression is Compression.NONE
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    first, second = batch.records()
    assert (first.offset, first.key, first.value, first.headers) == (0, b"k1", b"v1", ())
    assert (second.offset, second.key, second.value) == (1, b"k2", None)
    assert second.is_tombstone
    assert second.headers == (("h", b"x"),)
    assert second.timestamp == 1_700_000_000_005


def test_vector_b_commit_marker_is_built_byte_for_byte() -> None:
    built = build_control_batch(
        ControlType.COMMIT,
        producer_id=1000,
        producer_epoch=0,
        coordinator_epoch=5,
        timestamp=1_700_000_000_000,
        base_offset=42,
        partition_leader_epoch=3,
    )
    assert built == VECTOR_B
    batch = RecordBatch(built)
    batch.validate()
    assert batch.size_bytes == 78
    assert batch.is_control and batch.is_transactional
    assert batch.attributes == 0x30
    assert batch.control_type() is ControlType.COMMIT
    (record,) = batch.records()
    assert record.key == bytes.fromhex("00000001")
    assert record.value == bytes.fromhex("000000000005")


def test_partition_leader_epoch_is_not_covered_by_the_crc() -> None:
    rewritten = bytearray(VECTOR_A)
    rewritten[12:16] = (7).to_bytes(4, "big")
    RecordBatch(bytes(rewritten)).validate()
    assert RecordBatch(bytes(rewritten)).partition_leader_epoch == 7


@pytest.mark.parametrize("position", [layout.ATTRIBUTES_OFFSET, 40, 70, 84])
def test_any_flipped_byte_under_the_crc_is_detected(position: int) -> None:
    corrupted = bytearray(VECTOR_A)
    corrupted[position] ^= 0x01
    assert not RecordBatch(bytes(corrupted)).is_valid()
