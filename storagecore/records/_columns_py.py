"""Pure-Python reference implementation of the columnar decoder (:mod:`.columns`).

The specification of ``decode_columns`` in ``storagecore/records/_columns.c``: both return the
same tuple, buffers byte for byte and problem messages character for character; tests run both
on the same inputs. Written for clarity, not speed: a batch is decoded whole into a list before
its rows are appended, so a bad batch contributes no rows.

What a batch must pass is what :meth:`RecordBatch.validate` and :func:`decode_records` accept
(sizes, magic 2, CRC-32C, counts, codec id, record framing, the record count, nothing left over,
UTF-8 header keys), plus two checks those do not need because Python integers do not overflow:
a CreateTime timestamp and every offset must fit in int64 (a column holds int64).
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable, Sequence
from typing import Final

from storagecore.errors import CorruptRecordError
from storagecore.records import layout
from storagecore.records._scan_py import _FramingError, _skip, _varint, _varlong
from storagecore.records.columns_types import BATCH_COLUMNS, COLUMN_NAMES, Buffer, Decompress
from storagecore.records.crc import crc32c

_PREFIX: Final = struct.Struct(">qi")  # base_offset, batch_length
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INT32_MAX: Final = 2**31 - 1

#: Raw result: rows, batches, position, problem, buffers, null counts, batch buffers
#: (DecodedColumns' order).
RawColumns = tuple[
    int, int, int, str | None, dict[str, tuple[Buffer, ...]], dict[str, int], dict[str, Buffer]
]

# One decoded record: offset, timestamp, key, value, headers (key bytes, value).
_Row = tuple[int, int, bytes | None, bytes | None, list[tuple[bytes, bytes | None]]]


class _BatchProblemError(Exception):
    """What is wrong with the batch being decoded (the message, without the batch prefix)."""


def wanted_columns(columns: Iterable[str]) -> frozenset[str]:
    """The requested column names, checked (both implementations raise the same ValueError)."""
    wanted = frozenset(columns)
    unknown = sorted(wanted - set(COLUMN_NAMES))
    if unknown:
        raise ValueError(f"unknown column {unknown[0]!r}: expected some of {COLUMN_NAMES}")
    return wanted


def decode_columns(  # noqa: PLR0917 - the C function's positional signature
    region: bytes | bytearray | memoryview,
    position: int,
    end: int,
    columns: Sequence[str],
    min_offset: int | None,
    max_offset: int | None,
    include_control: bool,
    max_output_bytes: int,
    decompress: Decompress,
    max_rows: int = 0,
) -> RawColumns:
    wanted = wanted_columns(columns)
    view = memoryview(region).cast("B")
    if not 0 <= position <= end <= len(view):
        raise ValueError(f"region of {len(view)} bytes cannot hold [{position}, {end})")
    out = _Builder(wanted)
    table: dict[str, array[int]] = {name: array(code) for name, code in BATCH_COLUMNS}
    batches = 0
    problem: str | None = None
    while end - position >= layout.HEADER_SIZE_UP_TO_MAGIC:
        base_offset, length = _PREFIX.unpack_from(view, position)
        if length < layout.MIN_DECLARED_BATCH_LENGTH:
            problem = (
                f"batch at position {position}: declared length {length} "
                f"(minimum {layout.MIN_DECLARED_BATCH_LENGTH})"
            )
            break
        size = length + layout.LOG_OVERHEAD
        if size > end - position:
            break  # a torn tail: Kafka's FileLogInputStream stops here too
        if view[position + layout.MAGIC_OFFSET] in _LEGACY_MAGICS:
            entry_or_problem = _legacy_entry(
                view[position : position + size], position, out, min_offset, max_offset
            )
            if isinstance(entry_or_problem, str):
                problem = entry_or_problem
                break
            for name, value in entry_or_problem.items():
                table[name].append(value)
            batches += 1
            position += size
            continue
        if size < layout.RECORD_BATCH_OVERHEAD:
            problem = (
                f"batch at position {position}: {size} bytes, smaller than the "
                f"{layout.RECORD_BATCH_OVERHEAD}-byte header"
            )
            break
        header = layout.BATCH_HEADER.unpack_from(view, position)
        attributes, last_delta, base_timestamp, max_timestamp, count = (
            header[5],
            header[6],
            header[7],
            header[8],
            header[12],
        )
        outside = (min_offset is not None and base_offset + last_delta < min_offset) or (
            max_offset is not None and base_offset >= max_offset
        )
        is_control = bool(attributes & layout.CONTROL_FLAG_MASK)
        first_row = out.rows
        decoded = not outside and (not is_control or include_control)
        if decoded and 0 < max_rows < out.rows + count and out.rows > 0:
            break  # the batch would take the rows past max_rows: the next call starts here
        if not outside:
            try:
                _validate(view, position, size, header)
                if not is_control or include_control:
                    payload = _payload(
                        view,
                        position=position,
                        size=size,
                        attributes=attributes,
                        max_output_bytes=max_output_bytes,
                        decompress=decompress,
                    )
                    log_append = bool(attributes & layout.TIMESTAMP_TYPE_MASK)
                    rows = _records(
                        payload,
                        count,
                        base_offset,
                        base_timestamp,
                        max_timestamp if log_append else None,
                    )
                    out.append(rows, int(log_append), min_offset, max_offset)
            except _BatchProblemError as exc:
                problem = f"batch at position {position}, offset {base_offset}: {exc}"
                break
        entry = {
            "position": position,
            "base_offset": base_offset,
            "last_offset_delta": last_delta,
            "partition_leader_epoch": header[2],
            "attributes": attributes,
            "max_timestamp": max_timestamp,
            "producer_id": header[9],
            "producer_epoch": header[10],
            "base_sequence": header[11],
            "first_row": first_row,
            "rows": out.rows - first_row,
        }
        for name, value in entry.items():
            table[name].append(value)
        batches += 1
        position += size
    batch_buffers: dict[str, Buffer] = {
        name: _little_endian(column) for name, column in table.items()
    }
    return out.rows, batches, position, problem, out.buffers(), out.null_counts(), batch_buffers


_LEGACY_MAGICS: Final = frozenset((0, 1))
#: Spark's Kafka source shows a v0 record's missing timestamp type as -1 (NoTimestampType).
NO_TIMESTAMP_TYPE: Final = -1


def _legacy_entry(
    entry: memoryview,
    position: int,
    out: _Builder,
    min_offset: int | None,
    max_offset: int | None,
) -> dict[str, int] | str:
    """A v0/v1 entry (a message or a compressed wrapper) appended to ``out``: its batch-table
    entry, or the problem. Decoded through :mod:`storagecore.records.legacy`, the one reader
    of the legacy formats; the native decoder hands such regions to this reference."""
    from storagecore.records.legacy import MAGIC_V0, LegacyRecordBatch  # noqa: PLC0415

    batch = LegacyRecordBatch(entry)
    first_row = out.rows
    last = batch.last_offset
    if min_offset is not None and last < min_offset:
        base = last  # outside the range: not validated, not decompressed (as for v2)
    else:
        try:
            batch.validate()
            records = batch.records()
        except CorruptRecordError as exc:
            return f"batch at position {position}, offset {last}: {exc}"
        base = records[0].offset
        rows: list[_Row] = [(r.offset, r.timestamp, r.key, r.value, []) for r in records]
        timestamp_type = NO_TIMESTAMP_TYPE if batch.magic == MAGIC_V0 else int(batch.timestamp_type)
        out.append(rows, timestamp_type, min_offset, max_offset)
    return {
        "position": position,
        "base_offset": base,
        "last_offset_delta": last - base,
        "partition_leader_epoch": layout.NO_PARTITION_LEADER_EPOCH,
        "attributes": batch.attributes,
        "max_timestamp": batch.max_timestamp,
        "producer_id": layout.NO_PRODUCER_ID,
        "producer_epoch": layout.NO_PRODUCER_EPOCH,
        "base_sequence": layout.NO_SEQUENCE,
        "first_row": first_row,
        "rows": out.rows - first_row,
    }


def _validate(view: memoryview, position: int, size: int, header: tuple[int, ...]) -> None:
    """RecordBatch.validate's checks after the framing: magic, CRC, counts, codec."""
    magic, crc, attributes, last_delta, count = (
        header[3],
        header[4],
        header[5],
        header[6],
        header[12],
    )
    if magic != layout.CURRENT_MAGIC:
        raise _BatchProblemError(f"magic {magic}, only magic 2 is supported")
    computed = crc32c(view[position + layout.ATTRIBUTES_OFFSET : position + size])
    if computed != crc:
        raise _BatchProblemError(f"CRC mismatch (stored 0x{crc:08x}, computed 0x{computed:08x})")
    if count < 0 or last_delta < 0:
        raise _BatchProblemError(f"negative record count {count} or last offset delta {last_delta}")
    codec = attributes & layout.COMPRESSION_CODEC_MASK
    if codec > _MAX_CODEC_ID:
        raise _BatchProblemError(f"unknown compression codec id {codec} (Kafka defines 0..4)")


