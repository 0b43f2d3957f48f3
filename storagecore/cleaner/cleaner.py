"""Compaction (Kafka's ``Cleaner``): the algorithms that turn dirty segments into clean ones.

One :meth:`Cleaner.clean` is one round over one log (Kafka's ``doClean``):

1. build the offset map (key digest → last offset) over the dirty range ``[first dirty, first
   uncleanable)``, stopping where the map is full; the round ends at ``map.latest_offset + 1``;
2. group every segment below that end with :func:`group_segments_by_size`;
3. rewrite each group into one ``.cleaned`` segment, keeping a record when no later offset in
   the map has its key (tombstones until their delete horizon, aborted transactional data never,
   markers until their horizon, each producer's last batch and the round's last batch even if
   emptied), then swap it in with :meth:`storagecore.log.Log.replace_segments`;
4. return the end offset, which the caller writes to ``cleaner-offset-checkpoint``.

Invariant (DESIGN 2): offsets and order never change, nothing at or after the first uncleanable
offset is rewritten, and for every key the record with the highest offset survives. A round
whose map filled before the end of the dirty range still makes progress and leaves the rest to
the next round (KAFKA-3587/3894): memory is the map's, whatever the number of keys (DESIGN 4).

The offset map is :mod:`.offset_map`; the choice of log and the cleaning states are
:mod:`.manager`; the threads are :mod:`.log_cleaner`; the figures :mod:`.stats`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final, TypeVar

from storagecore import files
from storagecore.cleaner.cleaned_output import CleanedOutput
from storagecore.cleaner.grouping import group_segments_by_size
from storagecore.cleaner.legacy import (
    filter_legacy_batch,
    legacy_delete_horizon_ms,
    map_legacy_keys,
)
from storagecore.cleaner.map_source import MapSource
from storagecore.cleaner.offset_map import (
    FilteredRecords,
    FilteredRegion,
    RegionStop,
    SkimpyOffsetMap,
    producer_pairs,
)
from storagecore.cleaner.regions import CheckedSpans, SegmentSource, SegmentWalk
from storagecore.cleaner.stats import CleanerStats
from storagecore.cleaner.throttler import Throttler
from storagecore.cleaner.transactions import CleanedTransactionMetadata
from storagecore.config import CleanerConfig, LogConfig, TopicPartition
from storagecore.durability import WriteBehind
from storagecore.errors import CorruptRecordError
from storagecore.log import Log
from storagecore.records.batch import Buffer, Record, RecordBatch
from storagecore.records.codecs import Compression
from storagecore.records.legacy import LegacyRecordBatch
from storagecore.records.memory_records_builder import (
    build_empty_batch,
    rebuild_batch,
    rebuild_batch_from_payload,
)
from storagecore.segment import LogSegment
from storagecore.transactions import AbortedTxn, ProducerLastBatch, control_type_of

logger = logging.getLogger(__name__)

_Segment = TypeVar("_Segment", bound=SegmentSource)

#: Bytes of cleaned output between two write-behind syncs of the ``.cleaned`` log (a thread's
#: ``fdatasync`` while the filter pass goes on; the swap's fsync then finds the rest).
WRITE_BEHIND_BYTES: Final = 2 << 20


# -- the cleaner -------------------------------------------------------------------------------
CheckDone = Callable[[TopicPartition], None]


@dataclasses.dataclass(frozen=True, slots=True)
class CleanRequest:
    """What one round needs to know (a :class:`storagecore.cleaner.manager.LogToClean` is one)."""

    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int


def _never_done(_tp: TopicPartition) -> None:
    return None


class Cleaner:
    """One cleaner thread's worker: its own offset map, a shared throttler."""

    def __init__(
        self,
        thread_id: int = 0,
        *,
        offset_map: SkimpyOffsetMap | None = None,
        config: CleanerConfig | None = None,
        throttler: Throttler | None = None,
        check_done: CheckDone = _never_done,
    ) -> None:
        self.thread_id = thread_id
        self.config = config or CleanerConfig()
        self.offset_map = offset_map or SkimpyOffsetMap(
            self.config.map_memory_per_thread, self.config.io_buffer_load_factor
        )
        self.throttler = throttler or Throttler(self.config.io_max_bytes_per_second)
        self.check_done = check_done
        # What the last map pass's region calls took, for the filter pass (see CheckedSpans).
        self._checked = CheckedSpans()

    # -- one round -------------------------------------------------------------------------
    def clean(self, request: CleanRequest, now_ms: int | None = None) -> CleanerStats:
        """Kafka's ``doClean``: one round over ``request.log``; returns the stats, whose
        ``end_offset`` is the new first dirty offset (the checkpoint value)."""
        log = request.log
        now = log.clock.milliseconds() if now_ms is None else now_ms
        stats = CleanerStats(
            topic_partition=str(log.tp), first_dirty_offset=request.first_dirty_offset
        )
        upper = request.first_uncleanable_offset
        producers = log.last_records_of_active_producers(now, self.config.producer_id_expiration_ms)
        # From the transaction indexes, as Kafka's cleaner: every aborted transaction with data
        # below the round's upper bound whose marker is in a segment the round reads (with
        # the round's bound, not a group's: KAFKA-13727).
        aborted = log.aborted_transactions(log.segments[0].base_offset, upper)
        self.build_offset_map(log, request.first_dirty_offset, upper, aborted, stats)
        end_offset = max(self.offset_map.latest_offset + 1, request.first_dirty_offset)
        stats.end_offset = end_offset
        stats.keys_in_map = self.offset_map.size
        stats.map_slots = self.offset_map.budget_slots
        stats.map_complete_s = time.monotonic()
        segments = [s for s in log.segments[:-1] if s.base_offset < end_offset]
        groups = group_segments_by_size(
            segments,
            log.config.segment_bytes,
            log.config.segment_index_bytes,
            request.first_uncleanable_offset,
        )
        txns = CleanedTransactionMetadata(aborted)
        legacy_horizon_ms = legacy_delete_horizon_ms(
            log.segments, request.first_dirty_offset, log.config.delete_retention_ms
        )
        try:
            for group in groups:
                self.clean_segments(
                    log,
                    group,
                    now_ms=now,
                    stats=stats,
                    txns=txns,
                    producers=producers,
                    upper_bound=upper,
                    legacy_delete_horizon_ms=legacy_horizon_ms,
                )
        finally:
            self._checked.clear()
        stats.groups = len(groups)
        stats.end_s = time.monotonic()
        return stats

    # -- the offset map --------------------------------------------------------------------
    def build_offset_map(
        self,
        log: MapSource,
        start: int,
        end: int,
        aborted: Sequence[AbortedTxn],
        stats: CleanerStats,
    ) -> bool:
        """Map keys of ``[start, end)`` to their last offset; True when the map filled first.

        Stops in the middle of a batch when full: ``latest_offset`` is then the last offset
        actually put, and the round ends just after it.
        """
        offset_map = self.offset_map
        self._checked.clear()
        # The round puts at most one key per offset from start to the log end.
        offset_map.clear(max_keys=log.log_end_offset - start, first_offset=start)
        # Everything below ``start`` is already clean: a round whose dirty range is empty (run
        # to drop tombstones past their horizon) treats it as mapped.
        offset_map.update_latest_offset(start - 1)
        txns = CleanedTransactionMetadata([t for t in aborted if t.last_offset >= start])
        for segment, next_start in dirty_segments(log.segments, start, end):
            self.check_done(log.tp)
            walk = SegmentWalk(log.tp, segment, segment.offset_index.lookup(start).position)
            # Only a walk from the file's start steps on the batch boundaries that the filter
            # pass's walk (from 0) steps on: an index entry is not checked to be one.
            from_start = walk.position == 0
            while True:
                # The C engine takes every leading plain batch of a region in one call.
                region = walk.region() if offset_map.native else None
                mapped = None if region is None else offset_map.map_region(region, start)
                if mapped is not None:
                    if from_start:
                        self._checked.add(segment.log, walk.position, mapped.consumed_bytes)
                    walk.advance(mapped.consumed_bytes)
                    stats.map_bytes_read += mapped.consumed_bytes
                    stats.map_messages_read += mapped.walked
                    self._throttle(mapped.consumed_bytes)
                    if mapped.stop is RegionStop.FULL:
                        stats.map_full = True
                        return True
                    if mapped.last_offset >= 0:
                        txns.on_plain_batches(mapped.last_offset)
                    self.check_done(log.tp)
                    if mapped.stop is RegionStop.END and mapped.consumed_bytes:
                        continue
                # One batch by the per-batch path: what the engine left, or the reference.
                taken = walk.next_batch()
                if taken is None:
                    break
                position, batch = taken
                stats.map_bytes_read += batch.size_bytes
                self._throttle(batch.size_bytes)
                with walk.located(position):
                    if self._map_batch(batch, start, txns, stats):
                        return True
                last_offset = batch.last_offset
                if last_offset >= start:
                    offset_map.update_latest_offset(last_offset)
            offset_map.update_latest_offset(min(next_start, end) - 1)
        return False

    def _map_batch(
        self, batch: RecordBatch, start: int, txns: CleanedTransactionMetadata, stats: CleanerStats
    ) -> bool:
        """One batch of build_offset_map; True when the map filled."""
        offset_map = self.offset_map
        if isinstance(batch, LegacyRecordBatch):
            return map_legacy_keys(batch, offset_map, start, stats)
        if batch.is_control:
            txns.on_control_batch(batch, control_type_of(batch))
            stats.map_messages_read += 1
        elif txns.on_data_batch(batch):
            stats.map_messages_read += batch.records_count
        elif mapped := offset_map.put_batch_keys(*_native_input(batch), start):
            walked, full = mapped
            stats.map_messages_read += walked
            if full:
                stats.map_full = True
                return True
        else:
            capacity = offset_map.capacity
            for offset, key in _record_keys(batch):
                if key is not None and offset >= start:
                    if offset_map.size >= capacity:
                        stats.map_full = True
                        return True
                    offset_map.put_digest(offset_map.digest(key), offset)
                stats.map_messages_read += 1
        return False

    # -- rewriting a group -----------------------------------------------------------------
    def clean_segments(
        self,
        log: Log,
        group: Sequence[LogSegment],
        *,
        now_ms: int,
        stats: CleanerStats,
        txns: CleanedTransactionMetadata,
        producers: Mapping[int, ProducerLastBatch],
        upper_bound: int,
        legacy_delete_horizon_ms: int = 0,
    ) -> LogSegment:
        """Kafka's ``cleanSegments``: rewrite ``group`` into one ``.cleaned`` segment and swap
        it in. On any failure (including an abort) the ``.cleaned`` files are removed and the
        log is untouched."""
        cleaned = self.write_cleaned_segment(
            log.directory,
            log.tp,
            log.config,
            group,
            now_ms=now_ms,
            stats=stats,
            txns=txns,
            producers=producers,
            upper_bound=upper_bound,
            legacy_delete_horizon_ms=legacy_delete_horizon_ms,
        )
        # From here the files belong to the swap protocol: if it fails midway its renames are
        # completed or rolled back by the loader; deleting them here could lose the data.
        if not log.replace_segments([cleaned], group):
            cleaned.delete_files()
        stats.segments_replaced += len(group)
        return cleaned

    def write_cleaned_segment(
        self,
        directory: Path,
        tp: TopicPartition,
        config: LogConfig,
        group: Sequence[SegmentSource],
        *,
        now_ms: int,
        stats: CleanerStats,
        txns: CleanedTransactionMetadata,
        producers: Mapping[int, ProducerLastBatch],
        upper_bound: int,
        legacy_delete_horizon_ms: int = 0,
    ) -> LogSegment:
        """The first half of ``cleanSegments``: the group's retained records written, flushed,
        as ``<base>.log.cleaned`` (+ indexes) in ``directory``. Needs no :class:`Log`: the
        Spark ``compact`` job runs it on executors over read-only inputs, then swaps on the
        driver. On failure the ``.cleaned`` files are removed."""
        base = group[0].base_offset
        for path in _segment_paths(directory, base, files.CLEANED_SUFFIX):
            path.unlink(missing_ok=True)
        cleaned = LogSegment.open(
            directory,
            base,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size_bytes=config.segment_index_bytes,
            now_ms=now_ms,
            suffix=files.CLEANED_SUFFIX,
        )
        # The cleaned log's data goes to the disk while the pass writes it (its fsync below
        # then waits for the last few MiB only); the indexes are small and mapped.
        write_behind = WriteBehind(cleaned.log.path, WRITE_BEHIND_BYTES)
        output = CleanedOutput(cleaned, config.index_interval_bytes, self._throttle, write_behind)
        retained_before = len(txns.retained_aborted)
        try:
            horizon = now_ms + config.delete_retention_ms
            pairs = producer_pairs(
                {
                    pid: last.last_data_offset
                    for pid, last in producers.items()
                    if last.last_data_offset is not None
                }
            )
            for segment in group:
                self.check_done(tp)
                walk = SegmentWalk(tp, segment, 0)
                retain_legacy_deletes = segment.log.mtime_ms() > legacy_delete_horizon_ms
                while True:
                    region = walk.region() if self.offset_map.native else None
                    filtered = (
                        None
                        if region is None
                        else self.offset_map.filter_region(
                            region,
                            now_ms,
                            horizon,
                            upper_bound,
                            pairs,
                            chunk=output.chunk,
                            checked_bytes=self._checked.checked_from(segment.log, walk.position),
                        )
                    )
                    if filtered is not None:
                        walk.advance(filtered.consumed_bytes)
                        _account_region(filtered, stats)
                        output.add_region(filtered)
                        if filtered.last_offset >= 0:
                            txns.on_plain_batches(filtered.last_offset)
                        self._throttle(filtered.consumed_bytes)
                        self.check_done(tp)
                        if filtered.stop is RegionStop.END and filtered.consumed_bytes:
                            continue
                    taken = walk.next_batch()
                    if taken is None:
                        break
                    position, batch = taken
                    stats.bytes_read += batch.size_bytes
                    self._throttle(batch.size_bytes)
                    with walk.located(position):
                        if isinstance(batch, LegacyRecordBatch):
                            kept = filter_legacy_batch(
                                batch, self.offset_map, retain_legacy_deletes, upper_bound, stats
                            )
                            if kept is not None:
                                output.add(*kept)
                        else:
                            self._filter_batch(
                                batch, output, txns, producers, upper_bound, now_ms, horizon,
                                stats,
                            )  # fmt: skip
                output.flush()
            # The aborted transactions whose markers this group keeps (Kafka's cleanedIndex).
            cleaned.txn_index.append_all(txns.retained_aborted[retained_before:])
            cleaned.on_become_inactive_segment()
            if (error := write_behind.close()) is not None:
                raise error
            cleaned.flush()
            mtime = group[-1].log.mtime_ms() / 1000
            os.utime(cleaned.log.path, (mtime, mtime))
            self.check_done(tp)
        except BaseException:
            write_behind.close()  # its error, if any, is this one's or the next fsync's
            cleaned.delete_files()  # still .cleaned: nothing else refers to them
            raise
        stats.bytes_written += output.bytes_written
        return cleaned

    def _filter_batch(  # noqa: PLR0917 - Kafka's filterTo, one decision table
        self,
        batch: RecordBatch,
        output: CleanedOutput,
        txns: CleanedTransactionMetadata,
        producers: Mapping[int, ProducerLastBatch],
        upper_bound: int,
        now_ms: int,
        horizon_ms: int,
        stats: CleanerStats,
    ) -> None:
        stats.messages_read += batch.records_count
        last_offset = batch.last_offset
        # 1. Batch-level decision (Kafka's checkBatchRetention).
        if batch.is_control:
            can_discard = txns.on_control_batch(batch, control_type_of(batch))
            horizon = batch.delete_horizon_ms
            discard_records = can_discard and horizon is not None and horizon <= now_ms
        else:
            can_discard = txns.on_data_batch(batch)
            discard_records = can_discard
        retain_empty = (
            batch.has_producer_id and _is_last_batch_of_producer(batch, producers)
        ) or last_offset + 1 == upper_bound
        if discard_records and not retain_empty:
            return
        # 2. Record-level decisions (Kafka's shouldRetainRecord): natively when the map's fast
        # path takes the batch, else on decoded records (the reference).
        fast = (
            None
            if discard_records or batch.is_control
            else self._filter_records_native(batch, now_ms, horizon_ms)
        )
        kept: list[Record] = []
        if fast is not None:
            kept_count, contains_tombstones = fast.kept, fast.contains_tombstones
            stats.invalid_messages += fast.invalid
        else:
            if not discard_records:
                records = batch.records()
                kept = (
                    records
                    if batch.is_control
                    else [r for r in records if self._retain_record(batch, r, now_ms, stats)]
                )
            kept_count = len(kept)
            contains_tombstones = any(r.value is None for r in kept) and not batch.is_control
        if not kept_count:
            if retain_empty:
                empty = build_empty_batch(batch)
                output.add(empty, last_offset, batch.max_timestamp)
                stats.batches_rebuilt += 1
            return
        marker_for_empty_txn = batch.is_control and can_discard
        set_horizon = not batch.has_delete_horizon and (contains_tombstones or marker_for_empty_txn)
        if contains_tombstones or marker_for_empty_txn:
            due = horizon_ms if set_horizon else batch.delete_horizon_ms
            if due is not None and (
                stats.next_delete_horizon_ms is None or due < stats.next_delete_horizon_ms
            ):
                stats.next_delete_horizon_ms = due
        if kept_count == batch.records_count and not set_horizon:
            output.add(batch.buffer, last_offset, batch.max_timestamp)
            stats.messages_written += kept_count
            stats.batches_copied_verbatim += 1
            return
        if fast is not None:
            assert fast.rebuilt is not None
            rebuilt = (
                fast.rebuilt
                if batch.compression is Compression.NONE
                else rebuild_batch_from_payload(
                    batch,
                    fast.rebuilt,
                    record_count=kept_count,
                    base_timestamp=fast.base_timestamp,
                    max_timestamp=fast.max_timestamp,
                    has_delete_horizon=set_horizon or batch.has_delete_horizon,
                )
            )
            output.add(rebuilt, last_offset, fast.max_timestamp)
            stats.messages_written += kept_count
            stats.batches_rebuilt += 1
            return
        else:
            try:
                rebuilt = rebuild_batch(
                    batch,
                    kept,
                    delete_horizon_ms=horizon_ms if set_horizon else batch.delete_horizon_ms,
                )
            except ValueError as exc:  # offset deltas no batch can carry: a corrupt batch
                raise CorruptRecordError(f"batch at offset {batch.base_offset}: {exc}") from exc
        output.add(rebuilt, last_offset, RecordBatch(rebuilt).max_timestamp)
        stats.messages_written += kept_count
        stats.batches_rebuilt += 1

    def _filter_records_native(
        self, batch: RecordBatch, now_ms: int, horizon_ms: int
    ) -> FilteredRecords | None:
        return self.offset_map.filter_batch_records(*_native_input(batch), now_ms, horizon_ms)

    def _retain_record(
        self, batch: RecordBatch, record: Record, now_ms: int, stats: CleanerStats
    ) -> bool:
        offset_map = self.offset_map
        if record.offset > offset_map.latest_offset:
            return True  # not mapped in this round
        if record.key is None:
            stats.invalid_messages += 1
            return False
        if record.offset < offset_map.get_digest(offset_map.digest(record.key)):
            return False  # a later record has this key
        if record.value is not None:
            return True
        horizon = batch.delete_horizon_ms
        return horizon is None or now_ms < horizon

    def _throttle(self, size: int) -> None:
        if size:
            self.throttler.maybe_throttle(size)


