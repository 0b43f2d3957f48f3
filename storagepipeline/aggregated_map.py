"""``compact``'s second path: the offset map as a Spark aggregation, for partitions whose dirty
keys do not fit one executor's map.

1. read the dirty segments in parallel and aggregate ``(partition, digest(key)) → max offset``
   (the digest is the map's keyed SipHash, under the job's secret): no single-process bound;
2. read the keys of each group of segments (the cleaner's size-bounded groups), join them with
   the map, and rewrite each group on an executor with the cleaner's own filter
   (:meth:`storagecore.cleaner.Cleaner.write_cleaned_segment`) into ``<base>.log.cleaned``; an
   executor's memory holds one group's keys.

No Python runs per record: the segments are read by the native columnar decoder
(:func:`storagepipeline.columnar.decoded_chunks`, every batch CRC-checked), a decoded key column
is digested in one native call (:func:`storagecore.cleaner.offset_map.key_digests`), and the
rows reach Spark as Arrow batches through a Python data source defined for the job (pyspark's
``mapInArrow`` would need pandas). The join's result reaches each group's executor as one
Python tuple per distinct key of the group (the same limit), and its map is loaded from them in
one native call (:meth:`SkimpyOffsetMap.put_digests`).

Called by :mod:`storagepipeline.compact`, which plans the tasks and swaps the result. Writes only
``.cleaned`` files; a corrupt batch fails the job.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's customary alias
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

from storagecore import LogConfig, TopicPartition
from storagecore.cleaner import CleanedTransactionMetadata, Cleaner, CleanerStats
from storagecore.cleaner.map_source import FileSegment
from storagecore.cleaner.offset_map import ENTRY_BYTES, HASH_BYTES, SkimpyOffsetMap, key_digests
from storagecore.cleaner.round_plan import RoundPlan
from storagecore.config import CleanerConfig
from storagecore.records import layout
from storagecore.records.columns_types import DecodedColumns
from storagecore.transactions import AbortedTxn, ProducerLastBatch
from storagepipeline import columnar, reading
from storagepipeline.logdirs import PartitionSnapshot, SegmentRef, clip
from storagepipeline.partition_clean import SegmentFile
from storagepipeline.worker_gc import freeze_long_lived

#: The job never skips: a corrupt batch or a missing range fails it (nothing is swapped).
_STRICT = reading.ReadOptions(fail_on_corruption=True, fail_on_data_loss=True)


_KEYS_SCHEMA = StructType(
    [
        StructField("tpi", IntegerType()),
        StructField("digest", BinaryType()),
        StructField("offset", LongType()),
    ]
)
_KEYS_ARROW = pa.schema([("tpi", pa.int32()), ("digest", pa.binary()), ("offset", pa.int64())])
_GROUP_KEYS_SCHEMA = StructType(
    [
        StructField("gid", IntegerType()),
        StructField("tpi", IntegerType()),
        StructField("digest", BinaryType()),
    ]
)
_GROUP_KEYS_ARROW = pa.schema([("gid", pa.int32()), ("tpi", pa.int32()), ("digest", pa.binary())])
#: The decoder's columns the map needs, and its rows per call (a few MB of buffers).
_MAP_COLUMNS = ("key", "offset")
_ROWS_PER_CALL = 65536


@dataclasses.dataclass(frozen=True, slots=True)
class MapTask:
    """Keys of one dirty segment (the ref narrowed to the dirty offsets)."""

    tpi: int
    ref: SegmentRef
    directory: str
    aborted: tuple[AbortedTxn, ...]
    #: The job's offset-map digest secret (one per job: every executor digests alike).
    secret: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class GroupTask:
    """One cleaner group of one partition: rewritten on an executor."""

    gid: int
    tpi: int
    topic: str
    partition: int
    directory: str
    config: LogConfig
    segments: tuple[SegmentFile, ...]
    #: The group's segments narrowed to offsets below ``end_offset``: whose keys to look up.
    key_refs: tuple[SegmentRef, ...]
    #: The offset map covers offsets below this (the cleaner's ``end_offset``).
    end_offset: int
    first_dirty_offset: int
    upper_bound: int
    now_ms: int
    secret: bytes
    aborted: tuple[AbortedTxn, ...]
    producers: tuple[tuple[int, ProducerLastBatch], ...]
    #: v0/v1 tombstones' horizon (Kafka's legacyDeleteHorizonMs), from the whole log's clean
    #: part on the driver: a group alone does not see it.
    legacy_delete_horizon_ms: int = 0


def _is_aborted(aborted: Sequence[AbortedTxn], producer_id: int, offset: int) -> bool:
    return any(
        t.producer_id == producer_id and t.first_offset <= offset < t.last_offset for t in aborted
    )


def _keyed_digests(
    decoded: DecodedColumns, aborted: Sequence[AbortedTxn], secret: bytes
) -> tuple[pa.Array, pa.Array]:
    """The digests (``binary``, 16 bytes each) and offsets of the decoded rows that the map
    takes: keyed, and not aborted transactional data (the cleaner's ``buildOffsetMap``)."""
    rows = decoded.rows
    validity, key_offsets, key_data = decoded.buffers["key"]
    digests = pa.Array.from_buffers(
        pa.binary(HASH_BYTES),
        rows,
        [None, pa.py_buffer(key_digests(key_offsets, key_data, rows, secret))],
    ).cast(pa.binary())
    offsets = pa.Array.from_buffers(
        pa.int64(), rows, [None, pa.py_buffer(decoded.buffers["offset"][0])]
    )
    keys = pa.Array.from_buffers(
        pa.binary(),
        rows,
        [pa.py_buffer(validity), pa.py_buffer(key_offsets), pa.py_buffer(key_data)],
        null_count=decoded.null_counts["key"],
    )
    keep = pc.is_valid(keys)
    runs = _committed_runs(decoded, aborted)
    if runs is not None:
        flags = [pa.repeat(pa.scalar(committed), count) for committed, count in runs if count]
        keep = pc.and_(keep, pa.concat_arrays(flags))
    return digests.filter(keep), offsets.filter(keep)


def _committed_runs(
    decoded: DecodedColumns, aborted: Sequence[AbortedTxn]
) -> list[tuple[bool, int]] | None:
    """Per decoded batch (from the decoder's batch table, never per record): whether its rows
    are kept (False: data of an aborted transaction) and how many rows it gave; None when
    no batch is aborted."""
    if not aborted or not decoded.batches:
        return None

    def column(name: str, code: Literal["h", "i", "q"]) -> memoryview:
        return memoryview(decoded.batch_buffers[name]).cast("B").cast(code)

    table = {
        "attributes": column("attributes", "h"),
        "producer_id": column("producer_id", "q"),
        "base_offset": column("base_offset", "q"),
        "rows": column("rows", "i"),
    }
    runs = [
        (
            not (
                table["attributes"][i] & layout.TRANSACTIONAL_FLAG_MASK
                and _is_aborted(aborted, table["producer_id"][i], table["base_offset"][i])
            ),
            table["rows"][i],
        )
        for i in range(decoded.batches)
    ]
    return runs if not all(committed for committed, _rows in runs) else None


def _map_keys(task: MapTask) -> Iterator[pa.RecordBatch]:
    """``(tpi, digest(key), offset)`` of the keyed data records of the ref's range, aborted
    transactional data excluded, one Arrow batch per decoder call. Every batch is CRC-checked
    by the decoder; a corrupt one fails the job."""
    chunks = columnar.decoded_chunks(
        task.ref,
        Path(task.directory),
        _MAP_COLUMNS,
        _STRICT,
        reading.ReadCounters(),
        max_rows=_ROWS_PER_CALL,
    )
    for decoded in chunks:
        if decoded.rows:
            digests, offsets = _keyed_digests(decoded, task.aborted, task.secret)
            tpi = pa.repeat(pa.scalar(task.tpi, pa.int32()), len(digests))
            yield pa.RecordBatch.from_arrays([tpi, digests, offsets], schema=_KEYS_ARROW)


def _group_keys(task: GroupTask) -> Iterator[pa.RecordBatch]:
    """``(gid, tpi, digest(key))`` of the distinct keys the group's records hold below the
    map's end."""
    digests = []
    for ref in task.key_refs:
        chunks = columnar.decoded_chunks(
            ref,
            Path(task.directory),
            _MAP_COLUMNS,
            _STRICT,
            reading.ReadCounters(),
            max_rows=_ROWS_PER_CALL,
        )
        for decoded in chunks:
            if decoded.rows:
                # Every keyed record of the range (aborted ones too: the filter looks them up).
                digests.append(_keyed_digests(decoded, (), task.secret)[0])
    distinct = (
        pc.unique(pa.chunked_array(digests, pa.binary())) if digests else pa.array([], pa.binary())
    )
    count = len(distinct)
    yield pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(task.gid, pa.int32()), count),
            pa.repeat(pa.scalar(task.tpi, pa.int32()), count),
            distinct,
        ],
        schema=_GROUP_KEYS_ARROW,
    )


