"""The native append fast path agrees with the Python validator (the specification).

Where the fast path accepts a request, the Python path must accept it too, with byte-identical
output and the same offsets and timestamps; where the Python path rejects a request, the fast
path must hand it back (return None). And for ordinary uncompressed produce requests the fast
path must actually be taken, or its speed-up silently disappears.
"""

from __future__ import annotations

import importlib
import struct

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from storagecore import (
    LogConfig,
    NewRecord,
    StorageError,
    TopicPartition,
    build_batch,
    log_validator,
)
from storagecore.log_validator import AppendOrigin, validate_and_assign_offsets
from storagecore.records import layout
from storagecore.records.crc import crc32c

try:
    native = importlib.import_module("storagecore.records._native")
except ImportError:  # pragma: no cover - test_scan.py fails the run when the build is missing
    native = None

pytestmark = pytest.mark.skipif(native is None, reason="native speed-up not built")
TP = TopicPartition("t", 0)
NOW = 1_700_000_000_000


def python_path(data: bytes, config: LogConfig, origin: AppendOrigin, next_offset: int) -> object:
    saved = log_validator.validate_uncompressed
    log_validator.validate_uncompressed = None
    try:
        return validate_and_assign_offsets(
            data,
            tp=TP,
            config=config,
            next_offset=next_offset,
            now_ms=NOW,
            origin=origin,
            partition_leader_epoch=7,
        )
    except StorageError as exc:
        return exc
    finally:
        log_validator.validate_uncompressed = saved


def native_path(data: bytes, config: LogConfig, origin: AppendOrigin, next_offset: int) -> object:
    assert native is not None
    out = bytearray(data)
    result = native.validate_uncompressed(
        out,
        next_offset,
        NOW,
        origin is AppendOrigin.CLIENT,
        origin is AppendOrigin.REPLICATION,
        config.compact,
        config.max_message_bytes,
        7,
        config.message_timestamp_before_max_ms,
        config.message_timestamp_after_max_ms,
    )
    return None if result is None else (bytes(out), *result)


record = st.builds(
    NewRecord,
    key=st.one_of(st.none(), st.binary(max_size=6)),
    value=st.one_of(st.none(), st.binary(max_size=30)),
    timestamp=st.integers(min_value=NOW - 5_000, max_value=NOW + 5_000),
)
batch_args = st.fixed_dictionaries(
    {
        "records": st.lists(record, min_size=0, max_size=6),
        "producer_id": st.sampled_from([-1, 5]),
        "base_sequence": st.sampled_from([-1, 0, 9]),
        "max_timestamp": st.one_of(st.none(), st.integers(0, NOW + 10_000)),
        "base_offset": st.sampled_from([0, 0, 0, 3, 1_000]),
        "is_control": st.booleans(),
    }
)


def _build(args: dict[str, object]) -> bytes:
    records = args["records"]
    assert isinstance(records, list)
    return build_batch(
        records,
        base_offset=args["base_offset"],  # type: ignore[arg-type]
        producer_id=args["producer_id"],  # type: ignore[arg-type]
        producer_epoch=0,
        base_sequence=args["base_sequence"],  # type: ignore[arg-type]
        max_timestamp=args["max_timestamp"],  # type: ignore[arg-type]
        is_control=args["is_control"],  # type: ignore[arg-type]
        last_offset_delta=None if records else 2,
    )


@given(
    batches=st.lists(batch_args, min_size=1, max_size=4),
    origin=st.sampled_from(list(AppendOrigin)),
    compact=st.booleans(),
    bounds=st.sampled_from([(2**63 - 1, 2**63 - 1), (1_000, 1_000)]),
    max_message_bytes=st.sampled_from([1_048_588, 200]),
    mutation=st.one_of(st.none(), st.tuples(st.integers(min_value=0), st.integers(0, 255))),
    fix_crc=st.booleans(),
    cut=st.integers(0, 3),
    next_offset=st.sampled_from([0, 10, 2_000]),
)
def test_fast_path_agrees_with_the_python_validator(
    batches: list[dict[str, object]],
    origin: AppendOrigin,
    compact: bool,
    bounds: tuple[int, int],
    max_message_bytes: int,
    mutation: tuple[int, int] | None,
    fix_crc: bool,
    cut: int,
    next_offset: int,
) -> None:
    data = bytearray(b"".join(_build(b) for b in batches))
    if mutation is not None:
        position, value = mutation
        data[position % len(data)] = value
        if fix_crc and len(data) >= layout.RECORD_BATCH_OVERHEAD:
            (length,) = struct.unpack_from(">i", data, layout.LENGTH_OFFSET)
            end = min(len(data), max(layout.RECORD_BATCH_OVERHEAD, length + layout.LOG_OVERHEAD))
            struct.pack_into(">I", data, layout.CRC_OFFSET, crc32c(bytes(data[21:end])))
    request = bytes(data[: len(data) - cut])
    config = LogConfig(
        cleanup_policy=("compact",) if compact else ("delete",),
        message_timestamp_before_max_ms=bounds[0],
        message_timestamp_after_max_ms=bounds[1],
        max_message_bytes=max_message_bytes,
    )
    expected = python_path(request, config, origin, next_offset)
    fast = native_path(request, config, origin, next_offset)
    event("handed back" if fast is None else "fast path taken")
    if fast is None:
        return  # handed back: the Python path decides, whatever it decides
    assert not isinstance(expected, Exception), (
        f"fast path accepted what Python rejects: {expected}"
    )
    assert isinstance(expected, log_validator.ValidatedRecords)
    assert fast == (
        bytes(expected.buffer),
        expected.first_offset,
        expected.last_offset,
        expected.max_timestamp,
        expected.shallow_offset_of_max_timestamp,
        expected.record_count,
        expected.batch_count,
    )


def test_fast_path_is_taken_for_ordinary_requests() -> None:
    data = build_batch([NewRecord(key=b"k%d" % i, value=b"v", timestamp=NOW + i) for i in range(5)])
    fast = native_path(data + data, LogConfig(), AppendOrigin.CLIENT, 42)
    assert fast is not None
    out, first, last, max_ts, offset_of_max, records, batches = fast  # type: ignore[misc]
    # Both batches reach the same max timestamp: the first one to reach it (ends at 46) counts.
    assert (first, last, max_ts, offset_of_max, records, batches) == (42, 51, NOW + 4, 46, 10, 2)
    assert out == bytes(python_path(data + data, LogConfig(), AppendOrigin.CLIENT, 42).buffer)  # type: ignore[attr-defined]


@pytest.mark.parametrize("compression_type", ["gzip", "lz4"])
def test_fast_path_is_skipped_when_batches_must_be_recompressed(compression_type: str) -> None:
    data = build_batch([NewRecord(key=b"k", value=b"v" * 100, timestamp=NOW)])
    result = validate_and_assign_offsets(
        data, tp=TP, config=LogConfig(compression_type=compression_type), next_offset=0, now_ms=NOW
    )
    from storagecore import RecordBatch

    assert RecordBatch(bytes(result.buffer)).compression.config_name == compression_type
