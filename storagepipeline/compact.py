"""The ``compact`` job: Kafka's log cleaning of whole partitions, spread over Spark.

The storage core's cleaner holds a key → latest offset map in one process, bounded by the dedupe
buffer; a partition with more distinct dirty keys than that takes several rounds. Here:

1. (driver) take the data dir's lock through a :class:`storagecore.LogManager` (recovering the
   logs as a worker would), and per partition compute the cleaner's range ``[first dirty, first
   uncleanable)`` from the cleaner checkpoint, exactly as the worker's cleaner does;
2. (Spark) read the dirty segments in parallel and aggregate ``(partition, digest(key)) → max
   offset``: the offset map as a Spark aggregation, with no single-process bound (the digest
   is the map's keyed SipHash, under one secret drawn for the job);
3. (Spark) read the keys of each group of segments (the cleaner's size-bounded groups), join them
   with the map, and rewrite each group on an executor with the cleaner's own filter
   (:meth:`storagecore.cleaner.Cleaner.write_cleaned_segment`) into ``<base>.log.cleaned``; an
   executor's memory holds one group's keys;
4. (driver) swap each cleaned group in with :meth:`storagecore.Log.replace_segments` (the
   crash-safe protocol), update the cleaner checkpoint, shut the log manager down cleanly.

Because the filter, the groups, the horizon and the offset range are the cleaner's, the result is
the records the storage core cleaner writes at the same offsets, when it can do the job in one
round. A failure before step 4 leaves only ``.cleaned`` files, which the loader deletes.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's customary alias
from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

from storagecore import LogConfig, LogManager, TopicPartition
from storagecore import files as core_files
from storagecore.cleaner import (
    CleanedTransactionMetadata,
    Cleaner,
    CleanerStats,
    dirty_segments,
    group_segments_by_size,
)
from storagecore.cleaner.log_to_clean import cleanable_offsets, log_to_clean
from storagecore.cleaner.manager import LogCleanerManager
from storagecore.cleaner.offset_map import ENTRY_BYTES, SkimpyOffsetMap, key_digest, new_secret
from storagecore.config import CleanerConfig
from storagecore.errors import CorruptRecordError, LogDirLockedError
from storagecore.records.file_records import FileRecords
from storagecore.segment import LogSegment
from storagecore.transactions import AbortedTxn, ProducerLastBatch
from storagepipeline import reading
from storagepipeline.logdirs import (
    CorruptDataError,
    PipelineError,
    SegmentRef,
    clip,
    snapshot_partition,
)

#: The job never skips: a corrupt batch or a missing range fails it (nothing is swapped).
_STRICT = reading.ReadOptions(fail_on_corruption=True, fail_on_data_loss=True)

logger = logging.getLogger(__name__)

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
class _Segment:
    path: str
    base_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class _MapTask:
    """Keys of one dirty segment (the ref narrowed to the dirty offsets)."""

    tpi: int
    ref: SegmentRef
    directory: str
    aborted: tuple[AbortedTxn, ...]
    #: The job's offset-map digest secret (one per job: every executor digests alike).
    secret: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class _GroupTask:
    """One cleaner group of one partition: rewritten on an executor."""

    gid: int
    tpi: int
    topic: str
    partition: int
    directory: str
    config: LogConfig
    segments: tuple[_Segment, ...]
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


@dataclasses.dataclass(frozen=True, slots=True)
class CompactResult:
    """One partition's outcome (``stats`` has the cleaner's fields, summed over groups)."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int
    groups: int
    stats: dict[str, Any]


class _ReadOnlySegment:
    """A segment as the cleaner's filter reads it, without opening its indexes."""

    def __init__(self, segment: _Segment) -> None:
        self.base_offset = segment.base_offset
        self.log = FileRecords(Path(segment.path), create=False, writable=False)


def _is_aborted(aborted: Sequence[AbortedTxn], producer_id: int, offset: int) -> bool:
    return any(
        t.producer_id == producer_id and t.first_offset <= offset < t.last_offset for t in aborted
    )


def _map_keys(task: _MapTask) -> Iterator[tuple[int, bytes, int]]:
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


def _group_keys(task: _GroupTask) -> Iterator[tuple[int, int, bytes]]:
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
    item: tuple[int, tuple[Iterable[_GroupTask], Iterable[tuple[bytes, int]]]],
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
        )
        cleaned.close()
    finally:
        for source in sources:
            source.log.close()
    return {"gid": task.gid, "keys": len(entries), **stats.as_dict()}


_SUMMED = (
    "bytes_read",
    "bytes_written",
    "messages_read",
    "messages_written",
    "invalid_messages",
    "batches_copied_verbatim",
    "batches_rebuilt",
)


def compact(
    spark: SparkSession,
    data_dir: str,
    *,
    topics: Sequence[str] = (),
    partitions: Sequence[TopicPartition] = (),
    configs: Mapping[str, LogConfig] | None = None,
    now_ms: int | None = None,
) -> list[CompactResult]:
    """Compact the named topics (or partitions) of ``data_dir``; see the module docstring."""
    configs = dict(configs or {})
    now = int(time.time() * 1000) if now_ms is None else now_ms
    root = Path(data_dir)
    try:
        manager = LogManager([root], config_for=lambda t: configs.get(t, _default_config()))
    except LogDirLockedError as exc:
        raise PipelineError(f"{exc}; compact runs only where no worker holds the dir") from exc
    try:
        return _compact_locked(spark, manager, root, topics, partitions, configs, now)
    finally:
        for log in manager.logs.values():
            log.delete_expired_files(force=True)  # the replaced segments: no reader holds them
        manager.shutdown()