def _clean_group(task: GroupTask, digests: bytes, latest: bytes) -> dict[str, Any]:
    """Rewrite one group into ``.cleaned`` files with the storage core's cleaner filter;
    ``digests`` (16 bytes each) and ``latest`` (native int64 each) are its keys' latest
    offsets."""
    entries = len(digests) // HASH_BYTES
    # Load factor 0.5: at most half the slots used, so probes stay short.
    offset_map = SkimpyOffsetMap(max(2 * entries, 2) * ENTRY_BYTES, 1.0, secret=task.secret)
    offset_map.put_digests(digests, latest)
    offset_map.update_latest_offset(task.end_offset - 1)
    cleaner = Cleaner(offset_map=offset_map, config=CleanerConfig())
    tp = TopicPartition(task.topic, task.partition)
    stats = CleanerStats(topic_partition=str(tp), first_dirty_offset=task.first_dirty_offset)
    sources = [FileSegment(Path(s.path), s.base_offset, s.size_bytes) for s in task.segments]
    try:
        cleaned = cleaner.write_cleaned_segment(
            Path(task.directory),
            tp,
            task.config,
            sources,
            now_ms=task.now_ms,
            stats=stats,
            txns=CleanedTransactionMetadata(list(task.aborted)),
            producers=dict(task.producers),
            upper_bound=task.upper_bound,
            legacy_delete_horizon_ms=task.legacy_delete_horizon_ms,
        )
        cleaned.close()
    finally:
        for source in sources:
            source.close()
    return {"gid": task.gid, "keys": entries, **stats.as_dict()}


