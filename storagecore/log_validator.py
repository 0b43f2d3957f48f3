"""Validation and offset assignment on the leader's append path (Kafka's LogValidator).

Given the bytes of a produce request for one partition, :func:`validate_and_assign_offsets`
checks every batch (shallow: size, magic, CRC, limits; deep: every record's framing, keys on
compacted topics, timestamps) and returns the bytes to append with base offsets assigned from
the log end offset. Nothing is written here; on any error nothing of the request is appended.

Offsets are assigned by rewriting only ``baseOffset`` (not covered by the CRC): the records keep
their deltas. The CRC is recomputed only when the max timestamp or the timestamp type changes,
and a batch is rebuilt only when ``compression.type`` asks for another codec.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from storagecore.config import LogConfig, TopicPartition
from storagecore.errors import InvalidRecordError, RecordTooLargeError
from storagecore.records import batch as batch_module
from storagecore.records import layout
from storagecore.records.batch import NewRecord, RecordBatch, TimestampType, iter_batches
from storagecore.records.codecs import DEFAULT_LEVELS, Compression
from storagecore.records.scan import scan_records


class AppendOrigin(enum.Enum):
    """Who is appending: a client (offsets assigned, strict checks), the transaction coordinator
    (control batches allowed), or the log itself replaying batches with their offsets."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


@dataclasses.dataclass(frozen=True, slots=True)
class ValidatedRecords:
    buffer: bytes
    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    record_count: int
    batch_count: int
    log_append_time: int


def target_compression(config: LogConfig, source: Compression) -> Compression:
    if config.compression_type == "producer":
        return source
    return Compression.from_name(config.compression_type)


def _level(config: LogConfig, codec: Compression) -> int | None:
    levels = {
        Compression.GZIP: config.compression_gzip_level,
        Compression.LZ4: config.compression_lz4_level,
        Compression.ZSTD: config.compression_zstd_level,
    }
    level = levels.get(codec)
    return None if level is None or level == DEFAULT_LEVELS.get(codec) else level


def validate_and_assign_offsets(
    data: bytes | bytearray | memoryview,
    *,
    tp: TopicPartition,
    config: LogConfig,
    next_offset: int,
    now_ms: int,
    origin: AppendOrigin = AppendOrigin.CLIENT,
    partition_leader_epoch: int = 0,
) -> ValidatedRecords:
    if not data:
        raise InvalidRecordError(f"{tp}: empty append")
    timestamp_type = (
        TimestampType.LOG_APPEND_TIME
        if config.message_timestamp_type == "LogAppendTime"
        else TimestampType.CREATE_TIME
    )
    out: list[bytes | bytearray] = []
    counter = next_offset
    first_offset = -1
    max_timestamp = layout.NO_TIMESTAMP
    offset_of_max = -1
    record_count = 0
    batch_count = 0
    try:
        batches = list(iter_batches(data))
    except Exception as exc:
        raise InvalidRecordError(f"{tp}: {exc}") from exc
    for position, batch in batches:
        where = f"{tp}: batch {batch_count} (byte {position} of the request)"
        try:
            batch.validate()
        except Exception as exc:
            raise type(exc)(f"{where}: {exc}") from exc
        if batch.size_bytes > config.max_message_bytes:
            raise RecordTooLargeError(
                f"{where}: {batch.size_bytes} bytes exceeds max.message.bytes="
                f"{config.max_message_bytes}"
            )
        _check_batch_shape(batch, origin, where)
        if origin is AppendOrigin.REPLICATION:
            if batch.base_offset < counter:
                raise InvalidRecordError(
                    f"{where}: base offset {batch.base_offset} is below the expected {counter}"
                )
            base_offset = batch.base_offset
        else:
            base_offset = counter
        payload = batch.payload(config.max_message_bytes * 4 + (1 << 20))
        scan = scan_records(payload, batch.records_count, batch.base_timestamp)
        if scan.problem is not None:
            raise InvalidRecordError(f"{where}: {scan.problem}") from None
        if origin is AppendOrigin.CLIENT and not scan.offsets_sequential:
            raise InvalidRecordError(
                f"{where}: record offset deltas are not 0..{batch.records_count - 1}"
            )
        if config.compact and scan.null_key_count and not batch.is_control:
            raise InvalidRecordError(
                f"{where}: compacted topic cannot accept a record without a key "
                f"({scan.null_key_count} null keys)"
            )
        if timestamp_type is TimestampType.CREATE_TIME and batch.records_count:
            if (
                batch.timestamp_type is TimestampType.LOG_APPEND_TIME
                and origin is AppendOrigin.CLIENT
            ):
                raise InvalidRecordError(f"{where}: producers must send CreateTime batches")
            _check_timestamps(scan.min_timestamp, scan.max_timestamp, config, now_ms, where)

        codec = target_compression(config, batch.compression)
        if codec is not batch.compression and batch.records_count and not batch.is_control:
            rebuilt = _rebuild(batch, codec, _level(config, codec))
            buffer = bytearray(rebuilt)
            rebuilt_batch = RecordBatch(buffer)
            if rebuilt_batch.size_bytes > config.max_message_bytes:
                raise RecordTooLargeError(
                    f"{where}: {rebuilt_batch.size_bytes} bytes after recompression exceeds "
                    f"max.message.bytes={config.max_message_bytes}"
                )
        else:
            buffer = bytearray(batch.buffer)
        batch_module.set_base_offset(buffer, 0, base_offset)
        if origin is not AppendOrigin.REPLICATION:
            batch_module.set_partition_leader_epoch(buffer, 0, partition_leader_epoch)
        if timestamp_type is TimestampType.LOG_APPEND_TIME:
            batch_module.set_max_timestamp(buffer, 0, len(buffer), timestamp_type, now_ms)
            batch_max = now_ms
        else:
            batch_max = scan.max_timestamp if batch.records_count else batch.max_timestamp
            if batch_max != batch.max_timestamp or batch.timestamp_type is not timestamp_type:
                batch_module.set_max_timestamp(buffer, 0, len(buffer), timestamp_type, batch_max)
        last_offset = base_offset + batch.last_offset_delta
        if first_offset < 0:
            first_offset = base_offset
        if batch_max > max_timestamp:
            max_timestamp = batch_max
            offset_of_max = last_offset
        counter = last_offset + 1
        record_count += batch.records_count
        batch_count += 1
        out.append(buffer)
    return ValidatedRecords(
        buffer=b"".join(out),
        first_offset=first_offset,
        last_offset=counter - 1,
        max_timestamp=max_timestamp,
        shallow_offset_of_max_timestamp=offset_of_max if offset_of_max >= 0 else counter - 1,
        record_count=record_count,
        batch_count=batch_count,
        log_append_time=now_ms
        if timestamp_type is TimestampType.LOG_APPEND_TIME
        else layout.NO_TIMESTAMP,
    )


