"""The cleaner's rules for legacy (magic v0/v1) entries: Kafka's ``cleanInto`` on old data.

Called by :class:`storagecore.cleaner.cleaner.Cleaner` for every v0/v1 entry of a group (the
native region passes hand them over: they take magic 2 only). What differs from v2:

* a tombstone (null value) that is the latest for its key is kept while its *segment* is newer
  than the legacy delete horizon (``lastModified`` of the last clean segment minus
  ``delete.retention.ms``), not by a per-batch horizon (legacy entries have none);
* keyless messages are dropped and counted invalid, as in v2;
* an entry whose messages are all kept is copied verbatim; a wrapper whose inner messages are
  partly kept is rewritten in the same magic, codec (default level) and timestamp type, its
  offset the last kept message's, inner offsets absolute (v0) or relative to the first kept
  one (v1), a LogAppendTime wrapper keeping its time (Kafka's ``buildRetainedRecordsInto``);
* an entry with nothing kept is dropped, except the round's last (``nextOffset`` equal to the
  round's upper bound), which Kafka keeps as an *empty* v2 header and cannot for v0/v1: its
  ``filterTo`` throws IllegalStateException there and the partition becomes uncleanable. Here
  the entry is kept as it was, so the log keeps its last offset and nothing is lost.

It must not decide anything for v2 batches and must not write files (the caller's output does).
"""

from __future__ import annotations

from collections.abc import Sequence

from storagecore.cleaner.offset_map import SkimpyOffsetMap
from storagecore.cleaner.regions import SegmentSource
from storagecore.cleaner.stats import CleanerStats
from storagecore.records.batch import Record, TimestampType
from storagecore.records.codecs import Compression
from storagecore.records.layout import NO_TIMESTAMP
from storagecore.records.legacy import LegacyRecordBatch, LegacyRecordToWrite, build_legacy_entry


def legacy_delete_horizon_ms(
    segments: Sequence[SegmentSource], first_dirty_offset: int, delete_retention_ms: int
) -> int:
    """Kafka's ``legacyDeleteHorizonMs``: the mtime of the last segment below the first dirty
    offset minus ``delete.retention.ms``; 0 when nothing is clean yet."""
    clean = [s for s in segments if s.base_offset < first_dirty_offset]
    return clean[-1].log.mtime_ms() - delete_retention_ms if clean else 0


def map_legacy_keys(
    batch: LegacyRecordBatch, offset_map: SkimpyOffsetMap, start: int, stats: CleanerStats
) -> bool:
    """Put the keys of ``batch``'s messages at or after ``start``; True when the map filled.
    Natively when the map runs the C engine (one call per entry), else the reference below."""
    if offset_map.native and (mapped := offset_map.put_legacy_keys(*_message_set(batch), start)):
        walked, full = mapped
        stats.map_messages_read += walked
        stats.map_full = stats.map_full or full
        return full
    capacity = offset_map.capacity
    for record in batch.records():
        if record.key is not None and record.offset >= start:
            if offset_map.size >= capacity:
                stats.map_full = True
                return True
            offset_map.put_digest(offset_map.digest(record.key), record.offset)
        stats.map_messages_read += 1
    return False


def retain_legacy_record(
    record: Record, offset_map: SkimpyOffsetMap, retain_deletes: bool, stats: CleanerStats
) -> bool:
    """Kafka's ``shouldRetainRecord`` for a v0/v1 message."""
    if record.offset > offset_map.latest_offset:
        return True  # not mapped in this round
    if record.key is None:
        stats.invalid_messages += 1
        return False
    if record.offset < offset_map.get_digest(offset_map.digest(record.key)):
        return False  # a later record has this key
    return record.value is not None or retain_deletes


def filter_legacy_batch(
    batch: LegacyRecordBatch,
    offset_map: SkimpyOffsetMap,
    retain_deletes: bool,
    upper_bound: int,
    stats: CleanerStats,
) -> tuple[bytes | memoryview, int, int] | None:
    """(bytes to write, their last offset, their max timestamp), or None to drop the entry.
    With the C engine the decisions come from one native call and the messages are decoded in
    Python only when a wrapper is partly kept (its rewrite needs them)."""
    decided = (
        offset_map.filter_legacy_records(*_message_set(batch), retain_deletes)
        if offset_map.native
        else None
    )
    records: list[Record] | None = None
    if decided is not None:
        flags, invalid = decided
        stats.invalid_messages += invalid
        count, kept_count = len(flags), flags.count(1)
    else:
        records = batch.records()
        flags = bytes(retain_legacy_record(r, offset_map, retain_deletes, stats) for r in records)
        count, kept_count = len(records), flags.count(1)
    stats.messages_read += count
    if kept_count == count or (not kept_count and batch.next_offset == upper_bound):
        stats.messages_written += count
        stats.batches_copied_verbatim += 1
        return bytes(batch.buffer), batch.last_offset, batch.max_timestamp
    if not kept_count:
        return None
    records = batch.records() if records is None else records
    kept = [r for r, keep in zip(records, flags, strict=True) if keep]
    log_append = batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    rebuilt = build_legacy_entry(
        batch.magic,
        batch.compression,
        batch.timestamp_type,
        [LegacyRecordToWrite(r.offset, r.timestamp, r.key, r.value) for r in kept],
        log_append_time=batch.max_timestamp if log_append else NO_TIMESTAMP,
    )
    stats.messages_written += len(kept)
    stats.batches_rebuilt += 1
    max_timestamp = batch.max_timestamp if log_append else max(r.timestamp for r in kept)
    return rebuilt, kept[-1].offset, max_timestamp


def _message_set(batch: LegacyRecordBatch) -> tuple[bytes | memoryview, int, int]:
    """What the native passes take: the entry itself as a plain set, or a wrapper's inner
    messages (decompressed here, the one crossing into Python per wrapper)."""
    if batch.compression is Compression.NONE:
        return memoryview(batch.buffer), -1, 0
    return batch.payload(), batch.magic, batch.last_offset
