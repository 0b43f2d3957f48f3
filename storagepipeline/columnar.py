"""Planned segment ranges as ``pyarrow.RecordBatch``es, through the native columnar decoder.

Called on the executors by the data source's ``read()`` (and by the ``latest`` view). Each task
reads its planned files in chunks of :data:`CHUNK_BYTES` with ``pread`` (never ``mmap``: a file
the worker truncates during recovery must not kill the Python worker with SIGBUS) and hands
each chunk to :func:`storagecore.records.columns.decode_columns`, which validates every batch
(sizes, magic, CRC-32C, record framing) and returns the requested columns as Arrow-layout
buffers. They are wrapped with ``pyarrow.Array.from_buffers`` without a copy: no Python runs per
record. Only the columns of the schema Spark asks for are decoded; ``topic`` and ``partition``
are constants of the task, built with ``pyarrow.repeat``.

What must not happen here: a record delivered from a batch that failed validation, or a row
outside the planned offset range. A bad batch raises :class:`CorruptDataError` naming the file
and its position, or with ``failOnCorruption=false`` is skipped and counted (a batch whose
length field is broken ends the file: the bytes after it cannot be framed), as
:mod:`storagepipeline.reading` does record by record.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from storagecore.log_dir_view import index_position
from storagecore.records import columns as core_columns
from storagecore.records import layout
from storagecore.records.columns_types import DecodedColumns
from storagecore.records.file_records import FileRecords
from storagepipeline.logdirs import CorruptDataError, SegmentRef
from storagepipeline.reading import ReadCounters, ReadOptions, opened

logger = logging.getLogger(__name__)

#: Bytes of a file handed to the decoder at once: bounds a task's memory (the decoded columns
#: of a chunk, up to ``max_output_bytes`` more for a compressed batch) and is large enough that
#: the per-call cost vanishes. A batch larger than a chunk gets a chunk of its own size.
CHUNK_BYTES: Final = 8 << 20

#: Spark's column names (the Kafka source's schema) and the decoder's.
DECODED_COLUMNS: Final = {
    "key": "key",
    "value": "value",
    "offset": "offset",
    "timestamp": "timestamp",
    "timestampType": "timestamp_type",
    "headers": "headers",
}
#: Columns that are the same for every row of a task.
CONSTANT_COLUMNS: Final = ("topic", "partition")

_PREFIX = layout.LOG_HEADER_PREFIX  # base offset, length (the framing of a batch)
_INT64 = struct.Struct("<q")
_INT32 = struct.Struct("<i")


@dataclasses.dataclass(slots=True)
class DecodeCounters:
    """What the decoder was asked for in one task: how many calls, and the bytes of each
    decoded column's buffers (how tests see that a key-only read never decodes values)."""

    calls: int = 0
    rows: int = 0
    column_bytes: dict[str, int] = dataclasses.field(default_factory=dict)

    def add(self, decoded: DecodedColumns) -> None:
        self.calls += 1
        self.rows += decoded.rows
        for name, buffers in decoded.buffers.items():
            size = sum(memoryview(buffer).nbytes for buffer in buffers)
            self.column_bytes[name] = self.column_bytes.get(name, 0) + size


def decoded_names(field_names: Sequence[str]) -> tuple[str, ...]:
    """The decoder's names of the columns a schema needs (constants need none)."""
    unknown = [
        name for name in field_names if name not in DECODED_COLUMNS and name not in CONSTANT_COLUMNS
    ]
    assert not unknown, f"schema fields {unknown} were not checked against the source's schema"
    return tuple(DECODED_COLUMNS[name] for name in field_names if name in DECODED_COLUMNS)


@dataclasses.dataclass(frozen=True, slots=True)
class ArrowTarget:
    """Where decoded rows go: the task's Arrow schema, topic and partition, and the batch size."""

    schema: pa.Schema
    topic: str
    partition: int
    rows_per_batch: int

    @property
    def columns(self) -> tuple[str, ...]:
        return decoded_names(self.schema.names)