def _default_config() -> LogConfig:
    return LogConfig.from_topic_config({"cleanup.policy": "compact"})


def _selected(
    manager: LogManager,
    topics: Sequence[str],
    partitions: Sequence[TopicPartition],
    declared: Iterable[str],
) -> list[TopicPartition]:
    """The named partitions (each must exist and be compacted); without names, every
    partition of a ``declared`` topic (one given a config) whose policy includes compact."""
    declared = {t for t in declared if manager.config_for(t).compact}
    present = sorted(manager.logs)
    wanted = set(partitions)
    for topic in topics:
        matching = [tp for tp in present if tp.topic == topic]
        if not matching:
            raise PipelineError(f"unknown topic {topic!r} in {manager.log_dirs[0]}")
        wanted.update(matching)
    missing = sorted(str(tp) for tp in wanted if tp not in manager.logs)
    if missing:
        raise PipelineError(f"unknown partition(s) {', '.join(missing)}")
    if not topics and not partitions:
        wanted = {tp for tp in present if tp.topic in declared}
        if not wanted:
            raise PipelineError(
                "no topic given and no partition of a declared compacted topic in "
                f"{manager.log_dirs[0]}"
            )
    for tp in wanted:
        if not manager.get_log(tp).config.compact:
            raise PipelineError(
                f"{tp}: cleanup.policy is {','.join(manager.get_log(tp).config.cleanup_policy)}, "
                f"not compact (give the topic's config with cleanup.policy=compact)"
            )
    return sorted(wanted)


def _compact_locked(  # noqa: PLR0917 - one job's state
    spark: SparkSession,
    manager: LogManager,
    root: Path,
    topics: Sequence[str],
    partitions: Sequence[TopicPartition],
    configs: Mapping[str, LogConfig],
    now: int,
) -> list[CompactResult]:
    selected = _selected(manager, topics, partitions, configs)
    checkpoints = LogCleanerManager([root])
    saved = checkpoints.all_checkpoints()
    map_tasks: list[_MapTask] = []
    plans: list[tuple[TopicPartition, int, int, list[list[LogSegment]]]] = []
    group_tasks: list[_GroupTask] = []
    cleaner_config = CleanerConfig()
    secret = new_secret()
    for tpi, tp in enumerate(selected):
        log = manager.get_log(tp)
        to_clean = log_to_clean(log, cleanable_offsets(log, saved.get(tp), now), now)
        first_dirty, upper = to_clean.first_dirty_offset, to_clean.first_uncleanable_offset
        txn_state = log.transaction_state()
        aborted = tuple(txn_state.aborted)
        segments = log.segments
        # The files are stable: the manager holds the dir's lock for the whole job.
        snap = snapshot_partition(tp, log.directory)
        map_tasks.extend(
            _MapTask(tpi, ref, str(log.directory), aborted, secret)
            for ref in clip(snap, first_dirty, upper)
        )
        # The cleaner's end offset: everything up to the first uncleanable offset is mapped.
        end_offset = upper if dirty_segments(segments, first_dirty, upper) else first_dirty
        groups = group_segments_by_size(
            [s for s in segments[:-1] if s.base_offset < end_offset],
            log.config.segment_bytes,
            log.config.segment_index_bytes,
            upper,
        )
        plans.append((tp, first_dirty, end_offset, groups))
        producers = tuple(
            sorted(
                txn_state.active_producers(now, cleaner_config.producer_id_expiration_ms).items()
            )
        )
        for group in groups:
            group_tasks.append(
                _GroupTask(
                    gid=len(group_tasks),
                    tpi=tpi,
                    topic=tp.topic,
                    partition=tp.partition,
                    directory=str(log.directory),
                    config=log.config,
                    segments=tuple(_Segment(str(s.log.path), s.base_offset) for s in group),
                    key_refs=tuple(
                        clip(snap, group[0].base_offset, min(group[-1].next_offset(), end_offset))
                    ),
                    end_offset=end_offset,
                    first_dirty_offset=first_dirty,
                    upper_bound=upper,
                    now_ms=now,
                    secret=secret,
                    aborted=aborted,
                    producers=producers,
                )
            )
    results = _run_spark(spark, map_tasks, group_tasks)
    outcomes: list[CompactResult] = []
    gid = 0
    for tp, first_dirty, end_offset, groups in plans:
        log = manager.get_log(tp)
        totals: dict[str, Any] = dict.fromkeys(_SUMMED, 0)
        for group in groups:
            totals_of = results[gid]
            gid += 1
            for name in _SUMMED:
                totals[name] += totals_of.get(name, 0)
            cleaned = LogSegment.open(
                log.directory,
                group[0].base_offset,
                index_interval_bytes=log.config.index_interval_bytes,
                max_index_size_bytes=log.config.segment_index_bytes,
                now_ms=now,
                suffix=core_files.CLEANED_SUFFIX,
                writable_indexes=False,
            )
            if not log.replace_segments([cleaned], group):
                cleaned.delete_files()
        live = [lg.tp for lg in manager.logs.values() if lg.parent_dir == log.parent_dir]
        checkpoints.update_checkpoint(log.parent_dir, live, update=(tp, end_offset))
        outcomes.append(
            CompactResult(tp.topic, tp.partition, first_dirty, end_offset, len(groups), totals)
        )
        logger.info(
            "compacted %s: [%d, %d) in %d group(s): %s",
            tp,
            first_dirty,
            end_offset,
            len(groups),
            totals,
        )
    return outcomes


def _run_spark(
    spark: SparkSession, map_tasks: list[_MapTask], group_tasks: list[_GroupTask]
) -> dict[int, dict[str, Any]]:
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
