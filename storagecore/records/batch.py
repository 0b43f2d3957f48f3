"""Record batches of magic v2: parse and validate.

:class:`RecordBatch` is a read-only view over the bytes of exactly one batch (from a file, a
request or a builder); it decodes header fields lazily from :mod:`storagecore.records.layout`.
The one writer is :mod:`storagecore.records.memory_records_builder`.

Validation is split the way Kafka splits it: :meth:`RecordBatch.validate` is the shallow check
(size, magic, CRC) that recovery and every read run; :meth:`RecordBatch.records` is the deep
check (record framing, count, exhausted payload), raising :class:`CorruptRecordError` naming the
batch's base offset and the problem.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from collections.abc import Iterator
from typing import Final

from storagecore.errors import CorruptRecordError
from storagecore.records import layout
from storagecore.records.codecs import DEFAULT_MAX_OUTPUT_BYTES, Compression, decompress
from storagecore.records.crc import crc32c
from storagecore.records.varint import (
    decode_varint,
    decode_varlong,
)

Buffer = bytes | bytearray | memoryview

_INT64: Final = struct.Struct(">q")
_INT32: Final = struct.Struct(">i")
_UINT32: Final = struct.Struct(">I")
_INT16: Final = struct.Struct(">h")


class TimestampType(enum.IntEnum):
    """``message.timestamp.type``; bit 3 of the attributes."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def config_name(self) -> str:
        return "CreateTime" if self is TimestampType.CREATE_TIME else "LogAppendTime"


class ControlType(enum.IntEnum):
    """Type field of a control record key (transaction markers and KRaft records)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    UNKNOWN = -1


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """One record as a reader sees it: absolute offset and timestamp resolved."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    #: Bytes of this record inside the uncompressed payload (length varint included).
    size_bytes: int = 0

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


@dataclasses.dataclass(frozen=True, slots=True)
class NewRecord:
    """A record to be written by :func:`build_batch`.

    ``offset_delta`` defaults to the record's index in the batch; the cleaner passes the original
    delta so that offsets survive compaction.
    """

    key: bytes | None
    value: bytes | None
    timestamp: int = layout.NO_TIMESTAMP
    headers: tuple[tuple[str, bytes | None], ...] = ()
    offset_delta: int | None = None


