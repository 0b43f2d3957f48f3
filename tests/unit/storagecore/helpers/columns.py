"""The columnar decoder's tests' common ground (records/test_columns*.py): decode_columns run by
every implementation at once (the loaded one, the pure-Python reference, C when built) with
the results checked equal, the buffers wrapped as pyarrow arrays, and generated logs with the
model a reader of RecordBatch.records() makes of them."""

from __future__ import annotations

import ctypes
import importlib
import struct
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import strategies as st

from storagecore import (
    Compression,
    ControlType,
    NewRecord,
    RecordBatch,
    TimestampType,
    build_batch,
    build_control_batch,
)
from storagecore.records import _columns_py, columns, layout
from storagecore.records.columns import DecodedColumns, decode_columns
from storagecore.records.columns_types import BATCH_COLUMNS
from storagecore.records.memory_records_builder import build_empty_batch

try:
    _native: Any = importlib.import_module("storagecore.records._native")
except ImportError:  # pragma: no cover - the build is checked by test_expected_implementation
    _native = None

needs_native = pytest.mark.skipif(_native is None, reason="native speed-up not built")

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


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
