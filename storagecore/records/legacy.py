"""Legacy message sets, magic v0 (before Kafka 0.10) and v1 (0.10): layout, read, write.

Kafka still keeps and reads such data on disk (a log dir that has lived since 0.10, a copied
``__consumer_offsets``), so storagecore reads it: :class:`LegacyRecordBatch` is a view over one
*shallow* entry of a ``.log`` file, as Kafka's ``AbstractLegacyRecordBatch`` is, and answers the
same questions as :class:`~storagecore.records.batch.RecordBatch` (it is one, as both are
Kafka ``RecordBatch``\\ es), so every reader, the loader and the tools walk mixed segments
without asking which format they hold. The writer, :func:`build_legacy_entry`, is the
cleaner's (a wrapper whose inner messages are partly retained is rewritten in its own magic
and codec) and the tests'. Nothing new is ever appended in these formats.

Byte layout of one entry (all integers big-endian, Kafka ``LegacyRecord``)::

    offset: int64        the (last) offset: of the message, or of a wrapper's last inner message
    size: int32          bytes after this field
    crc: uint32          CRC-32 (not C) of magic .. end
    magic: int8          0 or 1
    attributes: int8     bits 0-2 codec (none, gzip, snappy, lz4), bit 3 LogAppendTime (v1)
    timestamp: int64     v1 only
    key: int32 length (-1 = null) + bytes
    value: int32 length (-1 = null) + bytes

A compressed entry (a *wrapper*) has a null key and, as its value, the compressed bytes of an
inner message set: entries of the same shape, uncompressed. Inner offsets are absolute in v0
and relative to the wrapper's in v1 (``absolute = wrapper offset - last inner + inner``;
a wrapper offset of 0 means relative offsets taken as absolute, as some librdkafka versions
wrote). A v1 wrapper with LogAppendTime gives every inner message its timestamp; a v0 message
has no timestamp (-1 in the time index and in ListOffsets, as Kafka answers).

v0's lz4 frames carry a wrong header checksum (KAFKA-3160: Kafka's old writer hashed the frame
magic too); Kafka's reader ignores that byte for magic 0 and its writer still writes it so.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import Final, NamedTuple

from storagecore.errors import CorruptRecordError
from storagecore.native import load_extension
from storagecore.records import layout
from storagecore.records.batch import Buffer, ControlType, Record, RecordBatch, TimestampType
from storagecore.records.codecs import DEFAULT_MAX_OUTPUT_BYTES, Compression, compress, decompress

MAGIC_V0: Final = 0
MAGIC_V1: Final = 1

#: offset, size, crc, magic, attributes: what both versions start with.
ENTRY_HEADER: Final = struct.Struct(
    ">"
    "q"  # offset
    "i"  # size: bytes after this field
    "I"  # crc (CRC-32 of magic .. end)
    "b"  # magic
    "b"  # attributes
)
_TIMESTAMP: Final = struct.Struct(">q")
_LENGTH: Final = struct.Struct(">i")

# Positions, each derived from the one before it (entry-relative).
OFFSET_OFFSET: Final = 0
SIZE_OFFSET: Final = OFFSET_OFFSET + struct.calcsize(">q")
CRC_OFFSET: Final = SIZE_OFFSET + struct.calcsize(">i")
MAGIC_OFFSET: Final = CRC_OFFSET + struct.calcsize(">I")
ATTRIBUTES_OFFSET: Final = MAGIC_OFFSET + struct.calcsize(">b")
TIMESTAMP_OFFSET: Final = ATTRIBUTES_OFFSET + struct.calcsize(">b")  # v1 only
KEY_LENGTH_OFFSET_V0: Final = TIMESTAMP_OFFSET
KEY_LENGTH_OFFSET_V1: Final = TIMESTAMP_OFFSET + _TIMESTAMP.size

#: Kafka ``LegacyRecord.RECORD_OVERHEAD_V0/V1``: crc, magic, attributes, [timestamp], key and
#: value lengths. A message smaller than its version's overhead is invalid.
RECORD_OVERHEAD_V0: Final = KEY_LENGTH_OFFSET_V0 - CRC_OFFSET + 2 * _LENGTH.size
RECORD_OVERHEAD_V1: Final = KEY_LENGTH_OFFSET_V1 - CRC_OFFSET + 2 * _LENGTH.size
#: The codecs the legacy formats know (zstd came with v2).
LEGACY_CODECS: Final = (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4)

assert MAGIC_OFFSET == layout.MAGIC_OFFSET, "the magic byte sits where v2 readers dispatch on it"
assert ENTRY_HEADER.size == ATTRIBUTES_OFFSET + 1 == 18
assert (RECORD_OVERHEAD_V0, RECORD_OVERHEAD_V1) == (14, 22), "Kafka's minimum message sizes"
assert RECORD_OVERHEAD_V0 == layout.MIN_DECLARED_BATCH_LENGTH
assert layout.LOG_OVERHEAD == CRC_OFFSET


def record_overhead(magic: int) -> int:
    return RECORD_OVERHEAD_V0 if magic == MAGIC_V0 else RECORD_OVERHEAD_V1


class LegacyMessage(NamedTuple):
    """One decoded legacy entry (shallow or inner), offsets and timestamps as stored."""

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    size_bytes: int  # of the whole entry, offset and size fields included


def parse_entry(buffer: Buffer, position: int, end: int, where: str) -> LegacyMessage:
    """The entry at ``position`` (framing and CRC checked, ``end`` bounding it)."""
    if end - position < ENTRY_HEADER.size:
        raise CorruptRecordError(
            f"{where}: {end - position} bytes left, less than a message's "
            f"{ENTRY_HEADER.size}-byte header"
        )
    offset, size, crc, magic, attributes = ENTRY_HEADER.unpack_from(buffer, position)
    entry_end = position + layout.LOG_OVERHEAD + size
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise CorruptRecordError(f"{where}: magic {magic} in a legacy message set")
    if size < record_overhead(magic):
        raise CorruptRecordError(
            f"{where}: message of {size} bytes is below the v{magic} minimum of "
            f"{record_overhead(magic)} bytes"
        )
    if entry_end > end:
        raise CorruptRecordError(f"{where}: message of {size} bytes runs past its message set")
    computed = zlib.crc32(memoryview(buffer)[position + MAGIC_OFFSET : entry_end])
    if computed != crc:
        raise CorruptRecordError(
            f"{where}: CRC-32 mismatch (stored 0x{crc:08x}, computed 0x{computed:08x})"
        )
    pos = position + KEY_LENGTH_OFFSET_V0
    timestamp = layout.NO_TIMESTAMP
    if magic == MAGIC_V1:
        (timestamp,) = _TIMESTAMP.unpack_from(buffer, pos)
        pos += _TIMESTAMP.size
    key, pos = _bytes_field(buffer, pos, entry_end, where, "key")
    value, pos = _bytes_field(buffer, pos, entry_end, where, "value")
    if pos != entry_end:
        raise CorruptRecordError(
            f"{where}: message declares {size} bytes, its fields take "
            f"{pos - position - layout.LOG_OVERHEAD}"
        )
    return LegacyMessage(offset, magic, attributes, timestamp, key, value, entry_end - position)


def _bytes_field(
    buffer: Buffer, pos: int, end: int, where: str, name: str
) -> tuple[bytes | None, int]:
    if end - pos < _LENGTH.size:
        raise CorruptRecordError(f"{where}: {name} length runs past the message")
    (length,) = _LENGTH.unpack_from(buffer, pos)
    pos += _LENGTH.size
    if length < 0:
        return None, pos
    if length > end - pos:
        raise CorruptRecordError(f"{where}: {name} of {length} bytes runs past the message")
    return bytes(buffer[pos : pos + length]), pos + length


def codec_of(attributes: int, where: str) -> Compression:
    codec_id = attributes & layout.COMPRESSION_CODEC_MASK
    codec = _LEGACY_CODEC_BY_ID.get(codec_id)
    if codec is None:
        raise CorruptRecordError(f"{where}: codec id {codec_id} in a legacy message (0..3 only)")
    return codec


_LEGACY_CODEC_BY_ID: Final = {codec.value: codec for codec in LEGACY_CODECS}


class LegacyRecordBatch(RecordBatch):
    """One shallow legacy entry of a file: a plain message, or a wrapper and its inner ones.

    The header fields a v2 batch stores are answered as Kafka's legacy batches answer them:
    no producer (-1), no partition leader epoch (-1), the last offset from the entry's offset,
    the base offset and count from the inner messages (decompressed once, on first use), and
    the entry's timestamp as the max timestamp (-1 for v0).
    """

    __slots__ = ("_entry", "_records")

    def __init__(self, buffer: Buffer) -> None:
        if len(buffer) < ENTRY_HEADER.size:
            raise CorruptRecordError(
                f"legacy message of {len(buffer)} bytes is smaller than its "
                f"{ENTRY_HEADER.size}-byte header"
            )
        self._buffer = buffer
        self._entry = ENTRY_HEADER.unpack_from(buffer, 0)
        self._records: list[Record] | None = None
        # The inherited tuple-reading properties are all overridden below.
        self._header = ()

    # -- header fields -------------------------------------------------------------------------
    @property
    def base_offset(self) -> int:
        if self.compression is Compression.NONE:
            return int(self._entry[0])
        return self.records()[0].offset

    @property
    def batch_length(self) -> int:
        return int(self._entry[1])

    @property
    def partition_leader_epoch(self) -> int:
        return layout.NO_PARTITION_LEADER_EPOCH

    @property
    def magic(self) -> int:
        return int(self._entry[3])

    @property
    def crc(self) -> int:
        return int(self._entry[2])

    @property
    def attributes(self) -> int:
        return int(self._entry[4]) & 0xFF

    @property
    def last_offset_delta(self) -> int:
        return self.last_offset - self.base_offset

    @property
    def base_timestamp(self) -> int:
        return self.max_timestamp

    @property
    def max_timestamp(self) -> int:
        """The entry's own timestamp (a wrapper's: its inner maximum or the append time)."""
        if self.magic != MAGIC_V1 or len(self._buffer) < KEY_LENGTH_OFFSET_V1:
            return layout.NO_TIMESTAMP
        return int(_TIMESTAMP.unpack_from(self._buffer, TIMESTAMP_OFFSET)[0])

    @property
    def producer_id(self) -> int:
        return layout.NO_PRODUCER_ID

    @property
    def producer_epoch(self) -> int:
        return layout.NO_PRODUCER_EPOCH

    @property
    def base_sequence(self) -> int:
        return layout.NO_SEQUENCE

    @property
    def records_count(self) -> int:
        if self.compression is Compression.NONE:
            return 1
        return len(self.records())

    @property
    def last_offset(self) -> int:
        return int(self._entry[0])

    @property
    def next_offset(self) -> int:
        return int(self._entry[0]) + 1

    @property
    def compression(self) -> Compression:
        return codec_of(self.attributes, f"message at offset {self.last_offset}")

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == MAGIC_V1 and self.attributes & layout.TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def timestamp_type_name(self) -> str:
        """Kafka's name: v0 has NoTimestampType."""
        return "NoTimestampType" if self.magic == MAGIC_V0 else self.timestamp_type.config_name

    @property
    def is_transactional(self) -> bool:
        return False

    @property
    def is_control(self) -> bool:
        return False

    @property
    def has_delete_horizon(self) -> bool:
        return False

    def compute_crc(self) -> int:
        return zlib.crc32(memoryview(self._buffer)[MAGIC_OFFSET : self.size_bytes])

    def validate(self) -> None:
        """Kafka's shallow ``ensureValid``: sizes, magic 0/1, the v0/v1 minimum, CRC-32."""
        size = self.batch_length + layout.LOG_OVERHEAD
        if size != len(self._buffer):
            raise CorruptRecordError(
                f"message at offset {self.last_offset}: declared size {size} bytes but "
                f"{len(self._buffer)} bytes present"
            )
        problem = _check_entry(self._buffer)
        if problem is not None:
            raise CorruptRecordError(problem)

    # -- records -------------------------------------------------------------------------------
    def payload(self, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> bytes:
        """The uncompressed message set: the entry itself, or a wrapper's inner entries."""
        if self.compression is Compression.NONE:
            return bytes(self._buffer)
        entry = parse_entry(self._buffer, 0, len(self._buffer), f"offset {self.last_offset}")
        return _decompress_inner(entry, max_output_bytes)

    def records(self, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> list[Record]:
        if self._records is None:
            self._records = decode_entry(self._buffer, max_output_bytes)
        return self._records

    def control_type(self) -> ControlType:
        raise AssertionError("control_type() on a legacy message: v0/v1 have no control batches")

    def __repr__(self) -> str:
        return (
            f"LegacyRecordBatch(magic={self.magic}, last_offset={self.last_offset}, "
            f"size={self.size_bytes}, codec={self.compression.config_name})"
        )


def _decompress_inner(wrapper: LegacyMessage, max_output_bytes: int) -> bytes:
    where = f"wrapper message at offset {wrapper.offset}"
    if wrapper.value is None:
        raise CorruptRecordError(
            f"{where}: compressed message set with a null value (magic {wrapper.magic})"
        )
    codec = codec_of(wrapper.attributes, where)
    value = wrapper.value
    if codec is Compression.LZ4 and wrapper.magic == MAGIC_V0:
        value = fix_lz4_header_checksum(value)
    try:
        return decompress(codec, value, max_output_bytes)
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"{where}: {exc}") from exc


def decode_message_set(
    data: Buffer,
    wrapper_magic: int,
    wrapper_offset: int,
    log_append: bool,
    log_append_time: int,
) -> list[tuple[int, int, bytes | None, bytes | None]] | str:
    """The (offset, timestamp, key, value) of every message of ``data``, or what is wrong.

    The reference of the native ``decode_legacy_set`` (storagecore/records/_legacy.c), same
    answer and same problem text on every input. Every entry is checked as
    :func:`parse_entry` does and none may be compressed. ``wrapper_magic`` is -1 for entries
    as stored in a file, else the magic of the wrapper ``data`` was decompressed from: then
    the set must not be empty, a v1 wrapper's non-zero ``wrapper_offset`` makes inner offsets
    relative (at least the last inner one), and a v1 message in a LogAppendTime wrapper
    (``log_append``) takes ``log_append_time``.
    """
    messages: list[LegacyMessage] = []
    pos = 0
    try:
        while pos < len(data):
            where = f"message {len(messages)} at byte {pos}"
            message = parse_entry(data, pos, len(data), where)
            if message.attributes & layout.COMPRESSION_CODEC_MASK:
                what = (
                    "inner messages must not be compressed"
                    if wrapper_magic >= 0
                    else "a compressed wrapper, not a plain message"
                )
                return f"{where}: {what}"
            messages.append(message)
            pos += message.size_bytes
    except CorruptRecordError as exc:
        return str(exc)
    if wrapper_magic >= 0 and not messages:
        return "compressed message set with no inner messages"
    base = 0
    relative = wrapper_magic == MAGIC_V1 and wrapper_offset != 0
    if relative:
        last_inner = messages[-1].offset
        if wrapper_offset < last_inner:
            return (
                f"wrapper offset {wrapper_offset} is less than the last inner message offset "
                f"{last_inner} and it is not zero"
            )
        base = wrapper_offset - last_inner
    return [
        (
            base + m.offset if relative else m.offset,
            log_append_time if (m.magic == MAGIC_V1 and log_append) else m.timestamp,
            m.key,
            m.value,
        )
        for m in messages
    ]


def check_entry(entry: Buffer) -> str | None:
    """What is wrong with one shallow entry of exactly ``len(entry)`` bytes (a plain message or
    a wrapper: framing, magic, minimum size, CRC-32, fields, a legacy codec id), or None. The
    reference of the native ``check_legacy_entry``."""
    offset = int.from_bytes(entry[:8], "big", signed=True) if len(entry) >= 8 else -1
    where = f"message at offset {offset}"
    position = 0
    try:
        while position < len(entry):  # one entry when its size is right (validate checks it)
            message = parse_entry(entry, position, len(entry), where)
            codec_of(message.attributes, where)
            position += message.size_bytes
    except CorruptRecordError as exc:
        return str(exc)
    return None


_NATIVE = load_extension("storagecore.records._native")
_decode_set: Final = decode_message_set if _NATIVE is None else _NATIVE.decode_legacy_set
_check_entry: Final = check_entry if _NATIVE is None else _NATIVE.check_legacy_entry
#: "c" or "python": which implementation decodes message sets here (tests assert it).
IMPLEMENTATION: Final[str] = "python" if _NATIVE is None else "c"


def decode_entry(buffer: Buffer, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> list[Record]:
    """The records of one shallow entry, offsets absolute and timestamps resolved."""
    outer = parse_entry(buffer, 0, len(buffer), "message at offset ?")
    where = f"message at offset {outer.offset}"
    codec = codec_of(outer.attributes, where)
    if codec is Compression.NONE:
        return [Record(outer.offset, outer.timestamp, outer.key, outer.value, (), outer.size_bytes)]
    inner_set = _decompress_inner(outer, max_output_bytes)
    log_append = outer.magic == MAGIC_V1 and bool(outer.attributes & layout.TIMESTAMP_TYPE_MASK)
    decoded = _decode_set(inner_set, outer.magic, outer.offset, log_append, outer.timestamp)
    if isinstance(decoded, str):
        raise CorruptRecordError(f"{where}: {decoded}")
    return [Record(offset, ts, key, value) for offset, ts, key, value in decoded]


# -- writing ---------------------------------------------------------------------------------
def encode_message(
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    *,
    key: bytes | None,
    value: bytes | None,
) -> bytes:
    """One entry: offset, size, CRC-32 and the message (Kafka ``LegacyRecord.write``)."""
    assert magic in (MAGIC_V0, MAGIC_V1), magic
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic == MAGIC_V1:
        body += _TIMESTAMP.pack(timestamp)
    for field in (key, value):
        if field is None:
            body += _LENGTH.pack(-1)
        else:
            body += _LENGTH.pack(len(field))
            body += field
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, len(body) + struct.calcsize(">I"), crc) + bytes(body)


class LegacyRecordToWrite(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def build_legacy_entry(
    magic: int,
    codec: Compression,
    timestamp_type: TimestampType,
    records: Sequence[LegacyRecordToWrite],
    log_append_time: int = layout.NO_TIMESTAMP,
) -> bytes:
    """Kafka's ``MemoryRecordsBuilder`` for magic 0/1 with the cleaner's arguments: plain
    messages one entry each; compressed, one wrapper whose offset is the last record's, with
    inner offsets absolute (v0) or relative to the first record (v1), and a timestamp that is
    the inner maximum (CreateTime) or ``log_append_time`` (LogAppendTime)."""
    assert records, "a legacy entry holds at least one message"
    assert codec in LEGACY_CODECS, codec
    type_bit = (
        layout.TIMESTAMP_TYPE_MASK
        if magic == MAGIC_V1 and timestamp_type is TimestampType.LOG_APPEND_TIME
        else 0
    )

    def stamp(record: LegacyRecordToWrite) -> int:
        if magic == MAGIC_V0:
            return layout.NO_TIMESTAMP
        return log_append_time if type_bit else record.timestamp

    if codec is Compression.NONE:
        return b"".join(
            encode_message(r.offset, magic, type_bit, stamp(r), key=r.key, value=r.value)
            for r in records
        )
    base = records[0].offset
    inner = b"".join(
        encode_message(
            r.offset if magic == MAGIC_V0 else r.offset - base,
            magic,
            type_bit,
            stamp(r),
            key=r.key,
            value=r.value,
        )
        for r in records
    )
    value = compress(codec, inner)
    if codec is Compression.LZ4 and magic == MAGIC_V0:
        value = break_lz4_header_checksum(value)
    wrapper_ts = (
        layout.NO_TIMESTAMP
        if magic == MAGIC_V0
        else (log_append_time if type_bit else max(r.timestamp for r in records))
    )
    return encode_message(
        records[-1].offset, magic, type_bit | codec.value, wrapper_ts, key=None, value=value
    )


# -- lz4 frame header checksum (KAFKA-3160) ----------------------------------------------------
_LZ4_MAGIC: Final = b"\x04\x22\x4d\x18"
_LZ4_CONTENT_SIZE_FLAG: Final = 0x08
_PRIME1, _PRIME2, _PRIME3, _PRIME4, _PRIME5 = (
    2654435761,
    2246822519,
    3266489917,
    668265263,
    374761393,
)
_MASK32: Final = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of a short input (a frame descriptor: at most 15 bytes, no 16-byte stripes)."""
    assert len(data) < 16, "only frame descriptors are hashed here"
    acc = (seed + _PRIME5 + len(data)) & _MASK32
    pos = 0
    while pos + 4 <= len(data):
        (lane,) = struct.unpack_from("<I", data, pos)
        acc = (_rotl((acc + lane * _PRIME3) & _MASK32, 17) * _PRIME4) & _MASK32
        pos += 4
    while pos < len(data):
        acc = (_rotl((acc + data[pos] * _PRIME5) & _MASK32, 11) * _PRIME1) & _MASK32
        pos += 1
    acc ^= acc >> 15
    acc = (acc * _PRIME2) & _MASK32
    acc ^= acc >> 13
    acc = (acc * _PRIME3) & _MASK32
    acc ^= acc >> 16
    return acc


def _descriptor_end(frame: bytes) -> int:
    """Position of the HC byte of an lz4 frame (after FLG, BD and an optional content size)."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        raise CorruptRecordError("lz4 payload does not start with an lz4 frame header")
    end = 6 + (8 if frame[4] & _LZ4_CONTENT_SIZE_FLAG else 0)
    if len(frame) <= end:
        raise CorruptRecordError("lz4 frame header is truncated")
    return end


def fix_lz4_header_checksum(frame: bytes) -> bytes:
    """The frame with a correct HC byte: Kafka ignores v0's, liblz4 checks it."""
    end = _descriptor_end(frame)
    correct = (xxh32(frame[4:end]) >> 8) & 0xFF
    return frame[:end] + bytes([correct]) + frame[end + 1 :]


def break_lz4_header_checksum(frame: bytes) -> bytes:
    """The frame with v0's HC byte, hashed from the frame magic on (Kafka's v0 writer)."""
    end = _descriptor_end(frame)
    broken = (xxh32(frame[:end]) >> 8) & 0xFF
    return frame[:end] + bytes([broken]) + frame[end + 1 :]


def is_legacy(buffer: Buffer, position: int = 0) -> bool:
    """Whether the entry at ``position`` (at least 17 bytes present) is v0/v1."""
    return buffer[position + MAGIC_OFFSET] < layout.CURRENT_MAGIC


def batch_view(buffer: Buffer) -> RecordBatch:
    """The right view for one complete entry: v2 batch or legacy message."""
    if len(buffer) > MAGIC_OFFSET and buffer[MAGIC_OFFSET] in (MAGIC_V0, MAGIC_V1):
        return LegacyRecordBatch(buffer)
    return RecordBatch(buffer)