_MAX_CODEC_ID: Final = 4


def _payload(
    view: memoryview,
    *,
    position: int,
    size: int,
    attributes: int,
    max_output_bytes: int,
    decompress: Decompress,
) -> bytes | memoryview:
    raw = view[position + layout.RECORDS_OFFSET : position + size]
    codec = attributes & layout.COMPRESSION_CODEC_MASK
    if codec == 0:
        return raw
    payload = decompress(codec, bytes(raw), max_output_bytes)
    if isinstance(payload, str):
        raise _BatchProblemError(payload)
    return payload


def _records(
    payload: bytes | memoryview,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
) -> list[_Row]:
    """Every record of the payload (the walker of _walker.h, then the decoder's own checks)."""
    rows: list[_Row] = []
    pos = 0
    end = len(payload)
    for index in range(count):
        where = f"record {index} at byte {pos}"
        try:
            length, pos = _varint(payload, pos, end)
            if length < 0 or length > end - pos:
                raise _BatchProblemError(f"{where}: length {length} runs past the batch")
            body_end = pos + length
            if pos + 1 > body_end:
                raise _FramingError("truncated or overlong varint")
            pos += 1  # attributes
            ts_delta, pos = _varlong(payload, pos, body_end)
            offset_delta, pos = _varint(payload, pos, body_end)
            key_length, pos = _varint(payload, pos, body_end)
            key = None if key_length < 0 else bytes(payload[pos : pos + key_length])
            pos = _skip(pos, key_length, body_end)
            value_length, pos = _varint(payload, pos, body_end)
            value = None if value_length < 0 else bytes(payload[pos : pos + value_length])
            pos = _skip(pos, value_length, body_end)
            header_count, pos = _varint(payload, pos, body_end)
            if header_count < 0:
                raise _BatchProblemError(f"{where}: negative header count")
            headers: list[tuple[bytes, bytes | None]] = []
            for _ in range(header_count):
                hk_length, pos = _varint(payload, pos, body_end)
                if hk_length < 0:
                    raise _BatchProblemError(f"{where}: null header key")
                header_key = bytes(payload[pos : pos + hk_length])
                pos = _skip(pos, hk_length, body_end)
                hv_length, pos = _varint(payload, pos, body_end)
                header_value = None if hv_length < 0 else bytes(payload[pos : pos + hv_length])
                pos = _skip(pos, hv_length, body_end)
                headers.append((header_key, header_value))
            if pos != body_end:
                raise _BatchProblemError(
                    f"{where}: body declares {length} bytes, fields take {pos - body_end + length}"
                )
        except _FramingError as exc:
            raise _BatchProblemError(f"{where}: {exc}") from None
        if log_append_time is not None:
            timestamp = log_append_time
        else:
            timestamp = base_timestamp + ts_delta
            if not _INT64_MIN <= timestamp <= _INT64_MAX:
                raise _BatchProblemError(f"{where}: timestamp overflows int64")
        for header_key, _value in headers:
            try:
                header_key.decode("utf-8")
            except UnicodeDecodeError:
                raise _BatchProblemError(f"{where}: header key is not UTF-8") from None
        offset = base_offset + offset_delta
        if not _INT64_MIN <= offset <= _INT64_MAX:
            raise _BatchProblemError(f"{where}: offset overflows int64")
        rows.append((offset, timestamp, key, value, headers))
    if pos != end:
        raise _BatchProblemError(
            f"{end - pos} bytes left after {count} records (incorrect declared batch size)"
        )
    return rows