def _account_region(filtered: FilteredRegion, stats: CleanerStats) -> None:
    stats.bytes_read += filtered.consumed_bytes
    stats.messages_read += filtered.messages_read
    stats.messages_written += filtered.messages_written
    stats.invalid_messages += filtered.invalid
    stats.batches_copied_verbatim += filtered.batches_copied_verbatim
    stats.batches_rebuilt += filtered.batches_rebuilt
    due = filtered.next_delete_horizon_ms
    if due is not None and (
        stats.next_delete_horizon_ms is None or due < stats.next_delete_horizon_ms
    ):
        stats.next_delete_horizon_ms = due


def dirty_segments(
    segments: Sequence[_Segment], start: int, end: int
) -> list[tuple[_Segment, int]]:
    """The segments holding offsets of ``[start, end)``, each with where the next one starts
    (``end`` for the last): what a round maps."""
    return [
        (segment, segments[i + 1].base_offset if i + 1 < len(segments) else end)
        for i, segment in enumerate(segments)
        if segment.base_offset < end
        and (i + 1 == len(segments) or segments[i + 1].base_offset > start)
    ]


def _segment_paths(directory: Path, base: int, suffix: str) -> list[Path]:
    return [
        files.log_file(directory, base, suffix),
        files.index_file(directory, base, suffix),
        files.time_index_file(directory, base, suffix),
        files.txn_index_file(directory, base, suffix),
    ]


def _native_input(batch: RecordBatch) -> tuple[Buffer, bytes | None]:
    """What the native record work takes: the batch, and its records decompressed when it is
    compressed (None otherwise: the records are read in place)."""
    return batch.buffer, None if batch.compression is Compression.NONE else batch.payload()


def _record_keys(batch: RecordBatch) -> Iterator[tuple[int, bytes | None]]:
    for record in batch.records():
        yield record.offset, record.key


def _is_last_batch_of_producer(
    batch: RecordBatch, producers: Mapping[int, ProducerLastBatch]
) -> bool:
    last = producers.get(batch.producer_id)
    if last is None:
        return False
    if last.last_data_offset is not None:
        return batch.last_offset == last.last_data_offset
    return batch.is_control and batch.producer_epoch == last.producer_epoch
