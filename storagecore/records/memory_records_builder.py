"""Building record batches of magic v2 (Kafka's ``MemoryRecordsBuilder``): the one writer.

:func:`build_batch` is where the bytes of a batch are made: the producer CLI, the append path
when it must recompress, the cleaner and the tests all go through it. The cleaner's rebuilds
(:func:`rebuild_batch`, :func:`rebuild_batch_from_payload`, :func:`build_empty_batch`) keep the
original header fields as Kafka's ``MemoryRecords.filterTo`` does; :func:`set_max_timestamp` is
the validator's in-place header edit. Reading is :mod:`storagecore.records.batch`.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence
from typing import Any, Final

from storagecore.records import layout
from storagecore.records.batch import ControlType, NewRecord, Record, RecordBatch, TimestampType
from storagecore.records.codecs import Compression, compress
from storagecore.records.crc import crc32c
from storagecore.records.varint import encode_varint, encode_varlong

_INT64: Final = struct.Struct(">q")
_UINT32: Final = struct.Struct(">I")
_INT16: Final = struct.Struct(">h")


def encode_record(
    *,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    """One record body with its length prefix."""
    parts = [b"\x00", encode_varlong(timestamp_delta), encode_varint(offset_delta)]
    if key is None:
        parts.append(encode_varint(-1))
    else:
        parts += (encode_varint(len(key)), key)
    if value is None:
        parts.append(encode_varint(-1))
    else:
        parts += (encode_varint(len(value)), value)
    parts.append(encode_varint(len(headers)))
    for header_key, header_value in headers:
        encoded_key = header_key.encode("utf-8")
        parts += (encode_varint(len(encoded_key)), encoded_key)
        if header_value is None:
            parts.append(encode_varint(-1))
        else:
            parts += (encode_varint(len(header_value)), header_value)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def build_batch(
    records: Sequence[NewRecord],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    compression_level: int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    producer_id: int = layout.NO_PRODUCER_ID,
    producer_epoch: int = layout.NO_PRODUCER_EPOCH,
    base_sequence: int = layout.NO_SEQUENCE,
    partition_leader_epoch: int = layout.NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Encode one v2 batch.

    ``last_offset_delta`` and ``max_timestamp`` override the computed values (the cleaner keeps
    the original last offset; an empty batch keeps its producer state). With
    ``delete_horizon_ms`` the batch carries the KIP-534 horizon in baseTimestamp.
    """
    deltas = [
        index if record.offset_delta is None else record.offset_delta
        for index, record in enumerate(records)
    ]
    if any(later <= earlier for earlier, later in itertools.pairwise(deltas)):
        raise ValueError(f"offset deltas must increase strictly, got {deltas}")
    if last_offset_delta is None:
        if not records:
            raise ValueError("an empty batch needs an explicit last_offset_delta")
        last_offset_delta = deltas[-1]
    elif records and last_offset_delta < deltas[-1]:
        raise ValueError(f"last_offset_delta {last_offset_delta} is below the last record's delta")

    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        if log_append_time is None:
            raise ValueError("LogAppendTime batches need log_append_time")
        first_timestamp = log_append_time
        computed_max = log_append_time
    else:
        first_timestamp = records[0].timestamp if records else layout.NO_TIMESTAMP
        computed_max = max((r.timestamp for r in records), default=layout.NO_TIMESTAMP)
    base_timestamp = first_timestamp if delete_horizon_ms is None else delete_horizon_ms
    if max_timestamp is None:
        max_timestamp = computed_max

    payload = b"".join(
        encode_record(
            offset_delta=delta,
            # LogAppendTime records carry the batch time; Kafka encodes it against the base
            # (0 unless a delete horizon took the base's place).
            timestamp_delta=(
                first_timestamp - base_timestamp
                if timestamp_type is TimestampType.LOG_APPEND_TIME
                else record.timestamp - base_timestamp
            ),
            key=record.key,
            value=record.value,
            headers=record.headers,
        )
        for delta, record in zip(deltas, records, strict=True)
    )
    return _assemble_batch(
        payload,
        record_count=len(records),
        base_offset=base_offset,
        compression=compression,
        compression_level=compression_level,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=is_transactional,
        is_control=is_control,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        has_delete_horizon=delete_horizon_ms is not None,
    )