def run(
    spark: SparkSession, map_tasks: list[MapTask], group_tasks: list[GroupTask]
) -> dict[int, dict[str, Any]]:
    """Steps 1 and 2 of the module docstring; per group id, its cleaner figures."""
    if not group_tasks:
        return {}
    keys = _arrow_frame(spark, "map_keys", _KEYS_SCHEMA, map_tasks, _map_keys)
    latest = keys.groupBy("tpi", "digest").agg(F.max("offset").alias("latest"))
    group_keys = _arrow_frame(spark, "group_keys", _GROUP_KEYS_SCHEMA, group_tasks, _group_keys)
    # The joined pairs reach each group's executor as rows (pyspark's Arrow UDFs need pandas,
    # which the pipeline does not install): one Python tuple per distinct key of a group, the
    # map loaded from them in one native call.
    pairs = (
        group_keys.join(latest, on=["tpi", "digest"])
        .select("gid", "digest", "latest")
        .rdd.map(lambda row: (row["gid"], (bytes(row["digest"]), row["latest"])))
    )
    tasks = spark.sparkContext.parallelize(
        [(task.gid, task) for task in group_tasks], len(group_tasks)
    )
    cleaned = tasks.cogroup(pairs, numPartitions=len(group_tasks)).map(_clean_on_executor).collect()
    return {result["gid"]: result for result in cleaned}


def _clean_on_executor(
    item: tuple[int, tuple[Iterable[GroupTask], Iterable[tuple[bytes, int]]]],
) -> dict[str, Any]:
    freeze_long_lived()  # see storagepipeline.worker_gc
    return _clean_cogrouped(item)


def _clean_cogrouped(
    item: tuple[int, tuple[Iterable[GroupTask], Iterable[tuple[bytes, int]]]],
) -> dict[str, Any]:
    _gid, (tasks, pairs) = item
    (task,) = list(tasks)
    entries = list(pairs)
    digests = b"".join(digest for digest, _latest in entries)
    latest = array("q", [offset for _digest, offset in entries]).tobytes()
    return _clean_group(task, digests, latest)


_Task = TypeVar("_Task")


def _arrow_frame(
    spark: SparkSession,
    what: str,
    schema: StructType,
    tasks: Sequence[_Task],
    read: Callable[[_Task], Iterator[pa.RecordBatch]],
) -> DataFrame:
    """The Arrow batches that ``read`` yields for each task (one Spark task each), as a
    DataFrame: a Python data source defined for this job (the tasks travel pickled with its
    class, never in its options, which Spark shows in plans)."""

    class TaskReader(DataSourceReader):
        def partitions(self) -> Sequence[InputPartition]:
            return [InputPartition(i) for i in range(len(tasks))]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            freeze_long_lived()  # on the executor: see storagepipeline.worker_gc
            yield from read(tasks[partition.value])

    name = f"logkeeper_compact_{what}_{uuid.uuid4().hex}"

    class TaskSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self) -> StructType:
            return schema

        def reader(self, schema: StructType) -> DataSourceReader:
            return TaskReader()

    spark.dataSource.register(TaskSource)
    return spark.read.format(name).load()


