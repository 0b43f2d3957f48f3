"""Pure-Python reference implementation of :func:`storagecore.records.scan.scan_records`.

The native module ``_scan_c`` must give identical results; tests run both on the same inputs.
"""

from __future__ import annotations

from storagecore.records.layout import MAX_VARINT_BYTES, MAX_VARLONG_BYTES, NO_TIMESTAMP
from storagecore.records.scan_types import ScanResult


def scan_records(payload: bytes, count: int, base_timestamp: int) -> ScanResult:
    pos = 0
    end = len(payload)
    max_ts = NO_TIMESTAMP
    min_ts = 2**63 - 1
    null_keys = 0
    sequential = True

    def varint(p: int, limit: int, max_bytes: int) -> tuple[int, int]:
        result = 0
        shift = 0
        start = p
        while True:
            if p >= limit:
                raise IndexError(start)
            b = payload[p]
            p += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1), p
            shift += 7
            if p - start >= max_bytes:
                raise OverflowError(start)

    for index in range(count):
        start = pos
        try:
            length, pos = varint(pos, end, MAX_VARINT_BYTES)
            body_end = pos + length
            if length < 0 or body_end > end:
                return ScanResult.failed(
                    f"record {index} at byte {start}: length {length} runs past the batch"
                )
            pos += 1  # attributes
            ts_delta, pos = varint(pos, body_end, MAX_VARLONG_BYTES)
            offset_delta, pos = varint(pos, body_end, MAX_VARINT_BYTES)
            if offset_delta != index:
                sequential = False
            key_length, pos = varint(pos, body_end, MAX_VARINT_BYTES)
            if key_length < 0:
                null_keys += 1
            else:
                pos += key_length
            value_length, pos = varint(pos, body_end, MAX_VARINT_BYTES)
            if value_length > 0:
                pos += value_length
            header_count, pos = varint(pos, body_end, MAX_VARINT_BYTES)
            if header_count < 0:
                return ScanResult.failed(f"record {index} at byte {start}: negative header count")
            for _ in range(header_count):
                hk, pos = varint(pos, body_end, MAX_VARINT_BYTES)
                if hk < 0:
                    return ScanResult.failed(f"record {index} at byte {start}: null header key")
                pos += hk
                hv, pos = varint(pos, body_end, MAX_VARINT_BYTES)
                if hv > 0:
                    pos += hv
            if pos != body_end:
                return ScanResult.failed(
                    f"record {index} at byte {start}: body declares {length} bytes, fields take "
                    f"{pos - body_end + length}"
                )
        except (IndexError, OverflowError):
            return ScanResult.failed(
                f"record {index} at byte {start}: truncated or overlong varint"
            )
        timestamp = base_timestamp + ts_delta
        max_ts = max(max_ts, timestamp)
        min_ts = min(min_ts, timestamp)
    if pos != end:
        return ScanResult.failed(
            f"{end - pos} bytes left after {count} records (incorrect declared batch size)"
        )
    return ScanResult(None, max_ts, min_ts if count else NO_TIMESTAMP, null_keys, sequential)
