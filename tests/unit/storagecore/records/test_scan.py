"""The native record scan and the pure-Python reference agree on every input."""

from __future__ import annotations

import importlib
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storagecore import NewRecord, RecordBatch, build_batch
from storagecore.records import _scan_py, layout, scan
from storagecore.records.scan_types import ScanResult

try:
    _native = importlib.import_module("storagecore.records._native")
except ImportError:  # pragma: no cover - the build is checked by test_expected_implementation
    _native = None

needs_native = pytest.mark.skipif(_native is None, reason="native speed-up not built")


def native(payload: bytes, count: int, base_ts: int) -> ScanResult:
    assert _native is not None
    return ScanResult(*_native.scan_records(payload, count, base_ts))


def test_expected_implementation_is_loaded() -> None:
    """CI runs the suite twice; each run must use the implementation it claims to test."""
    forced_python = os.environ.get("STORAGECORE_NO_EXTENSIONS", "") not in ("", "0")
    assert ("python" if forced_python else "c") == scan.IMPLEMENTATION


@needs_native
def test_native_constants_match_the_layout() -> None:
    assert _native is not None
    assert _native.MAX_VARINT_BYTES == layout.MAX_VARINT_BYTES
    assert _native.MAX_VARLONG_BYTES == layout.MAX_VARLONG_BYTES


def _payload(records: list[NewRecord]) -> tuple[bytes, int, int]:
    batch = RecordBatch(build_batch(records))
    return batch.payload(), batch.records_count, batch.base_timestamp


records_strategy = st.lists(
    st.builds(
        NewRecord,
        key=st.one_of(st.none(), st.binary(max_size=20)),
        value=st.one_of(st.none(), st.binary(max_size=200)),
        timestamp=st.integers(min_value=0, max_value=2**40),
        headers=st.lists(
            st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=10))), max_size=3
        ).map(tuple),
    ),
    min_size=1,
    max_size=20,
)


@given(records=records_strategy)
def test_valid_batches(records: list[NewRecord]) -> None:
    payload, count, base_ts = _payload(records)
    expected = _scan_py.scan_records(payload, count, base_ts)
    assert expected.problem is None
    assert expected.max_timestamp == max(r.timestamp for r in records)
    assert expected.min_timestamp == min(r.timestamp for r in records)
    assert expected.null_key_count == sum(r.key is None for r in records)
    assert expected.offsets_sequential
    if _native is not None:
        assert native(payload, count, base_ts) == expected


@needs_native
@given(
    records=records_strategy,
    mutations=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=4),
    cut=st.integers(min_value=0, max_value=8),
    count_delta=st.integers(min_value=-2, max_value=2),
)
def test_mutated_batches_agree(
    records: list[NewRecord], mutations: list[tuple[int, int]], cut: int, count_delta: int
) -> None:
    payload, count, base_ts = _payload(records)
    data = bytearray(payload[: max(0, len(payload) - cut)])
    for position, value in mutations:
        if data:
            data[position % len(data)] = value
    count = max(0, count + count_delta)
    assert native(bytes(data), count, base_ts) == _scan_py.scan_records(bytes(data), count, base_ts)


@needs_native
@given(
    data=st.binary(max_size=300), count=st.integers(0, 5), base_ts=st.integers(-(2**63), 2**63 - 1)
)
def test_random_bytes_agree(data: bytes, count: int, base_ts: int) -> None:
    assert native(data, count, base_ts) == _scan_py.scan_records(data, count, base_ts)


@pytest.mark.parametrize(
    ("payload", "count", "message"),
    [
        (b"\x80\x80\x80\x80\x80\x01", 1, "record 0 at byte 0: truncated or overlong varint"),
        (b"\x40", 1, "length 32 runs past the batch"),
        (b"\x02\x00\x00", 1, "truncated or overlong varint"),
        (b"", 1, "truncated or overlong varint"),
        (b"\x00", 0, "1 bytes left after 0 records"),
    ],
)
def test_problems_are_named(payload: bytes, count: int, message: str) -> None:
    assert message in (_scan_py.scan_records(payload, count, 0).problem or "")
    if _native is not None:
        assert native(payload, count, 0) == _scan_py.scan_records(payload, count, 0)


def test_offset_deltas_out_of_sequence() -> None:
    payload, count, base_ts = _payload(
        [NewRecord(b"a", b"", 0, offset_delta=0), NewRecord(b"b", b"", 0, offset_delta=2)]
    )
    assert not _scan_py.scan_records(payload, count, base_ts).offsets_sequential
    if _native is not None:
        assert not native(payload, count, base_ts).offsets_sequential


@needs_native
@given(
    first=st.integers(0x80, 0xFF),
    second=st.integers(0, 0xFF),
    cut=st.integers(0, 3),
    where=st.sampled_from(["length", "timestamp", "key length", "value length"]),
)
def test_two_byte_varints_agree(first: int, second: int, cut: int, where: str) -> None:
    """The native varint reads take two-byte encodings early (_layout.h): every two-byte pair,
    as a record's length, timestamp delta, key or value length, whole or cut at the body's
    end, reads as the reference reads it."""
    pair = bytes([first, second])
    key, value = b"k", b"v"
    fields = {
        "timestamp": pair if where == "timestamp" else b"\x00",
        "key length": pair if where == "key length" else b"\x02",
        "value length": pair if where == "value length" else b"\x02",
    }
    body = (
        b"\x00" + fields["timestamp"] + b"\x00" + fields["key length"] + key
        + fields["value length"] + value + b"\x00"
    )  # fmt: skip
    length = pair if where == "length" else bytes([len(body) * 2])
    payload = (length + body)[: max(0, len(length + body) - cut)]
    assert native(payload, 1, 0) == _scan_py.scan_records(payload, 1, 0)
