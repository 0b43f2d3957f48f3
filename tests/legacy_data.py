"""Legacy (magic v0/v1) log data built and read by kafka-python, the independent oracle.

kafka-python's ``LegacyRecordBatchBuilder`` writes what a v0/v1 producer sent; a broker of that
era then stored it with the wrapper's offset set to its last inner offset and, for v1
CreateTime, the wrapper's timestamp set to the inner maximum (CRC recomputed, as Kafka's
``setMaxTimestamp`` does). :func:`kp_entry` does those two steps, so its output is what an
old broker's ``.log`` file holds. :func:`kp_read` is kafka-python's reading of any entry.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from kafka.record.legacy_records import LegacyRecordBatch as KpLegacyBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder

_OFFSET_AND_SIZE = struct.Struct(">qi")
_TIMESTAMP_POSITION = 18
_CRC_POSITION = 12
_MAGIC_POSITION = 16


class Message(NamedTuple):
    """One record as a model sees it: absolute offset, timestamp (-1 none), key, value."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def kp_entry(
    magic: int,
    codec: int,
    messages: Sequence[tuple[int, bytes | None, bytes | None]],
    base_offset: int,
    *,
    log_append_time: int | None = None,
) -> bytes:
    """The log bytes of ``messages`` (timestamp, key, value) at ``base_offset`` onwards: one
    entry per message uncompressed, else one wrapper (v0 absolute, v1 relative inner offsets).
    ``log_append_time`` stamps a v1 wrapper as the broker did for LogAppendTime topics."""
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 24)
    for index, (timestamp, key, value) in enumerate(messages):
        relative = codec != 0 and magic == 1
        builder.append(index if relative else base_offset + index, timestamp, key, value)
    data = bytearray(builder.build())
    if codec == 0:
        return bytes(data)
    struct.pack_into(">q", data, 0, base_offset + len(messages) - 1)
    if magic == 1:
        if log_append_time is not None:
            data[_MAGIC_POSITION + 1] |= 0x08
            struct.pack_into(">q", data, _TIMESTAMP_POSITION, log_append_time)
        else:
            struct.pack_into(">q", data, _TIMESTAMP_POSITION, max(m[0] for m in messages))
        struct.pack_into(">I", data, _CRC_POSITION, zlib.crc32(data[_MAGIC_POSITION:]))
    return bytes(data)


def entries(data: bytes) -> list[bytes]:
    """The shallow entries of a legacy message set."""
    out: list[bytes] = []
    position = 0
    while position < len(data):
        _offset, size = _OFFSET_AND_SIZE.unpack_from(data, position)
        out.append(data[position : position + size + 12])
        position += size + 12
    return out


def kp_read(data: bytes) -> list[Message]:
    """kafka-python's reading of a legacy message set (every shallow entry, deep)."""
    out: list[Message] = []
    for entry in entries(data):
        batch = KpLegacyBatch(entry, entry[_MAGIC_POSITION])
        assert batch.validate_crc(), "kafka-python rejects the entry's CRC"
        for record in batch:
            assert record.validate_crc()
            timestamp = -1 if record.timestamp is None else record.timestamp
            key = None if record.key is None else bytes(record.key)
            value = None if record.value is None else bytes(record.value)
            out.append(Message(record.offset, timestamp, key, value))
    return out


def write_segment(directory: Path, base_offset: int, parts: Sequence[bytes]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{base_offset:020d}.log"
    path.write_bytes(b"".join(parts))
    return path
