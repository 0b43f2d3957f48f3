"""The columnar decoder on valid logs: C and the pure-Python reference give the same buffers
byte for byte, both equal a model built from RecordBatch.records() (offset ranges, row bounds,
requested columns, control batches, kafka-python's batches), and pyarrow wraps the buffers
without a copy. Corrupt input and refused arguments: test_columns_problems.py.

Both CI passes run this file: each asserts which implementation the facade loaded, and wherever
the extension is built the C decoder is compared with the reference in both passes.
"""

from __future__ import annotations

import ast
import os
import struct
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
    NewRecord,
    TimestampType,
    build_batch,
    build_control_batch,
)
from storagecore.records import columns, layout
from storagecore.records.batch import iter_complete_batches
from storagecore.records.columns import COLUMN_NAMES
from tests.unit.storagecore.helpers.columns import (
    Spec,
    _call,
    _native,
    address,
    assert_matches_model,
    batch_table,
    both,
    build_log,
    model,
    needs_native,
    spec_strategy,
    to_arrow,
)


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
