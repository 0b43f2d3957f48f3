"""The columnar decoder on corrupt input: C and the pure-Python reference give the same
result and the same problem, naming the batch's position and what is wrong, and reject a batch
exactly when RecordBatch.validate()/records() does; a torn tail ends the walk without a
problem, and bad arguments are refused alike."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storagecore import Compression, CorruptRecordError, NewRecord, RecordBatch, build_batch
from storagecore.records import _columns_py, layout
from storagecore.records.columns import DecodedColumns, decode_columns
from storagecore.records.crc import crc32c
from storagecore.records.varint import encode_varint, encode_varlong
from tests.unit.storagecore.helpers.columns import (
    Spec,
    _call,
    _native,
    assert_matches_model,
    assert_same,
    both,
    build_log,
    model,
    record_strategy,
    spec_strategy,
    to_arrow,
)

# -- corrupt input ------------------------------------------------------------------------------


def fix_crc(region: bytearray, position: int) -> None:
    size = struct.unpack_from(">i", region, position + layout.LENGTH_OFFSET)[0] + 12
    crc = crc32c(bytes(region[position + layout.ATTRIBUTES_OFFSET : position + size]))
    struct.pack_into(">I", region, position + layout.CRC_OFFSET, crc)


@given(
    specs=st.lists(spec_strategy, min_size=1, max_size=4),
    mutations=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 64),
)
def test_corrupted_regions_give_the_same_result(
    specs: list[Spec], mutations: list[tuple[int, int]], cut: int
) -> None:
    data = bytearray(build_log(specs))
    for index, value in mutations:
        data[index % len(data)] = value
    region = bytes(data[: max(0, len(data) - cut)])
    decoded = both(region)
    check_against_record_batch(region, decoded)


@given(
    good=st.lists(record_strategy, min_size=1, max_size=5),
    bad=st.lists(record_strategy, min_size=1, max_size=6),
    mutations=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=3),
    count_delta=st.integers(-2, 2),
    cut=st.integers(0, 3),
)
def test_corrupt_records_under_a_valid_crc(
    good: list[NewRecord],
    bad: list[NewRecord],
    mutations: list[tuple[int, int]],
    count_delta: int,
    cut: int,
) -> None:
    """Record framing errors (the CRC was recomputed over the damage): both implementations
    name the same record and roll back the bad batch's rows; RecordBatch.records() rejects
    exactly the batches they reject."""
    first = build_batch(good)
    second = bytearray(build_batch(bad, base_offset=len(good)))
    payload_start = layout.RECORDS_OFFSET
    for index, value in mutations:
        second[payload_start + index % (len(second) - payload_start)] = value
    if cut:
        del second[-cut:]
        struct.pack_into(">i", second, layout.LENGTH_OFFSET, len(second) - 12)
    count = max(0, len(bad) + count_delta)
    struct.pack_into(">i", second, layout.RECORDS_COUNT_OFFSET, count)
    fix_crc(second, 0)
    region = first + bytes(second)
    decoded = both(region)
    check_against_record_batch(region, decoded)
    if decoded.problem is not None:
        assert decoded.position == len(first)
        assert_matches_model(decoded._replace(problem=None), model(region, 0, len(first)))


def check_against_record_batch(region: bytes, decoded: DecodedColumns) -> None:
    """The decoder rejects a batch exactly when RecordBatch.validate/records() does."""
    if decoded.problem is None:
        assert_matches_model(decoded, model(region, 0, decoded.position))
        return
    assert decoded.problem.startswith(f"batch at position {decoded.position}")
    if "overflows int64" in decoded.problem or "declared length" in decoded.problem:
        return  # RecordBatch has no such checks (Python ints); the framing is FileRecords'
    size = struct.unpack_from(">i", region, decoded.position + layout.LENGTH_OFFSET)[0] + 12
    batch_bytes = region[decoded.position : decoded.position + size]
    with pytest.raises(CorruptRecordError):
        batch = RecordBatch(batch_bytes)
        batch.validate()
        batch.records()


def raw_record(header_key: bytes) -> bytes:
    """A record whose one header key is ``header_key``, bytes as given (UTF-8 or not)."""
    body = (
        b"\x00"
        + encode_varlong(0)
        + encode_varint(0)
        + encode_varint(1)
        + b"k"
        + encode_varint(1)
        + b"v"
        + encode_varint(1)
        + encode_varint(len(header_key))
        + header_key
        + encode_varint(-1)
    )
    return encode_varint(len(body)) + body


@given(key=st.binary(max_size=8) | st.text(max_size=4).map(str.encode))
def test_header_keys_must_be_utf8(key: bytes) -> None:
    built = bytearray(build_batch([NewRecord(b"k", b"v", 0, (("x" * len(key), None),))]))
    record = raw_record(key)
    built[layout.RECORDS_OFFSET :] = record
    fix_crc(built, 0)
    decoded = both(bytes(built))
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        assert decoded.problem == (
            "batch at position 0, offset 0: record 0 at byte 0: header key is not UTF-8"
        )
    else:
        assert to_arrow(decoded)["headers"].to_pylist() == [[{"key": text, "value": None}]]


UTF8_EDGES = [
    b"\xc2\x80",  # U+0080, the first two-byte character
    b"\xc1\xbf",  # overlong
    b"\xe0\x9f\xbf",  # overlong three-byte form
    b"\xe0\xa0\x80",
    b"\xed\x9f\xbf",  # U+D7FF
    b"\xed\xa0\x80",  # a surrogate
    b"\xef\xbf\xbf",
    b"\xf0\x8f\xbf\xbf",  # overlong four-byte form
    b"\xf0\x90\x80\x80",
    b"\xf4\x8f\xbf\xbf",  # U+10FFFF
    b"\xf4\x90\x80\x80",  # above U+10FFFF
    b"\xf5\x80\x80\x80",
    b"\xe2\x82",  # truncated
    b"a\xe2\x82\xac",
    b"\x80",
]


@pytest.mark.parametrize("key", UTF8_EDGES)
def test_header_key_utf8_edges(key: bytes) -> None:
    test_header_keys_must_be_utf8.hypothesis.inner_test(key)  # type: ignore[attr-defined]


@given(region=st.binary(max_size=400), position=st.integers(0, 8))
def test_random_bytes_give_the_same_result(region: bytes, position: int) -> None:
    both(region, min(position, len(region)))


def _corrupt(region: bytes, index: int, value: int, *, fix: bool = False) -> bytes:
    data = bytearray(region)
    data[index] = value
    if fix:
        fix_crc(data, 0)
    return bytes(data)


GOOD = build_batch([NewRecord(b"k", b"v", 1), NewRecord(None, None, 2)], base_offset=40)
LZ4 = build_batch([NewRecord(b"k", b"v" * 100, 1)], compression=Compression.LZ4, base_offset=40)


@pytest.mark.parametrize(
    ("region", "problem"),
    [
        (
            GOOD + _corrupt(GOOD, 30, 0xFF),
            f"batch at position {len(GOOD)}, offset 40: CRC mismatch",
        ),
        (
            GOOD + GOOD[:8] + struct.pack(">i", 3) + GOOD[12:],
            f"batch at position {len(GOOD)}: declared length 3 (minimum 14)",
        ),
        (
            GOOD[:8] + struct.pack(">i", 20) + GOOD[12:32],
            "batch at position 0: 32 bytes, smaller than the 61-byte header",
        ),
        (_corrupt(GOOD, 16, 3), "batch at position 0, offset 40: magic 3, only magic 2"),
        # Magic 1 is a legacy message: read as one, its CRC-32 (not C) does not match.
        (_corrupt(GOOD, 16, 1), "batch at position 0, offset 40: message at offset 40: CRC-32"),
        (
            _corrupt(GOOD, 22, 0x07, fix=True),
            "batch at position 0, offset 40: unknown compression codec id 7 (Kafka defines 0..4)",
        ),
        (
            _corrupt(GOOD, 60, 3, fix=True),
            "batch at position 0, offset 40: record 2 at byte ",
        ),
        (
            _corrupt(GOOD, 60, 1, fix=True),
            "batch at position 0, offset 40: 7 bytes left after 1 records (incorrect declared",
        ),
        (
            _corrupt(LZ4, layout.RECORDS_OFFSET, 0xEE, fix=True),
            "batch at position 0, offset 40: cannot decompress lz4 payload",
        ),
    ],
)
def test_problems_name_the_position_and_what_is_wrong(region: bytes, problem: str) -> None:
    decoded = both(region)
    assert decoded.problem is not None
    assert decoded.problem.startswith(problem), decoded.problem
    with pytest.raises(CorruptRecordError, match="batch at position"):
        decoded.check()


def test_a_torn_tail_ends_the_walk_without_a_problem() -> None:
    decoded = both(GOOD + GOOD[:-1])
    assert (decoded.rows, decoded.batches, decoded.position, decoded.problem) == (
        2,
        1,
        len(GOOD),
        None,
    )


def test_bad_arguments_are_refused_alike() -> None:
    with pytest.raises(ValueError, match="unknown column 'nope'"):
        decode_columns(GOOD, columns=["key", "nope"])
    for impl in [_columns_py.decode_columns] + ([_native.decode_columns] if _native else []):
        with pytest.raises(
            ValueError, match=rf"region of {len(GOOD)} bytes cannot hold \[0, {len(GOOD) + 1}\)"
        ):
            _call(impl, GOOD, 0, len(GOOD) + 1)
        with pytest.raises(ValueError, match=r"cannot hold \[5, 4\)"):
            _call(impl, GOOD, 5, 4)


def test_any_bytes_like_region_and_a_slice_of_it() -> None:
    log = GOOD + LZ4
    whole = both(log)
    for region in (bytearray(log), memoryview(log)):
        assert_same(decode_columns(region), whole)
    second = both(log, len(GOOD), len(log))
    assert (second.rows, second.batches, second.position) == (1, 1, len(log))