def _check_batch_shape(batch: RecordBatch, origin: AppendOrigin, where: str) -> None:
    if origin is AppendOrigin.CLIENT:
        if batch.base_offset != 0:
            raise InvalidRecordError(
                f"{where}: producers must send base offset 0, got {batch.base_offset}"
            )
        if batch.records_count <= 0 or batch.last_offset_delta + 1 != batch.records_count:
            raise InvalidRecordError(
                f"{where}: record count {batch.records_count} does not match last offset delta "
                f"{batch.last_offset_delta}"
            )
        if batch.is_control:
            raise InvalidRecordError(f"{where}: clients may not write control batches")
        if batch.has_producer_id and batch.base_sequence < 0:
            raise InvalidRecordError(
                f"{where}: producer id {batch.producer_id} with invalid base sequence "
                f"{batch.base_sequence}"
            )
    elif batch.records_count > batch.last_offset_delta + 1:
        raise InvalidRecordError(
            f"{where}: {batch.records_count} records cannot fit in last offset delta "
            f"{batch.last_offset_delta}"
        )


def _check_timestamps(
    min_timestamp: int, max_timestamp: int, config: LogConfig, now_ms: int, where: str
) -> None:
    if now_ms - min_timestamp > config.message_timestamp_before_max_ms:
        raise InvalidRecordError(
            f"{where}: timestamp {min_timestamp} is more than message.timestamp.before.max.ms="
            f"{config.message_timestamp_before_max_ms} before now ({now_ms})"
        )
    if max_timestamp - now_ms > config.message_timestamp_after_max_ms:
        raise InvalidRecordError(
            f"{where}: timestamp {max_timestamp} is more than message.timestamp.after.max.ms="
            f"{config.message_timestamp_after_max_ms} after now ({now_ms})"
        )


def _rebuild(batch: RecordBatch, codec: Compression, level: int | None) -> bytes:
    records: Sequence[NewRecord] = [
        NewRecord(
            key=r.key,
            value=r.value,
            timestamp=r.timestamp,
            headers=r.headers,
            offset_delta=r.offset - batch.base_offset,
        )
        for r in batch.records()
    ]
    return batch_module.build_batch(
        records,
        base_offset=batch.base_offset,
        compression=codec,
        compression_level=level,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        partition_leader_epoch=batch.partition_leader_epoch,
        is_transactional=batch.is_transactional,
        last_offset_delta=batch.last_offset_delta,
    )
