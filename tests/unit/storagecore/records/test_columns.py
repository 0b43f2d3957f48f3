"""The columnar decoder: C and the pure-Python reference give the same buffers byte for byte and
the same problems, both equal a model built from RecordBatch.records(), and pyarrow wraps the
buffers without a copy.

Both CI passes run this file: each asserts which implementation the facade loaded, and wherever
the extension is built the C decoder is compared with the reference in both passes.
"""

from __future__ import annotations

import ast
import ctypes
import importlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from storagecore import (
    Compression,
    ControlType,
    CorruptRecordError,
    NewRecord,
    RecordBatch,
    TimestampType,
    build_batch,
    build_control_batch,
)
from storagecore.records import _columns_py, columns, layout
from storagecore.records.batch import iter_complete_batches
from storagecore.records.columns import COLUMN_NAMES, DecodedColumns, decode_columns
from storagecore.records.columns_types import BATCH_COLUMNS
from storagecore.records.crc import crc32c
from storagecore.records.memory_records_builder import build_empty_batch
from storagecore.records.varint import encode_varint, encode_varlong

try:
    _native: Any = importlib.import_module("storagecore.records._native")
except ImportError:  # pragma: no cover - the build is checked by test_expected_implementation
    _native = None

needs_native = pytest.mark.skipif(_native is None, reason="native speed-up not built")

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def test_expected_implementation_is_loaded() -> None:
    """CI runs the suite twice; each run must use the implementation it claims to test."""
    forced_python = os.environ.get("STORAGECORE_NO_EXTENSIONS", "") not in ("", "0")
    assert ("python" if forced_python else "c") == columns.IMPLEMENTATION


@needs_native
def test_stub_names_every_native_function_and_constant() -> None:
    stub = Path(columns.__file__).with_name("_native.pyi")
    tree = ast.parse(stub.read_text())
    declared = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)} | {
        node.target.id
        for node in tree.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }
    assert declared == {name for name in dir(_native) if not name.startswith("_")}


# -- running both implementations ---------------------------------------------------------------


def both(region: bytes, *args: Any, **kwargs: Any) -> DecodedColumns:
    """decode_columns by the loaded implementation, checked equal to the reference (and to C
    when C is built, whichever is loaded)."""
    loaded = decode_columns(region, *args, **kwargs)
    reference = _call(_columns_py.decode_columns, region, *args, **kwargs)
    assert_same(loaded, reference)
    if _native is not None:
        assert_same(_call(_native.decode_columns, region, *args, **kwargs), reference)
    return loaded


def _call(impl: Any, region: bytes, *args: Any, **kwargs: Any) -> DecodedColumns:
    """An implementation called as the facade calls it (to compare both in one process)."""
    real = columns._decode
    columns._decode = impl  # type: ignore[assignment]
    try:
        return decode_columns(region, *args, **kwargs)
    finally:
        columns._decode = real  # type: ignore[assignment]


def assert_same(got: DecodedColumns, expected: DecodedColumns) -> None:
    assert got[:4] == expected[:4]
    assert got.null_counts == expected.null_counts
    assert list(got.buffers) == list(expected.buffers)
    for name, buffers in expected.buffers.items():
        assert [bytes(b) for b in got.buffers[name]] == [bytes(b) for b in buffers], name
    assert list(got.batch_buffers) == [name for name, _ in BATCH_COLUMNS]
    for name, buffer in expected.batch_buffers.items():
        assert bytes(got.batch_buffers[name]) == bytes(buffer), name


def batch_table(decoded: DecodedColumns) -> list[dict[str, int]]:
    """The per-batch table as rows (struct type codes of BATCH_COLUMNS, little-endian)."""
    fields = {
        name: [v for (v,) in struct.iter_unpack("<" + code, decoded.batch_buffers[name])]
        for name, code in BATCH_COLUMNS
    }
    assert all(len(values) == decoded.batches for values in fields.values())
    return [{name: fields[name][i] for name in fields} for i in range(decoded.batches)]


# -- Arrow --------------------------------------------------------------------------------------


