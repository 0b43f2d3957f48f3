"""Zigzag varints and varlongs as Kafka writes them inside records (protobuf base-128 groups).

Decoders take a buffer and a position and return ``(value, next_position)``; they raise
:class:`~storagecore.errors.CorruptRecordError` on a truncated or over-long encoding and never
read past ``end``.
"""

from __future__ import annotations

from storagecore.errors import CorruptRecordError
from storagecore.records.layout import MAX_VARINT_BYTES, MAX_VARLONG_BYTES

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def encode_varint(value: int) -> bytes:
    """Encode a signed 32-bit integer as a zigzag varint."""
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"varint value {value} does not fit in int32")
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """Encode a signed 64-bit integer as a zigzag varlong."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varlong value {value} does not fit in int64")
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _encode_unsigned(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def decode_varint(buf: bytes | memoryview, pos: int, end: int | None = None) -> tuple[int, int]:
    """Decode a zigzag varint (at most 5 bytes) at ``pos``."""
    return _decode(buf, pos, len(buf) if end is None else end, MAX_VARINT_BYTES, "varint", 32)


def decode_varlong(buf: bytes | memoryview, pos: int, end: int | None = None) -> tuple[int, int]:
    """Decode a zigzag varlong (at most 10 bytes) at ``pos``."""
    return _decode(buf, pos, len(buf) if end is None else end, MAX_VARLONG_BYTES, "varlong", 64)


def _decode(  # noqa: PLR0917 - private, two callers
    buf: bytes | memoryview, pos: int, end: int, max_bytes: int, what: str, bits: int
) -> tuple[int, int]:
    """Kafka's ByteUtils.readVarint/readVarlong: bits beyond ``bits`` are dropped."""
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise CorruptRecordError(f"truncated {what} at byte {start}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if pos - start >= max_bytes:
            raise CorruptRecordError(f"{what} at byte {start} is longer than {max_bytes} bytes")
    result &= (1 << bits) - 1
    return (result >> 1) ^ -(result & 1), pos


def varint_size(value: int) -> int:
    """Bytes taken by ``encode_varint(value)`` (used to size records without encoding them)."""
    n = ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size