def record_batches(
    ref: SegmentRef,
    directory: Path,
    target: ArrowTarget,
    options: ReadOptions,
    counters: ReadCounters,
    *,
    decode_counters: DecodeCounters | None = None,
) -> Iterator[pa.RecordBatch]:
    """The planned range's records as Arrow batches of ``target.schema``, in offset order,
    at most ``target.rows_per_batch`` rows each (slices of one decoded chunk share its
    buffers)."""
    chunks = chunk_batches(
        ref, directory, target, options, counters, decode_counters=decode_counters
    )
    for batch in chunks:
        yield from slices(batch, target.rows_per_batch)


def slices(batch: pa.RecordBatch, rows_per_batch: int) -> Iterator[pa.RecordBatch]:
    """``batch`` cut into zero-copy slices of at most ``rows_per_batch`` rows."""
    for start in range(0, batch.num_rows, rows_per_batch):
        yield batch.slice(start, rows_per_batch)


def chunk_batches(
    ref: SegmentRef,
    directory: Path,
    target: ArrowTarget,
    options: ReadOptions,
    counters: ReadCounters,
    *,
    decode_counters: DecodeCounters | None = None,
) -> Iterator[pa.RecordBatch]:
    """One Arrow batch per decoder call that holds rows of the planned range (at most
    ``target.rows_per_batch`` rows, unless one record batch alone holds more)."""
    for decoded in decoded_chunks(
        ref, directory, target.columns, options, counters, max_rows=target.rows_per_batch
    ):
        if decode_counters is not None:
            decode_counters.add(decoded)
        if decoded.rows:
            yield to_record_batch(decoded, target)


def decoded_chunks(
    ref: SegmentRef,
    directory: Path,
    names: Sequence[str],
    options: ReadOptions,
    counters: ReadCounters,
    *,
    max_rows: int = 0,
) -> Iterator[DecodedColumns]:
    """The ``names`` columns of the planned range, one decoder call at a time (including calls
    that found no row of the range: their ``rows`` is 0), each of at most ``max_rows`` rows
    (0: a whole chunk per call) unless one record batch alone holds more."""
    for records, current in opened(ref, directory, options, counters):
        yield from _chunks_of(records, current, names, options, counters, max_rows)


def _chunks_of(  # noqa: PLR0917 - one walk's state
    records: FileRecords,
    ref: SegmentRef,
    names: Sequence[str],
    options: ReadOptions,
    counters: ReadCounters,
    max_rows: int,
) -> Iterator[DecodedColumns]:
    end = min(records.size_bytes, ref.size_bytes)
    position = index_position(records.path, ref.base_offset, ref.start_offset, end)
    chunk_bytes = CHUNK_BYTES
    while position < end:
        size = min(chunk_bytes, end - position)
        chunk = os.pread(records.fd, size, position)
        if len(chunk) < size:
            # The file is shorter than planned (truncated by a recovery): read what is there.
            end = position + len(chunk)
            size = len(chunk)
        # The chunk in calls of at most max_rows rows, each from where the last one stopped:
        # the batches come out at the size Spark takes them, in buffers the allocator reuses.
        taken = 0
        while taken < size:
            decoded = core_columns.decode_columns(
                chunk,
                taken,
                size,
                names,
                min_offset=ref.start_offset,
                max_offset=ref.end_offset,
                max_rows=max_rows,
            )
            yield decoded
            if decoded.problem is not None:
                skip = _skippable_size(chunk, decoded.position)
                _corrupt(ref, position, decoded, options, counters, skip=skip)
                if skip is None:
                    return
                taken = decoded.position + skip
                continue
            if _last_offset(decoded) >= ref.end_offset - 1:
                return  # the range ends inside this chunk: the rest of the file is not needed
            if decoded.position == taken:
                break  # the next batch does not fit the rest of the chunk
            taken = decoded.position
        if taken == 0:
            # The next batch does not fit the chunk: a larger chunk for it, or, at the planned
            # end, a torn tail (a batch still being written when the read was planned).
            if size == end - position:
                return
            declared = _declared_size(chunk)
            chunk_bytes = max(chunk_bytes, declared or 0, CHUNK_BYTES)
            if declared is None or declared <= size:
                return
            continue
        chunk_bytes = CHUNK_BYTES
        position += taken


def _declared_size(chunk: bytes) -> int | None:
    if len(chunk) < _PREFIX.size:
        return None
    _base, length = _PREFIX.unpack_from(chunk, 0)
    return layout.LOG_OVERHEAD + length if length >= 0 else None