def to_arrow(decoded: DecodedColumns) -> dict[str, pa.Array]:
    """The buffers wrapped as pyarrow arrays (no copy), validated by pyarrow."""
    n = decoded.rows
    nulls = decoded.null_counts
    out: dict[str, pa.Array] = {}
    for name, buffers in decoded.buffers.items():
        bufs = [pa.py_buffer(b) for b in buffers]
        if name in ("key", "value"):
            array = pa.Array.from_buffers(pa.binary(), n, bufs, null_count=nulls[name])
        elif name in ("offset", "timestamp"):
            array = pa.Array.from_buffers(pa.int64(), n, [None, bufs[0]])
        elif name == "timestamp_type":
            array = pa.Array.from_buffers(pa.int32(), n, [None, bufs[0]])
        else:
            lists, key_offsets, key_data, value_valid, value_offsets, value_data = bufs
            count = struct.unpack_from("<i", buffers[0], 4 * n)[0]
            keys = pa.Array.from_buffers(pa.string(), count, [None, key_offsets, key_data])
            values = pa.Array.from_buffers(
                pa.binary(),
                count,
                [value_valid, value_offsets, value_data],
                null_count=nulls["headers.value"],
            )
            struct_type = HEADERS_TYPE.value_type
            items = pa.Array.from_buffers(struct_type, count, [None], children=[keys, values])
            array = pa.Array.from_buffers(HEADERS_TYPE, n, [None, lists], children=[items])
        array.validate(full=True)
        out[name] = array
    return out


def address(buffer: bytes | bytearray) -> int:
    if isinstance(buffer, bytearray):
        return ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    return ctypes.cast(ctypes.c_char_p(buffer), ctypes.c_void_p).value or 0


# -- generated logs and their model -------------------------------------------------------------


@dataclass
class Spec:
    """One batch of a generated log."""

    records: list[NewRecord]
    codec: Compression
    log_append: bool
    kind: str  # "data", "control" or "empty"
    gap: int  # offsets left out before this batch's first record delta (compaction)


headers_strategy = st.lists(
    st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=6))), max_size=3
).map(tuple)
record_strategy = st.builds(
    NewRecord,
    key=st.one_of(st.none(), st.binary(max_size=12)),
    value=st.one_of(st.none(), st.binary(max_size=40)),
    timestamp=st.integers(min_value=0, max_value=2**42),
    headers=headers_strategy,
)
spec_strategy = st.builds(
    Spec,
    records=st.lists(record_strategy, min_size=1, max_size=9),
    codec=st.sampled_from(list(Compression)),
    log_append=st.booleans(),
    kind=st.sampled_from(["data"] * 6 + ["control", "empty"]),
    gap=st.integers(0, 3),
)


def build_log(specs: list[Spec], first_offset: int = 0) -> bytes:
    parts = []
    offset = first_offset
    for spec in specs:
        if spec.kind == "control":
            parts.append(
                build_control_batch(
                    ControlType.COMMIT,
                    producer_id=7,
                    producer_epoch=0,
                    coordinator_epoch=3,
                    timestamp=spec.records[0].timestamp,
                    base_offset=offset,
                )
            )
            offset += 1
            continue
        records = [
            NewRecord(r.key, r.value, r.timestamp, r.headers, offset_delta=spec.gap + 2 * i)
            for i, r in enumerate(spec.records)
        ]
        built = build_batch(
            records,
            base_offset=offset,
            compression=spec.codec,
            timestamp_type=(
                TimestampType.LOG_APPEND_TIME if spec.log_append else TimestampType.CREATE_TIME
            ),
            log_append_time=1_700_000_000_123 if spec.log_append else None,
        )
        batch = RecordBatch(built)
        if spec.kind == "empty":  # what the cleaner keeps of a batch it emptied
            built = build_empty_batch(batch)
        parts.append(built)
        offset = batch.next_offset
    return b"".join(parts)


@dataclass
class Model:
    rows: list[tuple[int, int, int, bytes | None, bytes | None, list[dict[str, Any]]]]

    def arrays(self) -> dict[str, pa.Array]:
        columns: list[tuple[Any, ...]] = list(zip(*self.rows, strict=True)) or [()] * 6
        offsets, timestamps, types, keys, values, headers = columns
        return {
            "key": pa.array(list(keys), pa.binary()),
            "value": pa.array(list(values), pa.binary()),
            "offset": pa.array(list(offsets), pa.int64()),
            "timestamp": pa.array(list(timestamps), pa.int64()),
            "timestamp_type": pa.array(list(types), pa.int32()),
            "headers": pa.array(list(headers), HEADERS_TYPE),
        }


def model(
    region: bytes,
    position: int,
    end: int,
    *,
    min_offset: int | None = None,
    max_offset: int | None = None,
    include_control: bool = False,
) -> Model:
    """Rows of well-formed batches by RecordBatch.records(), as a reader sees them."""
    rows: Model = Model([])
    while end - position >= layout.HEADER_SIZE_UP_TO_MAGIC:
        size = struct.unpack_from(">i", region, position + layout.LENGTH_OFFSET)[0] + 12
        if position + size > end:
            break
        batch = RecordBatch(region[position : position + size])
        position += size
        batch.validate()
        if batch.is_control and not include_control:
            continue
        for record in batch.records():
            if min_offset is not None and record.offset < min_offset:
                continue
            if max_offset is not None and record.offset >= max_offset:
                continue
            rows.rows.append(
                (
                    record.offset,
                    record.timestamp,
                    int(batch.timestamp_type),
                    record.key,
                    record.value,
                    [{"key": k, "value": v} for k, v in record.headers],
                )
            )
    return rows