def _assemble_batch(
    payload: bytes,
    *,
    record_count: int,
    base_offset: int,
    compression: Compression,
    compression_level: int | None,
    timestamp_type: TimestampType,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    partition_leader_epoch: int,
    is_transactional: bool,
    is_control: bool,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    has_delete_horizon: bool,
) -> bytes:
    """The header, the (compressed) records and the CRC: where every built batch is made."""
    if compression is not Compression.NONE and record_count:
        payload = compress(compression, payload, compression_level)

    attributes = int(compression)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= layout.TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= layout.TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= layout.CONTROL_FLAG_MASK
    if has_delete_horizon:
        attributes |= layout.DELETE_HORIZON_FLAG_MASK

    size = layout.RECORD_BATCH_OVERHEAD + len(payload)
    buffer = bytearray(size)
    layout.BATCH_HEADER.pack_into(
        buffer,
        0,
        base_offset,
        size - layout.LOG_OVERHEAD,
        partition_leader_epoch,
        layout.CURRENT_MAGIC,
        0,  # crc, filled below
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    buffer[layout.RECORDS_OFFSET :] = payload
    _UINT32.pack_into(
        buffer, layout.CRC_OFFSET, crc32c(memoryview(buffer)[layout.ATTRIBUTES_OFFSET :])
    )
    return bytes(buffer)


def build_control_batch(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = layout.NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A commit or abort marker: transactional|control, one record, no codec, no sequence."""
    if control_type not in (ControlType.COMMIT, ControlType.ABORT):
        raise ValueError(f"only COMMIT and ABORT markers are written here, not {control_type!r}")
    key = layout.CONTROL_RECORD_KEY.pack(0, int(control_type))
    value = layout.END_TXN_MARKER_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [NewRecord(key=key, value=value, timestamp=timestamp)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=True,
        is_control=True,
    )


def rebuild_batch(
    batch: RecordBatch,
    records: Sequence[Record],
    *,
    compression: Compression | None = None,
    compression_level: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """``batch`` re-encoded with only ``records`` (each at its own offset): same base offset,
    last offset delta, timestamp type, producer fields, flags and leader epoch; the codec of
    ``batch`` unless ``compression`` is given. Used by the append path (compression.type) and
    by the cleaner (records removed, delete horizon set)."""
    log_append = batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    return build_batch(
        [
            NewRecord(
                key=r.key,
                value=r.value,
                timestamp=r.timestamp,
                headers=r.headers,
                offset_delta=r.offset - batch.base_offset,
            )
            for r in records
        ],
        compression=batch.compression if compression is None else compression,
        compression_level=compression_level,
        log_append_time=batch.max_timestamp if log_append else None,
        **_kept_header(batch),
        delete_horizon_ms=delete_horizon_ms,
    )


def _kept_header(batch: RecordBatch) -> dict[str, Any]:
    """The header fields a rebuilt batch keeps from the original (both rebuild paths)."""
    return {
        "base_offset": batch.base_offset,
        "timestamp_type": batch.timestamp_type,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "partition_leader_epoch": batch.partition_leader_epoch,
        "is_transactional": batch.is_transactional,
        "is_control": batch.is_control,
        "last_offset_delta": batch.last_offset_delta,
    }


def rebuild_batch_from_payload(
    batch: RecordBatch,
    payload: bytes,
    *,
    record_count: int,
    base_timestamp: int,
    max_timestamp: int,
    has_delete_horizon: bool,
) -> bytes:
    """What :func:`rebuild_batch` writes, from records already encoded against
    ``base_timestamp`` (the cleaner's native path encodes the kept records itself); ``batch``
    gives the codec and every other header field."""
    assert record_count > 0, "an emptied batch is build_empty_batch's"
    return _assemble_batch(
        payload,
        record_count=record_count,
        compression=batch.compression,
        compression_level=None,
        **_kept_header(batch),
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        has_delete_horizon=has_delete_horizon,
    )


def build_empty_batch(batch: RecordBatch) -> bytes:
    """What the cleaner keeps of a batch whose records all went but whose producer state must
    survive (Kafka's ``writeEmptyHeader``): the 61-byte header alone, record count 0, no codec,
    base timestamp -1, the original max timestamp, offsets, producer fields, flags and leader
    epoch, and no delete-horizon flag."""
    attributes = int(batch.timestamp_type) << 3
    if batch.is_transactional:
        attributes |= layout.TRANSACTIONAL_FLAG_MASK
    if batch.is_control:
        attributes |= layout.CONTROL_FLAG_MASK
    buffer = bytearray(layout.RECORD_BATCH_OVERHEAD)
    layout.BATCH_HEADER.pack_into(
        buffer,
        0,
        batch.base_offset,
        layout.RECORD_BATCH_OVERHEAD - layout.LOG_OVERHEAD,
        batch.partition_leader_epoch,
        layout.CURRENT_MAGIC,
        0,
        attributes,
        batch.last_offset_delta,
        layout.NO_TIMESTAMP,
        batch.max_timestamp,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        0,
    )
    _UINT32.pack_into(
        buffer, layout.CRC_OFFSET, crc32c(memoryview(buffer)[layout.ATTRIBUTES_OFFSET :])
    )
    return bytes(buffer)


def set_max_timestamp(
    buffer: bytearray, position: int, size: int, timestamp_type: TimestampType, max_timestamp: int
) -> None:
    """Kafka's ``setMaxTimestamp``: timestamp type bit and max timestamp, then a new CRC."""
    (attributes,) = _INT16.unpack_from(buffer, position + layout.ATTRIBUTES_OFFSET)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= layout.TIMESTAMP_TYPE_MASK
    else:
        attributes &= ~layout.TIMESTAMP_TYPE_MASK
    _INT16.pack_into(buffer, position + layout.ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(buffer, position + layout.MAX_TIMESTAMP_OFFSET, max_timestamp)
    crc = crc32c(memoryview(buffer)[position + layout.ATTRIBUTES_OFFSET : position + size])
    _UINT32.pack_into(buffer, position + layout.CRC_OFFSET, crc)
