"""Pure-Python reference implementation of :func:`storagecore.records.scan.scan_records`.

The native module ``_native`` gives identical results, problem messages included; tests run both
on the same inputs. Varints are decoded by :mod:`storagecore.records.varint` (Kafka's ByteUtils:
at most 5 or 10 bytes, bits beyond 32 / 64 dropped).
"""

from __future__ import annotations

from storagecore.errors import CorruptRecordError
from storagecore.records.layout import NO_TIMESTAMP
from storagecore.records.scan_types import ScanResult
from storagecore.records.varint import decode_varint, decode_varlong

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class _FramingError(Exception):
    """A record whose fields do not fit its declared length (message: what is wrong)."""


def _varint(payload: bytes | memoryview, pos: int, limit: int) -> tuple[int, int]:
    try:
        return decode_varint(payload, pos, limit)
    except CorruptRecordError:
        raise _FramingError("truncated or overlong varint") from None


def _varlong(payload: bytes | memoryview, pos: int, limit: int) -> tuple[int, int]:
    try:
        return decode_varlong(payload, pos, limit)
    except CorruptRecordError:
        raise _FramingError("truncated or overlong varint") from None


def _skip(pos: int, length: int, limit: int) -> int:
    """Position after a field of ``length`` bytes (none when negative: a null field)."""
    if length <= 0:
        return pos
    if length > limit - pos:
        raise _FramingError("a field runs past the record")
    return pos + length


def scan_records(payload: bytes | memoryview, count: int, base_timestamp: int) -> ScanResult:
    pos = 0
    end = len(payload)
    max_ts = NO_TIMESTAMP
    min_ts = _INT64_MAX
    null_keys = 0
    sequential = True
    for index in range(count):
        start = pos
        where = f"record {index} at byte {start}"
        try:
            length, pos = _varint(payload, pos, end)
            body_end = pos + length
            if length < 0 or length > end - pos:
                return ScanResult.failed(f"{where}: length {length} runs past the batch")
            if pos + 1 > body_end:
                raise _FramingError("truncated or overlong varint")
            pos += 1  # attributes
            ts_delta, pos = _varlong(payload, pos, body_end)
            offset_delta, pos = _varint(payload, pos, body_end)
            if offset_delta != index:
                sequential = False
            key_length, pos = _varint(payload, pos, body_end)
            if key_length < 0:
                null_keys += 1
            pos = _skip(pos, key_length, body_end)
            value_length, pos = _varint(payload, pos, body_end)
            pos = _skip(pos, value_length, body_end)
            header_count, pos = _varint(payload, pos, body_end)
            if header_count < 0:
                return ScanResult.failed(f"{where}: negative header count")
            for _ in range(header_count):
                header_key, pos = _varint(payload, pos, body_end)
                if header_key < 0:
                    return ScanResult.failed(f"{where}: null header key")
                pos = _skip(pos, header_key, body_end)
                header_value, pos = _varint(payload, pos, body_end)
                pos = _skip(pos, header_value, body_end)
            if pos != body_end:
                return ScanResult.failed(
                    f"{where}: body declares {length} bytes, fields take {pos - body_end + length}"
                )
        except _FramingError as exc:
            return ScanResult.failed(f"{where}: {exc}")
        timestamp = base_timestamp + ts_delta
        if not _INT64_MIN <= timestamp <= _INT64_MAX:
            return ScanResult.failed(f"{where}: timestamp overflows int64")
        max_ts = max(max_ts, timestamp)
        min_ts = min(min_ts, timestamp)
    if pos != end:
        return ScanResult.failed(
            f"{end - pos} bytes left after {count} records (incorrect declared batch size)"
        )
    return ScanResult(None, max_ts, min_ts if count else NO_TIMESTAMP, null_keys, sequential)