def _skippable_size(chunk: bytes, position: int) -> int | None:
    """The size of the bad batch at ``position`` when its framing holds (the next batch is
    where its length says), else None."""
    if len(chunk) - position < _PREFIX.size:
        return None
    _base, length = _PREFIX.unpack_from(chunk, position)
    size = layout.LOG_OVERHEAD + int(length)
    if length < layout.MIN_DECLARED_BATCH_LENGTH or position + size > len(chunk):
        return None
    return size


def _last_offset(decoded: DecodedColumns) -> int:
    """The last offset of the last batch the decoder walked (-1 if none)."""
    if decoded.batches == 0:
        return -1
    last = decoded.batches - 1
    base = _INT64.unpack_from(decoded.batch_buffers["base_offset"], 8 * last)[0]
    delta = _INT32.unpack_from(decoded.batch_buffers["last_offset_delta"], 4 * last)[0]
    return int(base) + int(delta)


def _corrupt(
    ref: SegmentRef,
    chunk_position: int,
    decoded: DecodedColumns,
    options: ReadOptions,
    counters: ReadCounters,
    *,
    skip: int | None,
) -> None:
    assert decoded.problem is not None
    # The decoder's message names the position in the chunk it was given; say the file's.
    prefix = f"batch at position {decoded.position}"
    problem = decoded.problem
    detail = problem[len(prefix) :].lstrip(":, ") if problem.startswith(prefix) else problem
    message = f"{ref.path} at position {chunk_position + decoded.position}: {detail}"
    if options.fail_on_corruption:
        raise CorruptDataError(message + " (set failOnCorruption=false to skip corrupt batches)")
    counters.corrupt_batches += 1
    what = "the rest of the segment" if skip is None else "the batch"
    logger.warning("Skipping %s (failOnCorruption=false): %s", what, message)
    counters.note(f"skipped {what}: {message}")


# -- Arrow ---------------------------------------------------------------------------------------
def to_record_batch(decoded: DecodedColumns, target: ArrowTarget) -> pa.RecordBatch:
    """The decoded buffers wrapped as the columns of ``target.schema`` (no copy of the data)."""
    rows = decoded.rows
    arrays: list[pa.Array] = []
    for field in target.schema:
        name = field.name
        if name == "topic":
            arrays.append(pa.repeat(pa.scalar(target.topic, field.type), rows))
        elif name == "partition":
            arrays.append(pa.repeat(pa.scalar(target.partition, field.type), rows))
        else:
            arrays.append(_column(decoded, DECODED_COLUMNS[name], field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target.schema)


def _column(decoded: DecodedColumns, name: str, arrow_type: pa.DataType) -> pa.Array:
    rows = decoded.rows
    buffers = [pa.py_buffer(buffer) for buffer in decoded.buffers[name]]
    if name in ("key", "value"):
        return pa.Array.from_buffers(
            arrow_type, rows, buffers, null_count=decoded.null_counts[name]
        )
    if name in ("offset", "timestamp_type"):
        return pa.Array.from_buffers(arrow_type, rows, [None, buffers[0]])
    if name == "timestamp":
        # Kafka's milliseconds to Spark's microseconds (the one computed column).
        millis = pa.Array.from_buffers(pa.timestamp("ms", tz="UTC"), rows, [None, buffers[0]])
        return pc.cast(millis, arrow_type)
    assert name == "headers", name
    lists, key_offsets, key_data, value_validity, value_offsets, value_data = buffers
    count = _INT32.unpack_from(decoded.buffers[name][0], 4 * rows)[0]
    struct_type = arrow_type.value_type
    key_type = struct_type.field("key").type
    keys = pa.Array.from_buffers(key_type, count, [None, key_offsets, key_data])
    values = pa.Array.from_buffers(
        struct_type.field("value").type,
        count,
        [value_validity, value_offsets, value_data],
        null_count=decoded.null_counts["headers.value"],
    )
    items = pa.Array.from_buffers(struct_type, count, [None], children=[keys, values])
    return pa.Array.from_buffers(arrow_type, rows, [None, lists], children=[items])