#: The cleaner's figures that add up over groups.
SUMMED = (
    "bytes_read",
    "bytes_written",
    "messages_read",
    "messages_written",
    "invalid_messages",
    "batches_copied_verbatim",
    "batches_rebuilt",
)


def planned_snapshot(plan: RoundPlan, read_paths: Sequence[str] | None) -> PartitionSnapshot:
    """The plan's segments as the pipeline's readers take them: each file pinned by inode to
    its planned bytes (read at ``read_paths``, a worker's pins, when given), never a listing
    of the directory as it is now."""
    device = os.stat(plan.directory).st_dev
    bases = [s.base_offset for s in plan.segments]
    refs = []
    for i, segment in enumerate(plan.segments):
        last = i + 1 == len(plan.segments)
        read_path = None if read_paths is None else read_paths[i]
        refs.append(
            SegmentRef(
                path=segment.path,
                base_offset=segment.base_offset,
                device=device,
                inode=segment.inode,
                size_bytes=segment.size_bytes,
                start_offset=segment.base_offset,
                # The active segment holds nothing a round reads (it starts at or after the
                # first uncleanable offset).
                end_offset=segment.base_offset if last else bases[i + 1],
                active=last,
                pin_path=read_path if read_path != segment.path else None,
            )
        )
    return PartitionSnapshot(
        topic=plan.topic,
        partition=plan.partition,
        directory=plan.directory,
        log_start_offset=bases[0],
        log_end_offset=plan.first_uncleanable_offset,
        segments=tuple(refs),
    )


def clean_plans(
    spark: SparkSession,
    plans: Sequence[RoundPlan],
    secret: bytes,
    read_paths: Sequence[Sequence[str] | None] | None = None,
) -> dict[int, dict[str, Any]]:
    """Write the ``.cleaned`` segments of every plan's groups through the aggregated map; per
    plan (by its index in ``plans``), the figures of :data:`SUMMED` summed over its groups and
    ``keys``, the distinct keys its groups looked up, and ``cleaned_sizes``, bytes per group."""
    map_tasks: list[MapTask] = []
    group_tasks: list[GroupTask] = []
    owner: list[int] = []
    for tpi, plan in enumerate(plans):
        snap = planned_snapshot(plan, None if read_paths is None else read_paths[tpi])
        first_dirty, end_offset = plan.first_dirty_offset, plan.end_offset
        clean = [s for s in snap.segments if s.base_offset < first_dirty]
        legacy_horizon_ms = (
            int(os.stat(clean[-1].pin_path or clean[-1].path).st_mtime * 1000)
            - plan.config.delete_retention_ms
            if clean
            else 0
        )
        map_tasks.extend(
            MapTask(tpi, ref, plan.directory, plan.aborted, secret)
            for ref in clip(snap, first_dirty, plan.first_uncleanable_offset)
        )
        for group in plan.groups:
            segments = tuple(
                SegmentFile(
                    snap.segments[i].pin_path or snap.segments[i].path,
                    snap.segments[i].base_offset,
                    snap.segments[i].size_bytes,
                )
                for i in group
            )
            last = plan.segments[group[-1] + 1].base_offset
            group_tasks.append(
                GroupTask(
                    gid=len(group_tasks),
                    tpi=tpi,
                    topic=plan.topic,
                    partition=plan.partition,
                    directory=plan.directory,
                    config=plan.config,
                    segments=segments,
                    key_refs=tuple(clip(snap, segments[0].base_offset, min(last, end_offset))),
                    end_offset=end_offset,
                    first_dirty_offset=first_dirty,
                    upper_bound=plan.first_uncleanable_offset,
                    now_ms=plan.now_ms,
                    secret=secret,
                    aborted=plan.aborted,
                    producers=plan.producers,
                    legacy_delete_horizon_ms=legacy_horizon_ms,
                )
            )
            owner.append(tpi)
    done = run(spark, map_tasks, group_tasks)
    totals: dict[int, dict[str, Any]] = {
        i: {**dict.fromkeys(SUMMED, 0), "keys": 0, "cleaned_sizes": []} for i in range(len(plans))
    }
    for gid in sorted(done):
        result = done[gid]
        plan_totals = totals[owner[gid]]
        plan_totals["cleaned_sizes"].append(result["bytes_written"])
        for name in (*SUMMED, "keys"):
            plan_totals[name] += result.get(name, 0)
    return totals
