"""``compact``'s second path: the offset map as a Spark aggregation, for partitions whose dirty
keys do not fit one executor's map.

1. read the dirty segments in parallel and aggregate ``(partition, digest(key)) → max offset``
   (the digest is the map's keyed SipHash, under the job's secret): no single-process bound;
2. read the keys of each group of segments (the cleaner's size-bounded groups), join them with
   the map, and rewrite each group on an executor with the cleaner's own filter
   (:meth:`storagecore.cleaner.Cleaner.write_cleaned_segment`) into ``<base>.log.cleaned``; an
   executor's memory holds one group's keys.

Called by :mod:`storagepipeline.compact`, which plans the tasks and swaps the result. Writes only
``.cleaned`` files; a corrupt batch fails the job.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's customary alias
from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

from storagecore import LogConfig, TopicPartition
from storagecore.cleaner import CleanedTransactionMetadata, Cleaner, CleanerStats
from storagecore.cleaner.offset_map import ENTRY_BYTES, SkimpyOffsetMap, key_digest
from storagecore.cleaner.round_plan import RoundPlan
from storagecore.config import CleanerConfig
from storagecore.errors import CorruptRecordError
from storagecore.records.file_records import FileRecords
from storagecore.transactions import AbortedTxn, ProducerLastBatch
from storagepipeline import reading
from storagepipeline.logdirs import CorruptDataError, PartitionSnapshot, SegmentRef, clip
from storagepipeline.partition_clean import SegmentFile

#: The job never skips: a corrupt batch or a missing range fails it (nothing is swapped).
_STRICT = reading.ReadOptions(fail_on_corruption=True, fail_on_data_loss=True)


_KEYS_SCHEMA = StructType(
    [
        StructField("tpi", IntegerType(), False),
        StructField("digest", BinaryType(), False),
        StructField("offset", LongType(), False),
    ]
)
_GROUP_KEYS_SCHEMA = StructType(
    [
        StructField("gid", IntegerType(), False),
        StructField("tpi", IntegerType(), False),
        StructField("digest", BinaryType(), False),
    ]
)


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


class _ReadOnlySegment:
    """A segment as the cleaner's filter reads it, without opening its indexes."""

    def __init__(self, segment: SegmentFile) -> None:
        self.base_offset = segment.base_offset
        self.log = FileRecords(Path(segment.path), create=False, writable=False)
        assert self.log.size_bytes >= segment.size_bytes, (segment, self.log.size_bytes)
        self.log.size_bytes = segment.size_bytes  # nothing appended after planning


def _is_aborted(aborted: Sequence[AbortedTxn], producer_id: int, offset: int) -> bool:
    return any(
        t.producer_id == producer_id and t.first_offset <= offset < t.last_offset for t in aborted
    )


def _map_keys(task: MapTask) -> Iterator[tuple[int, bytes, int]]:
    """``(tpi, digest(key), offset)`` of the keyed data records of the ref's range, aborted
    transactional data excluded (the cleaner's ``buildOffsetMap``). Batches are CRC-checked
    by :func:`storagepipeline.reading.batches`; a corrupt one fails the job."""
    ref = task.ref
    for batch in reading.batches(ref, Path(task.directory), _STRICT, reading.ReadCounters()):
        if batch.is_transactional and _is_aborted(
            task.aborted, batch.producer_id, batch.base_offset
        ):
            continue
        try:
            decoded = batch.records()
        except CorruptRecordError as exc:
            raise CorruptDataError(f"{ref.path}: {exc}") from exc
        for record in decoded:
            if record.key is not None and ref.start_offset <= record.offset < ref.end_offset:
                yield task.tpi, key_digest(record.key, task.secret), record.offset


def _group_keys(task: GroupTask) -> Iterator[tuple[int, int, bytes]]:
    """``(gid, tpi, digest(key))`` of the keys the group's records hold below the map's end."""
    seen: set[bytes] = set()
    counters = reading.ReadCounters()
    for ref in task.key_refs:
        for record, _type in reading.records(ref, Path(task.directory), _STRICT, counters):
            if record.key is not None:
                seen.add(key_digest(record.key, task.secret))
    for digest in seen:
        yield task.gid, task.tpi, digest


def _clean_group(
    item: tuple[int, tuple[Iterable[GroupTask], Iterable[tuple[bytes, int]]]],
) -> dict[str, Any]:
    """Rewrite one group into ``.cleaned`` files with the storage core's cleaner filter."""
    _gid, (tasks, pairs) = item
    (task,) = list(tasks)
    entries = list(pairs)
    # Load factor 0.5: at most half the slots used, so probes stay short.
    offset_map = SkimpyOffsetMap(max(2 * len(entries), 2) * ENTRY_BYTES, 1.0, secret=task.secret)
    for digest, latest in entries:
        offset_map.put_digest(digest, latest)
    offset_map.update_latest_offset(task.end_offset - 1)
    cleaner = Cleaner(offset_map=offset_map, config=CleanerConfig())
    tp = TopicPartition(task.topic, task.partition)
    stats = CleanerStats(topic_partition=str(tp), first_dirty_offset=task.first_dirty_offset)
    sources = [_ReadOnlySegment(segment) for segment in task.segments]
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
            source.log.close()
    return {"gid": task.gid, "keys": len(entries), **stats.as_dict()}


def run(
    spark: SparkSession, map_tasks: list[MapTask], group_tasks: list[GroupTask]
) -> dict[int, dict[str, Any]]:
    """Steps 1 and 2 of the module docstring; per group id, its cleaner figures."""
    if not group_tasks:
        return {}
    sc = spark.sparkContext
    keys = spark.createDataFrame(
        sc.parallelize(map_tasks, max(len(map_tasks), 1)).flatMap(_map_keys), _KEYS_SCHEMA
    )
    latest = keys.groupBy("tpi", "digest").agg(F.max("offset").alias("latest"))
    group_keys = spark.createDataFrame(
        sc.parallelize(group_tasks, len(group_tasks)).flatMap(_group_keys), _GROUP_KEYS_SCHEMA
    )
    pairs = (
        group_keys.join(latest, on=["tpi", "digest"])
        .select("gid", "digest", "latest")
        .rdd.map(lambda row: (row["gid"], (bytes(row["digest"]), row["latest"])))
    )
    tasks = sc.parallelize([(task.gid, task) for task in group_tasks], len(group_tasks))
    cleaned = tasks.cogroup(pairs, numPartitions=len(group_tasks)).map(_clean_group).collect()
    return {result["gid"]: result for result in cleaned}


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