class _Binary:
    """An Arrow binary column being built: validity, int32 offsets, data."""

    def __init__(self) -> None:
        self.valid: list[bool] = []
        self.offsets = array("i", [0])
        self.data = bytearray()

    def append(self, item: bytes | None) -> None:
        self.valid.append(item is not None)
        if item is not None:
            self.data += item
            if len(self.data) > _INT32_MAX:
                raise OverflowError("more than 2 GiB in one binary column: decode a smaller region")
        self.offsets.append(len(self.data))

    def buffers(self) -> tuple[Buffer, Buffer, Buffer]:
        return _bitmap(self.valid), _little_endian(self.offsets), bytes(self.data)

    @property
    def nulls(self) -> int:
        return self.valid.count(False)


class _Builder:
    def __init__(self, wanted: frozenset[str]) -> None:
        self.wanted = wanted
        self.rows = 0
        self.offset = array("q")
        self.timestamp = array("q")
        self.timestamp_type = array("i")
        self.key = _Binary()
        self.value = _Binary()
        self.header_lists = array("i", [0])
        self.header_keys = _Binary()
        self.header_values = _Binary()

    def append(
        self, rows: list[_Row], timestamp_type: int, min_offset: int | None, max_offset: int | None
    ) -> None:
        wanted = self.wanted
        for offset, timestamp, key, value, headers in rows:
            if (min_offset is not None and offset < min_offset) or (
                max_offset is not None and offset >= max_offset
            ):
                continue
            self.rows += 1
            if "offset" in wanted:
                self.offset.append(offset)
            if "timestamp" in wanted:
                self.timestamp.append(timestamp)
            if "timestamp_type" in wanted:
                self.timestamp_type.append(timestamp_type)
            if "key" in wanted:
                self.key.append(key)
            if "value" in wanted:
                self.value.append(value)
            if "headers" in wanted:
                for header_key, header_value in headers:
                    self.header_keys.append(header_key)
                    self.header_values.append(header_value)
                if len(self.header_keys.valid) > _INT32_MAX:
                    raise OverflowError("more than 2**31 - 1 headers: decode a smaller region")
                self.header_lists.append(len(self.header_keys.valid))

    def buffers(self) -> dict[str, tuple[Buffer, ...]]:
        out: dict[str, tuple[Buffer, ...]] = {}
        for name in COLUMN_NAMES:
            if name not in self.wanted:
                continue
            if name == "key":
                out[name] = self.key.buffers()
            elif name == "value":
                out[name] = self.value.buffers()
            elif name == "headers":
                _, key_offsets, key_data = self.header_keys.buffers()
                out[name] = (
                    _little_endian(self.header_lists),
                    key_offsets,
                    key_data,
                    *self.header_values.buffers(),
                )
            else:
                column: array[int] = getattr(self, name)
                out[name] = (_little_endian(column),)
        return out

    def null_counts(self) -> dict[str, int]:
        counts = {"key": self.key.nulls, "value": self.value.nulls}
        out = {name: count for name, count in counts.items() if name in self.wanted}
        if "headers" in self.wanted:
            out["headers.value"] = self.header_values.nulls
        return out


def _bitmap(valid: list[bool]) -> bytes:
    """Arrow validity bitmap: bit i (LSB first) set when item i is not null; padding bits 0."""
    out = bytearray((len(valid) + 7) // 8)
    for i, is_valid in enumerate(valid):
        if is_valid:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def _little_endian(values: array[int]) -> bytes:
    if sys.byteorder == "big":  # Arrow buffers are little-endian
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()