def assert_matches_model(decoded: DecodedColumns, expected: Model) -> None:
    assert decoded.problem is None
    assert decoded.rows == len(expected.rows)
    wanted = expected.arrays()
    for name, array in to_arrow(decoded).items():
        assert array.equals(wanted[name]), name


# -- valid logs ---------------------------------------------------------------------------------


@given(
    specs=st.lists(spec_strategy, min_size=0, max_size=6),
    prefix=st.binary(max_size=5),
    torn=st.integers(0, 40),
    include_control=st.booleans(),
)
def test_generated_logs_decode_as_the_model(
    specs: list[Spec], prefix: bytes, torn: int, include_control: bool
) -> None:
    log = build_log(specs, first_offset=100)
    tail = build_batch([NewRecord(b"k", b"v" * 30, 1)])[:torn]  # a torn tail, ignored
    region = prefix + log + tail
    decoded = both(region, len(prefix), include_control=include_control)
    assert decoded.position == len(prefix) + len(log)
    assert decoded.batches == len(specs)
    expected = model(region, len(prefix), len(region), include_control=include_control)
    assert_matches_model(decoded, expected)
    table = batch_table(decoded)
    first_row = 0
    for entry, (position, batch) in zip(
        table, iter_complete_batches(region[len(prefix) : decoded.position]), strict=True
    ):
        assert entry == {
            "position": len(prefix) + position,
            "base_offset": batch.base_offset,
            "last_offset_delta": batch.last_offset_delta,
            "partition_leader_epoch": batch.partition_leader_epoch,
            "attributes": batch.attributes,
            "max_timestamp": batch.max_timestamp,
            "producer_id": batch.producer_id,
            "producer_epoch": batch.producer_epoch,
            "base_sequence": batch.base_sequence,
            "first_row": first_row,
            "rows": 0 if batch.is_control and not include_control else batch.records_count,
        }
        first_row += entry["rows"]
    assert first_row == decoded.rows


@given(
    specs=st.lists(spec_strategy, min_size=0, max_size=6),
    max_rows=st.integers(1, 12),
    bounds=st.tuples(st.integers(95, 160), st.integers(95, 160)),
    include_control=st.booleans(),
)
def test_max_rows_splits_the_walk_at_batch_boundaries(
    specs: list[Spec], max_rows: int, bounds: tuple[int, int], include_control: bool
) -> None:
    """Calls of at most ``max_rows`` rows, each from where the last stopped, walk every batch
    once and give the rows of one unbounded call; a call stops only before a batch whose
    records would pass the bound, and takes a larger batch whole when it has no row yet."""
    log = build_log(specs, first_offset=100)
    low, high = sorted(bounds)
    options: dict[str, Any] = {
        "min_offset": low,
        "max_offset": high,
        "include_control": include_control,
    }
    whole = both(log, **options)
    position, batches, parts = 0, 0, []
    while True:
        part = both(log, position, max_rows=max_rows, **options)
        assert part.problem is None
        table = batch_table(part)
        if part.rows > max_rows:
            assert len([e for e in table if e["rows"]]) == 1, "only a lone batch passes the bound"
        if part.position < len(log):
            # Stopped before a batch that would pass the bound (not at a torn tail).
            count = struct.unpack_from(">i", log, part.position + layout.RECORDS_COUNT_OFFSET)[0]
            assert part.rows > 0 and part.rows + count > max_rows
        parts.append(part)
        batches += part.batches
        if part.position == len(log):
            break
        assert part.position > position
        position = part.position
    assert batches == whole.batches
    assert sum(p.rows for p in parts) == whole.rows
    for name, array in to_arrow(whole).items():
        pieces = [to_arrow(p)[name] for p in parts if p.rows]
        joined = pa.concat_arrays(pieces) if pieces else array.slice(0, 0)
        assert joined.equals(array), name