class RecordBatch:
    """A view over the bytes of one complete batch (``len(buffer) == size_bytes``)."""

    __slots__ = ("_buffer", "_header")

    def __init__(self, buffer: Buffer) -> None:
        if len(buffer) < layout.RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"record batch of {len(buffer)} bytes is smaller than the "
                f"{layout.RECORD_BATCH_OVERHEAD}-byte batch header"
            )
        self._buffer = buffer
        self._header = layout.BATCH_HEADER.unpack_from(buffer, 0)

    # -- header fields -------------------------------------------------------------------------
    @property
    def buffer(self) -> Buffer:
        return self._buffer

    @property
    def base_offset(self) -> int:
        return int(self._header[0])

    @property
    def batch_length(self) -> int:
        return int(self._header[1])

    @property
    def size_bytes(self) -> int:
        return self.batch_length + layout.LOG_OVERHEAD

    @property
    def partition_leader_epoch(self) -> int:
        return int(self._header[2])

    @property
    def magic(self) -> int:
        return int(self._header[3])

    @property
    def crc(self) -> int:
        return int(self._header[4])

    @property
    def attributes(self) -> int:
        return int(self._header[5])

    @property
    def last_offset_delta(self) -> int:
        return int(self._header[6])

    @property
    def base_timestamp(self) -> int:
        return int(self._header[7])

    @property
    def max_timestamp(self) -> int:
        return int(self._header[8])

    @property
    def producer_id(self) -> int:
        return int(self._header[9])

    @property
    def producer_epoch(self) -> int:
        return int(self._header[10])

    @property
    def base_sequence(self) -> int:
        return int(self._header[11])

    @property
    def records_count(self) -> int:
        return int(self._header[12])

    # The derived fields below read the header tuple directly: the cleaner and the readers ask
    # for them several times per batch.
    @property
    def last_offset(self) -> int:
        header = self._header
        return int(header[0] + header[6])

    @property
    def next_offset(self) -> int:
        """Authoritative end of the batch: compaction may leave ``records_count`` smaller."""
        header = self._header
        return int(header[0] + header[6] + 1)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == layout.NO_SEQUENCE:
            return layout.NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (layout.INT32_MAX + 1)

    @property
    def compression(self) -> Compression:
        return Compression.from_id(self._header[5] & layout.COMPRESSION_CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & layout.TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self._header[5] & layout.TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self._header[5] & layout.CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self._header[5] & layout.DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """KIP-534: with the delete-horizon flag, baseTimestamp holds the horizon."""
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != layout.NO_PRODUCER_ID

    def compute_crc(self) -> int:
        return crc32c(memoryview(self._buffer)[layout.ATTRIBUTES_OFFSET : self.size_bytes])

    def is_valid(self) -> bool:
        try:
            self.validate()
        except CorruptRecordError:
            return False
        return True

    def validate(self) -> None:
        """Kafka's ``ensureValid``: the sizes agree, the magic is 2, the CRC matches."""
        # Fields read once from the header tuple: every read path and both cleaner passes run
        # this per batch.
        base_offset, batch_length, _, magic, crc, attributes, last_delta, *_, count = self._header
        if batch_length < layout.RECORD_BATCH_OVERHEAD - layout.LOG_OVERHEAD:
            raise CorruptRecordError(
                f"batch at offset {base_offset}: declared length {batch_length} is "
                f"below the {layout.RECORD_BATCH_OVERHEAD}-byte header"
            )
        size = batch_length + layout.LOG_OVERHEAD
        if size != len(self._buffer):
            raise CorruptRecordError(
                f"batch at offset {base_offset}: declared size {size} bytes "
                f"but {len(self._buffer)} bytes present"
            )
        if magic != layout.CURRENT_MAGIC:
            raise CorruptRecordError(
                f"batch at offset {base_offset}: magic {magic}, only magic 2 is supported"
            )
        computed = crc32c(memoryview(self._buffer)[layout.ATTRIBUTES_OFFSET : size])
        if computed != crc:
            raise CorruptRecordError(
                f"batch at offset {base_offset}: CRC mismatch (stored 0x{crc:08x}, "
                f"computed 0x{computed:08x})"
            )
        if count < 0 or last_delta < 0:
            raise CorruptRecordError(
                f"batch at offset {base_offset}: negative record count "
                f"{count} or last offset delta {last_delta}"
            )
        Compression.from_id(attributes & layout.COMPRESSION_CODEC_MASK)

    # -- records -------------------------------------------------------------------------------
    def payload(self, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> bytes:
        """The uncompressed concatenated records."""
        raw = memoryview(self._buffer)[layout.RECORDS_OFFSET : self.size_bytes]
        return decompress(self.compression, raw, max_output_bytes)

    def records(self, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> list[Record]:
        """Decode every record (deep validation: framing, count, nothing left over)."""
        return decode_records(
            self.payload(max_output_bytes),
            count=self.records_count,
            base_offset=self.base_offset,
            base_timestamp=self.base_timestamp,
            log_append_time=(
                self.max_timestamp if self.timestamp_type is TimestampType.LOG_APPEND_TIME else None
            ),
            delete_horizon=self.has_delete_horizon,
        )

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def control_type(self) -> ControlType:
        """For a control batch: the type of its (single) control record."""
        if not self.is_control:
            raise AssertionError("control_type() on a data batch")
        records = self.records()
        if len(records) != 1 or records[0].key is None or len(records[0].key) < 4:
            raise CorruptRecordError(
                f"control batch at offset {self.base_offset} must hold one record with a 4-byte key"
            )
        _version, type_id = layout.CONTROL_RECORD_KEY.unpack_from(records[0].key, 0)
        try:
            return ControlType(type_id)
        except ValueError:
            return ControlType.UNKNOWN

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"count={self.records_count}, size={self.size_bytes}, "
            f"codec={self.compression.config_name})"
        )


def decode_records(
    payload: bytes,
    *,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    delete_horizon: bool = False,
) -> list[Record]:
    """Decode ``count`` records from an uncompressed payload, which they must exactly fill."""
    records: list[Record] = []
    pos = 0
    end = len(payload)
    # With a delete horizon, baseTimestamp holds the horizon; record deltas were re-based on it.
    for index in range(count):
        start = pos
        try:
            length, pos = decode_varint(payload, pos, end)
            body_end = pos + length
            if length < 0 or body_end > end:
                raise CorruptRecordError(f"declared length {length} runs past the batch")
            pos += 1  # attributes int8, unused
            ts_delta, pos = decode_varlong(payload, pos, body_end)
            offset_delta, pos = decode_varint(payload, pos, body_end)
            key_length, pos = decode_varint(payload, pos, body_end)
            key: bytes | None = None
            if key_length >= 0:
                key = payload[pos : pos + key_length]
                pos += key_length
            value_length, pos = decode_varint(payload, pos, body_end)
            value: bytes | None = None
            if value_length >= 0:
                value = payload[pos : pos + value_length]
                pos += value_length
            header_count, pos = decode_varint(payload, pos, body_end)
            if header_count < 0:
                raise CorruptRecordError(f"negative header count {header_count}")
            headers: list[tuple[str, bytes | None]] = []
            for _ in range(header_count):
                hk_length, pos = decode_varint(payload, pos, body_end)
                if hk_length < 0:
                    raise CorruptRecordError("null header key")
                header_key = payload[pos : pos + hk_length].decode("utf-8")
                pos += hk_length
                hv_length, pos = decode_varint(payload, pos, body_end)
                header_value: bytes | None = None
                if hv_length >= 0:
                    header_value = payload[pos : pos + hv_length]
                    pos += hv_length
                headers.append((header_key, header_value))
            if pos != body_end:
                raise CorruptRecordError(
                    f"record body is {length} bytes but {pos - (body_end - length)} were read"
                )
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"batch at offset {base_offset}, record {index} "
                f"(byte {start} of the payload): {exc}"
            ) from exc
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(
                f"batch at offset {base_offset}, record {index}: header key is not UTF-8"
            ) from exc
        timestamp = log_append_time if log_append_time is not None else base_timestamp + ts_delta
        records.append(
            Record(
                offset=base_offset + offset_delta,
                timestamp=timestamp,
                key=key,
                value=value,
                headers=tuple(headers),
                size_bytes=pos - start,
            )
        )
    if pos != end:
        raise CorruptRecordError(
            f"batch at offset {base_offset}: {end - pos} bytes left after {count} records "
            f"(incorrect declared batch size)"
        )
    return records


def iter_complete_batches(buffer: Buffer) -> Iterator[tuple[int, RecordBatch]]:
    """Batches of a fetch result: whole batches, a cut-off last batch silently ignored.

    Legacy v0/v1 entries (old data served as stored) come as their own views."""
    from storagecore.records.legacy import LegacyRecordBatch  # noqa: PLC0415 - it imports us

    pos = 0
    end = len(buffer)
    view = memoryview(buffer)
    while end - pos >= layout.HEADER_SIZE_UP_TO_MAGIC:
        (length,) = _INT32.unpack_from(buffer, pos + layout.LENGTH_OFFSET)
        size = length + layout.LOG_OVERHEAD
        legacy = buffer[pos + layout.MAGIC_OFFSET] < layout.CURRENT_MAGIC
        minimum = (
            layout.MIN_DECLARED_BATCH_LENGTH
            if legacy
            else layout.RECORD_BATCH_OVERHEAD - layout.LOG_OVERHEAD
        )
        if length < minimum:
            raise CorruptRecordError(f"batch at byte {pos}: declared length {length} is too small")
        if pos + size > end:
            return
        entry = view[pos : pos + size]
        yield pos, LegacyRecordBatch(entry) if legacy else RecordBatch(entry)
        pos += size
