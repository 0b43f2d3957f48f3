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

import enum
import struct
from collections.abc import Callable
from typing import Final, NamedTuple

from storagecore.config import LogConfig, TopicPartition
from storagecore.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from storagecore.records import layout, memory_records_builder
from storagecore.records.batch import RecordBatch, TimestampType
from storagecore.records.codecs import (
    DEFAULT_LEVELS,
    DEFAULT_MAX_OUTPUT_BYTES,
    Compression,
    decompress,
)
from storagecore.records.crc import crc32c
from storagecore.records.scan import scan_records, validate_uncompressed

_CODECS: Final = tuple(Compression)  # indexed by codec id
#: compression.type values under which an uncompressed batch is stored as it came.
_KEEPS_UNCOMPRESSED: Final = frozenset({"producer", "uncompressed", "none"})
_INT64: Final = struct.Struct(">q")
_INT32: Final = struct.Struct(">i")
assert [int(c) for c in _CODECS] == list(range(len(_CODECS)))


class AppendOrigin(enum.Enum):
    """Who is appending: a client (offsets assigned, strict checks), the transaction coordinator
    (control batches allowed), or the log itself replaying batches with their offsets."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


class ValidatedRecords(NamedTuple):
    buffer: bytes | bytearray | memoryview
    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    record_count: int
    batch_count: int
    log_append_time: int


def native_append_applies(config: LogConfig) -> bool:
    """Whether the topic's settings let the native validation take a request: CreateTime, and
    uncompressed batches stored as they came (no recompression)."""
    return (
        config.message_timestamp_type == "CreateTime"
        and config.compression_type in _KEEPS_UNCOMPRESSED
    )


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
    """Check every batch of ``data`` and return the bytes to append, offsets assigned.

    This is the append hot path: header fields are read once into locals, the request is copied
    once and patched in place, and record framing is checked by the native scan on a view of the
    (uncompressed) payload. Problems raise with the topic-partition, the batch number and its
    byte position in the request.
    """
    view = memoryview(data).cast("B")
    end = len(view)
    if end == 0:
        raise InvalidRecordError(f"{tp}: empty append")
    out = bytearray(view)  # the one copy of the request; offsets are patched into it
    if validate_uncompressed is not None and native_append_applies(config):
        # Native fast path: same checks, same bytes; None hands the request to the code below.
        native = validate_uncompressed(
            out,
            next_offset,
            now_ms,
            origin is AppendOrigin.CLIENT,
            origin is AppendOrigin.REPLICATION,
            config.compact,
            config.max_message_bytes,
            partition_leader_epoch,
            config.message_timestamp_before_max_ms,
            config.message_timestamp_after_max_ms,
        )
        if native is not None:
            first, last, max_ts, offset_of_max, records, batches = native
            return ValidatedRecords(out, first, last, max_ts, offset_of_max, records, batches, -1)
        out = bytearray(view)  # the fast path may have patched some batches before giving up
    replacements: list[tuple[int, int, bytes]] = []  # (position, old size, rebuilt batch)
    create_time = config.message_timestamp_type != "LogAppendTime"
    timestamp_type = TimestampType.CREATE_TIME if create_time else TimestampType.LOG_APPEND_TIME
    client = origin is AppendOrigin.CLIENT
    replication = origin is AppendOrigin.REPLICATION
    max_message_bytes = config.max_message_bytes
    # A bound against decompression bombs, not against compressible data: producers routinely
    # reach ratios of 10-100x on JSON, and Kafka accepts them.
    decompressed_max = DEFAULT_MAX_OUTPUT_BYTES
    unpack = layout.BATCH_HEADER.unpack_from
    counter = next_offset
    first_offset = -1
    max_timestamp = layout.NO_TIMESTAMP
    offset_of_max = -1
    record_count = 0
    batch_count = 0
    pos = 0

    def where() -> str:  # reads pos and batch_count when called: only on errors
        return f"{tp}: batch {batch_count} (byte {pos} of the request)"

    while pos < end:
        if end - pos < layout.RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"{where()}: {end - pos} trailing bytes are not a complete batch header"
            )
        (
            base_offset,
            length,
            _epoch,
            magic,
            crc,
            attributes,
            last_delta,
            base_timestamp,
            batch_max_timestamp,
            producer_id,
            _producer_epoch,
            base_sequence,
            count,
        ) = unpack(view, pos)
        size = length + layout.LOG_OVERHEAD
        if size < layout.RECORD_BATCH_OVERHEAD or pos + size > end:
            raise CorruptRecordError(
                f"{where()}: declared size {size} does not fit the {end - pos} bytes left"
            )
        if magic != layout.CURRENT_MAGIC:
            raise CorruptRecordError(f"{where()}: magic {magic}, only magic 2 is supported")
        computed = crc32c(view[pos + layout.ATTRIBUTES_OFFSET : pos + size])
        if computed != crc:
            raise CorruptRecordError(
                f"{where()}: CRC mismatch (stored 0x{crc:08x}, computed 0x{computed:08x})"
            )
        codec_id = attributes & layout.COMPRESSION_CODEC_MASK
        if codec_id >= len(_CODECS):
            Compression.from_id(codec_id)  # raises UnsupportedCompressionError
        codec = _CODECS[codec_id]
        if size > max_message_bytes:
            raise RecordTooLargeError(
                f"{where()}: {size} bytes exceeds max.message.bytes={max_message_bytes}"
            )
        is_control = bool(attributes & layout.CONTROL_FLAG_MASK)
        if client:
            if base_offset != 0:
                raise InvalidRecordError(
                    f"{where()}: producers must send base offset 0, got {base_offset}"
                )
            if count <= 0 or last_delta + 1 != count:
                raise InvalidRecordError(
                    f"{where()}: record count {count} does not match last offset delta {last_delta}"
                )
            if is_control:
                raise InvalidRecordError(f"{where()}: clients may not write control batches")
            if producer_id != layout.NO_PRODUCER_ID and base_sequence < 0:
                raise InvalidRecordError(
                    f"{where()}: producer id {producer_id} with invalid base sequence "
                    f"{base_sequence}"
                )
            if attributes & layout.TIMESTAMP_TYPE_MASK and create_time:
                raise InvalidRecordError(f"{where()}: producers must send CreateTime batches")
        elif count < 0 or last_delta < 0 or count > last_delta + 1:
            raise InvalidRecordError(
                f"{where()}: {count} records cannot fit in last offset delta {last_delta}"
            )
        if replication:
            if base_offset < counter:
                raise InvalidRecordError(
                    f"{where()}: base offset {base_offset} is below the expected {counter}"
                )
            assigned = base_offset
        else:
            assigned = counter

        raw = view[pos + layout.RECORDS_OFFSET : pos + size]
        try:
            payload = raw if codec is Compression.NONE else decompress(codec, raw, decompressed_max)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{where()}: {exc}") from exc
        problem, scan_max, scan_min, null_keys, sequential = scan_records(
            payload, count, base_timestamp
        )
        if problem is not None:
            raise CorruptRecordError(f"{where()}: {problem}")
        if client and not sequential:
            raise InvalidRecordError(f"{where()}: record offset deltas are not 0..{count - 1}")
        if null_keys and config.compact and not is_control:
            raise InvalidRecordError(
                f"{where()}: compacted topic cannot accept a record without a key "
                f"({null_keys} null keys)"
            )
        if create_time and count and not is_control:
            _check_timestamps(scan_min, scan_max, config, now_ms, where)

        target = target_compression(config, codec)
        if target is not codec and count and not is_control:
            source = RecordBatch(view[pos : pos + size])
            rebuilt = bytearray(
                memory_records_builder.rebuild_batch(
                    source,
                    source.records(),
                    compression=target,
                    compression_level=_level(config, target),
                )
            )
            if len(rebuilt) > max_message_bytes:
                raise RecordTooLargeError(
                    f"{where()}: {len(rebuilt)} bytes after recompression exceeds "
                    f"max.message.bytes={max_message_bytes}"
                )
            buffer, at = rebuilt, 0
        else:
            buffer, at = out, pos
        batch_size = size if buffer is out else len(buffer)
        _INT64.pack_into(buffer, at + layout.BASE_OFFSET_OFFSET, assigned)
        if not replication:
            _INT32.pack_into(
                buffer, at + layout.PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch
            )
        if not create_time:
            memory_records_builder.set_max_timestamp(buffer, at, batch_size, timestamp_type, now_ms)
            batch_max = now_ms
        else:
            batch_max = scan_max if count else batch_max_timestamp
            type_bit = bool(attributes & layout.TIMESTAMP_TYPE_MASK)
            if batch_max != batch_max_timestamp or type_bit:
                memory_records_builder.set_max_timestamp(
                    buffer, at, batch_size, timestamp_type, batch_max
                )
        if buffer is not out:
            replacements.append((pos, size, bytes(buffer)))
        last_offset = assigned + last_delta
        if first_offset < 0:
            first_offset = assigned
        if batch_max > max_timestamp:
            max_timestamp = batch_max
            offset_of_max = last_offset
        counter = last_offset + 1
        record_count += count
        batch_count += 1
        pos += size

    result: bytes | bytearray = out
    if replacements:
        pieces: list[bytes | bytearray | memoryview] = []
        cursor = 0
        for position, old_size, new in replacements:
            pieces += (memoryview(out)[cursor:position], new)
            cursor = position + old_size
        pieces.append(memoryview(out)[cursor:])
        result = b"".join(pieces)
    return ValidatedRecords(
        buffer=result,
        first_offset=first_offset,
        last_offset=counter - 1,
        max_timestamp=max_timestamp,
        shallow_offset_of_max_timestamp=offset_of_max if offset_of_max >= 0 else counter - 1,
        record_count=record_count,
        batch_count=batch_count,
        log_append_time=layout.NO_TIMESTAMP if create_time else now_ms,
    )


def _check_timestamps(
    min_timestamp: int, max_timestamp: int, config: LogConfig, now_ms: int, where: Callable[[], str]
) -> None:
    if now_ms - min_timestamp > config.message_timestamp_before_max_ms:
        raise InvalidRecordError(
            f"{where()}: timestamp {min_timestamp} is more than message.timestamp.before.max.ms="
            f"{config.message_timestamp_before_max_ms} before now ({now_ms})"
        )
    if max_timestamp - now_ms > config.message_timestamp_after_max_ms:
        raise InvalidRecordError(
            f"{where()}: timestamp {max_timestamp} is more than message.timestamp.after.max.ms="
            f"{config.message_timestamp_after_max_ms} after now ({now_ms})"
        )