@given(
    specs=st.lists(spec_strategy, min_size=1, max_size=6),
    bounds=st.tuples(st.integers(95, 160), st.integers(95, 160)),
)
def test_offset_ranges(specs: list[Spec], bounds: tuple[int, int]) -> None:
    log = build_log(specs, first_offset=100)
    low, high = sorted(bounds)
    decoded = both(log, min_offset=low, max_offset=high)
    assert_matches_model(decoded, model(log, 0, len(log), min_offset=low, max_offset=high))
    assert_matches_model(both(log, min_offset=low), model(log, 0, len(log), min_offset=low))
    assert_matches_model(both(log, max_offset=high), model(log, 0, len(log), max_offset=high))


@given(
    specs=st.lists(spec_strategy, min_size=1, max_size=4),
    wanted=st.lists(st.sampled_from(COLUMN_NAMES), unique=True),
)
def test_only_requested_columns_are_built(specs: list[Spec], wanted: list[str]) -> None:
    log = build_log(specs)
    decoded = both(log, columns=wanted)
    assert sorted(decoded.buffers) == sorted(wanted)
    assert decoded.rows == len(model(log, 0, len(log)).rows)
    everything = both(log)
    for name in wanted:
        assert [bytes(b) for b in decoded.buffers[name]] == [
            bytes(b) for b in everything.buffers[name]
        ]


def test_count_only_and_key_only() -> None:
    log = build_log(
        [
            Spec(
                [NewRecord(b"k%d" % i, b"v" * 50, i) for i in range(9)],
                Compression.LZ4,
                False,
                "data",
                0,
            )
        ]
    )
    counted = both(log, columns=())
    assert (counted.rows, counted.buffers, counted.null_counts) == (9, {}, {})
    keys = both(log, columns=["key"])
    assert list(keys.buffers) == ["key"] and keys.null_counts == {"key": 0}
    assert to_arrow(keys)["key"].to_pylist() == [b"k%d" % i for i in range(9)]


def test_log_append_time_gives_the_batch_max_timestamp() -> None:
    log = build_batch(
        [NewRecord(b"a", b"1", 5), NewRecord(b"b", b"2", 9)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=1_700_000_000_000,
    )
    arrays = to_arrow(both(log))
    assert arrays["timestamp"].to_pylist() == [1_700_000_000_000] * 2
    assert arrays["timestamp_type"].to_pylist() == [1, 1]


def test_control_batches_skipped_unless_asked() -> None:
    marker = build_control_batch(
        ControlType.ABORT,
        producer_id=1,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp=7,
        base_offset=1,
    )
    log = build_batch([NewRecord(b"a", b"1", 5)]) + marker
    assert both(log).rows == 1
    with_markers = both(log, include_control=True)
    assert to_arrow(with_markers)["offset"].to_pylist() == [0, 1]
    assert with_markers.batches == 2


@needs_native
def test_pyarrow_wraps_the_c_buffers_without_a_copy() -> None:
    log = build_log(
        [
            Spec(
                [
                    NewRecord(
                        None if i % 5 == 0 else b"k%d" % i,
                        None if i % 7 == 0 else b"v%d" % i,
                        i,
                        (("h", b"x"), ("n", None)),
                    )
                    for i in range(20)
                ],
                codec,
                False,
                "data",
                0,
            )
            for codec in Compression
        ]
    )
    decoded = _call(_native.decode_columns, log)
    arrays = to_arrow(decoded)
    for name, buffers in decoded.buffers.items():
        for buffer in buffers:
            assert isinstance(buffer, bytearray)
            assert pa.py_buffer(buffer).address == address(buffer), name
    for name in ("key", "value"):
        validity, offsets, data = decoded.buffers[name]
        wrapped = arrays[name].buffers()
        assert [b.address for b in wrapped] == [address(validity), address(offsets), address(data)]
    assert arrays["offset"].buffers()[1].address == address(decoded.buffers["offset"][0])


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_batches_decode_identically(codec: Compression) -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i in range(300):
        builder.append(
            i,
            timestamp=1_700_000_000_000 + i,
            key=None if i % 11 == 5 else b"key-%d" % (i % 13),
            value=None if i % 7 == 3 else b"payload-%06d|" % i * 30,
            headers=[("trace", b"t-%d" % i), ("empty", None)] if i % 2 else [],
        )
    raw = bytes(builder.build())
    theirs = list(DefaultRecordBatch(bytearray(raw)))
    arrays = to_arrow(both(raw))
    assert arrays["offset"].to_pylist() == [r.offset for r in theirs]
    assert arrays["timestamp"].to_pylist() == [r.timestamp for r in theirs]
    assert arrays["key"].to_pylist() == [r.key for r in theirs]
    assert arrays["value"].to_pylist() == [r.value for r in theirs]
    assert arrays["headers"].to_pylist() == [
        [{"key": k, "value": v} for k, v in r.headers] for r in theirs
    ]


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
