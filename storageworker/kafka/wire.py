"""Kafka protocol primitives: what every request and response is made of.

Big-endian fixed-width integers, unsigned varints (lengths of compact types), zigzag varints,
strings and bytes with an int16/int32 length (-1: null) or, in flexible versions, an unsigned
varint length + 1 (0: null), arrays likewise, and tagged fields (skipped on read, none written).
A short or malformed buffer raises :class:`ProtocolError` naming what was being read.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final, TypeVar

from storagecore.records.file_records import FileRegion

T = TypeVar("T")

_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_U32: Final = struct.Struct(">I")
_F64: Final = struct.Struct(">d")
#: A :meth:`Writer.raw` of at least this many bytes (records) is kept as a part of its own.
OWN_PART_BYTES: Final = 4096


class ProtocolError(ValueError):
    """A request that cannot be decoded (the connection is then closed)."""


class Reader:
    def __init__(self, data: bytes | memoryview) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, size: int, what: str) -> memoryview:
        pos = self.pos
        end = pos + size
        if size < 0 or end > len(self.data):
            raise ProtocolError(f"truncated {what} at byte {pos}")
        self.pos = end
        return self.data[pos:end]

    def _fixed(self, layout: struct.Struct, what: str) -> int:
        """One fixed-width integer (unpacked in place: no slice of the buffer)."""
        pos = self.pos
        end = pos + layout.size
        if end > len(self.data):
            raise ProtocolError(f"truncated {what} at byte {pos}")
        self.pos = end
        return int(layout.unpack_from(self.data, pos)[0])

    def int8(self) -> int:
        return self._fixed(_I8, "int8")

    def int16(self) -> int:
        return self._fixed(_I16, "int16")

    def int32(self) -> int:
        return self._fixed(_I32, "int32")

    def int64(self) -> int:
        return self._fixed(_I64, "int64")

    def boolean(self) -> bool:
        return self.int8() != 0

    def uvarint(self) -> int:
        pos = self.pos
        if pos < len(self.data) and self.data[pos] < 0x80:  # one byte: most lengths and counts
            self.pos = pos + 1
            return self.data[pos]
        result = shift = 0
        for _ in range(5):
            byte = self.take(1, "varint")[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
        raise ProtocolError(f"varint longer than 5 bytes at byte {self.pos}")

    def nullable_string(self) -> str | None:
        length = self.int16()
        return None if length < 0 else self.decode_text(self.take(length, "string"))

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise ProtocolError(f"null string at byte {self.pos}")
        return value

    def compact_nullable_string(self) -> str | None:
        length = self.uvarint() - 1
        return None if length < 0 else self.decode_text(self.take(length, "compact string"))

    def compact_string(self) -> str:
        value = self.compact_nullable_string()
        if value is None:
            raise ProtocolError(f"null compact string at byte {self.pos}")
        return value

    def float64(self) -> float:
        return float(_F64.unpack(self.take(8, "float64"))[0])

    @staticmethod
    def decode_text(view: memoryview, what: str = "string") -> str:
        try:
            return str(view, "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"{what} is not UTF-8: {exc}") from None

    def nullable_bytes(self) -> bytes | None:
        length = self.int32()
        return None if length < 0 else bytes(self.take(length, "bytes"))

    def compact_nullable_bytes(self) -> bytes | None:
        length = self.uvarint() - 1
        return None if length < 0 else bytes(self.take(length, "compact bytes"))

    def array(self, item: Callable[[], T], *, limit: int = 1 << 20) -> list[T] | None:
        count = self.int32()
        if count < 0:
            return None
        if count > limit:
            raise ProtocolError(f"array of {count} items exceeds {limit}")
        return [item() for _ in range(count)]

    def compact_array(self, item: Callable[[], T], *, limit: int = 1 << 20) -> list[T] | None:
        count = self.uvarint() - 1
        if count < 0:
            return None
        if count > limit:
            raise ProtocolError(f"array of {count} items exceeds {limit}")
        return [item() for _ in range(count)]

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint(), "tagged field")

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos


class Writer:
    """Builds a message from parts (joined once, when sent); ``size`` is their total.

    Small writes (the fields) go into one buffer, which becomes a part when a large one
    (records of at least :data:`OWN_PART_BYTES`, kept as they are, not copied) or a
    :class:`FileRegion` (a fetch's records: the connection sends it with sendfile and closes
    it; :meth:`close` does, for a message that is not sent) comes, or when ``parts`` is read.
    """

    def __init__(self) -> None:
        self._parts: list[bytes | FileRegion] = []
        self._parts_size = 0
        self._buffer = bytearray()

    @property
    def parts(self) -> list[bytes | FileRegion]:
        self._flush()
        return self._parts

    @property
    def size(self) -> int:
        return self._parts_size + len(self._buffer)

    def _flush(self) -> None:
        if self._buffer:
            self._parts.append(bytes(self._buffer))
            self._parts_size += len(self._buffer)
            self._buffer.clear()

    def region(self, region: FileRegion) -> Writer:
        self._flush()
        self._parts.append(region)
        self._parts_size += region.size_bytes
        return self

    def close(self) -> None:
        """Close the message's file regions (after sending it, or instead)."""
        for part in self._parts:
            if isinstance(part, FileRegion):
                part.close()

    def raw(self, data: bytes) -> Writer:
        if len(data) < OWN_PART_BYTES:
            self._buffer += data
            return self
        self._flush()
        self._parts.append(data)
        self._parts_size += len(data)
        return self

    def extend(self, other: Writer) -> Writer:
        if not other._parts:
            self._buffer += other._buffer
            return self
        self._flush()
        self._parts.extend(other.parts)
        self._parts_size += other._parts_size
        return self

    def int8(self, value: int) -> Writer:
        self._buffer += _I8.pack(value)
        return self

    def int16(self, value: int) -> Writer:
        self._buffer += _I16.pack(value)
        return self

    def int32(self, value: int) -> Writer:
        self._buffer += _I32.pack(value)
        return self

    def int64(self, value: int) -> Writer:
        self._buffer += _I64.pack(value)
        return self

    def float64(self, value: float) -> Writer:
        return self.raw(_F64.pack(value))

    def boolean(self, value: bool) -> Writer:
        return self.int8(1 if value else 0)

    def uvarint(self, value: int) -> Writer:
        out = self._buffer
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        return self

    def nullable_string(self, value: str | None) -> Writer:
        if value is None:
            return self.int16(-1)
        encoded = value.encode("utf-8")
        return self.int16(len(encoded)).raw(encoded)

    def compact_nullable_string(self, value: str | None) -> Writer:
        if value is None:
            return self.uvarint(0)
        encoded = value.encode("utf-8")
        return self.uvarint(len(encoded) + 1).raw(encoded)

    def nullable_bytes(self, value: bytes | FileRegion | None) -> Writer:
        if value is None:
            return self.int32(-1)
        self.int32(len(value))
        return self.region(value) if isinstance(value, FileRegion) else self.raw(bytes(value))

    def compact_nullable_bytes(self, value: bytes | FileRegion | None) -> Writer:
        if value is None:
            return self.uvarint(0)
        self.uvarint(len(value) + 1)
        return self.region(value) if isinstance(value, FileRegion) else self.raw(bytes(value))

    def array_length(self, count: int | None, *, compact: bool = False) -> Writer:
        if compact:
            return self.uvarint(0 if count is None else count + 1)
        return self.int32(-1 if count is None else count)

    def tagged_fields(self) -> Writer:
        return self.uvarint(0)

    def bytes(self) -> bytes:
        """The whole message (file regions read: the copy path)."""
        return b"".join(p.read() if isinstance(p, FileRegion) else p for p in self.parts)


def frame(payload: bytes) -> bytes:
    return _I32.pack(len(payload)) + payload


def frame_size(header: bytes) -> int:
    return int(_U32.unpack(header)[0])
