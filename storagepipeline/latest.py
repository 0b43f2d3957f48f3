"""The ``latest`` view of a partition, columnar: for each key its highest-offset record,
tombstones and keyless records dropped (what a consumer of a fully cleaned log keeps).

Called on the executors by the data source for ``view=latest``. Two passes over the unit's
segments through :mod:`.columnar`: the first decodes keys and offsets only and finds each key's
last offset with an Arrow group-by (it holds one entry per distinct key of the partition, the
bound of this view; the ``compact`` job has none); the second decodes the schema's columns (plus
offsets and values, to tell winners and tombstones) and filters with Arrow kernels. No Python
runs per record.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from storagepipeline import columnar
from storagepipeline.logdirs import SegmentRef
from storagepipeline.reading import ReadCounters, ReadOptions

_NEEDED = (pa.field("offset", pa.int64()), pa.field("value", pa.binary()))


def last_offsets(
    refs: Sequence[SegmentRef],
    directory: Path,
    options: ReadOptions,
    counters: ReadCounters,
    *,
    decode_counters: columnar.DecodeCounters | None = None,
) -> pa.Array:
    """The highest offset of every non-null key in ``refs``, sorted."""
    schema = pa.schema([pa.field("key", pa.binary()), pa.field("offset", pa.int64())])
    target = columnar.ArrowTarget(schema, "", 0, rows_per_batch=2**31 - 1)
    batches = [
        batch
        for ref in refs
        for batch in columnar.record_batches(
            ref, directory, target, options, counters, decode_counters=decode_counters
        )
    ]
    if not batches:
        return pa.array([], pa.int64())
    table = pa.Table.from_batches(batches, schema=schema).filter(pc.is_valid(pc.field("key")))
    last = table.group_by("key").aggregate([("offset", "max")]).column("offset_max")
    last = last.combine_chunks()
    return pc.take(last, pc.array_sort_indices(last))


def record_batches(
    refs: Sequence[SegmentRef],
    directory: Path,
    target: columnar.ArrowTarget,
    options: ReadOptions,
    counters: ReadCounters,
    *,
    decode_counters: columnar.DecodeCounters | None = None,
) -> Iterator[pa.RecordBatch]:
    """The latest record of each key in ``refs``, as batches of ``target.schema``."""
    winners = last_offsets(refs, directory, options, counters, decode_counters=decode_counters)
    if len(winners) == 0:
        return
    schema = target.schema
    for field in _NEEDED:
        if field.name not in schema.names:
            schema = schema.append(field)
    wide = columnar.ArrowTarget(schema, target.topic, target.partition, target.rows_per_batch)
    for ref in refs:
        for batch in columnar.chunk_batches(
            ref, directory, wide, options, counters, decode_counters=decode_counters
        ):
            offsets = batch.column("offset")
            # Only the winners inside this chunk's offsets are looked up (a set built from all
            # of them per chunk would cost the partition's key count per chunk).
            low = bisect.bisect_left(winners, offsets[0].as_py(), key=_as_int)
            high = bisect.bisect_right(winners, offsets[-1].as_py(), key=_as_int)
            if low == high:
                continue
            keep = pc.and_(
                pc.is_in(offsets, value_set=winners[low:high]),
                pc.is_valid(batch.column("value")),
            )
            kept = batch.filter(keep).select(target.schema.names)
            yield from columnar.slices(kept, target.rows_per_batch)


def _as_int(scalar: pa.Scalar) -> int:
    value = scalar.as_py()
    assert isinstance(value, int), scalar
    return value
