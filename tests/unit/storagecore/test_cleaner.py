"""Kafka LogCleanerTest scenarios (kafka-log-layer.md §8.4-8.8, §10 items 1-41), each its own
test, over real log directories."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from storagecore import (
    AppendOrigin,
    Compression,
    ControlType,
    CorruptRecordError,
    Log,
    LogConfig,
    ManualClock,
    NewRecord,
    build_batch,
    build_control_batch,
    files,
)
from storagecore.cleaner import (
    CleanedTransactionMetadata,
    Cleaner,
    CleanerStats,
    CleanRequest,
    Throttler,
)
from storagecore.cleaner.log_to_clean import cleanable_offsets, log_to_clean
from storagecore.cleaner.manager import CleaningAbortedError
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from storagecore.config import CleanerConfig
from storagecore.records import layout
from storagecore.records.batch import RecordBatch
from storagecore.tools.verify import verify_log_dir
from tests.conftest import START_MS

COMPACT = LogConfig(
    cleanup_policy=("compact",),
    segment_bytes=1024,
    index_interval_bytes=128,
    file_delete_delay_ms=0,
    delete_retention_ms=1000,
)
PID = 4000
EPOCH = 3


def open_log(tmp_path: Path, clock: ManualClock, config: LogConfig = COMPACT) -> Log:
    return Log.open(tmp_path / "t-0", config, clock)


def put(
    log: Log,
    key: bytes | None,
    value: bytes | None,
    *,
    ts: int | None = None,
    codec: Compression = Compression.NONE,
) -> int:
    return log.append(
        build_batch(
            [NewRecord(key=key, value=value, timestamp=START_MS if ts is None else ts)],
            compression=codec,
        )
    ).first_offset


def put_many(log: Log, pairs: Sequence[tuple[bytes | None, bytes | None]], **kw: object) -> None:
    for key, value in pairs:
        put(log, key, value, **kw)  # type: ignore[arg-type]


def txn_append(log: Log, keys: Sequence[bytes], *, pid: int = PID, seq: int = 0) -> int:
    return log.append(
        build_batch(
            [NewRecord(key=k, value=b"v-" + k, timestamp=START_MS) for k in keys],
            producer_id=pid,
            producer_epoch=EPOCH,
            base_sequence=seq,
            is_transactional=True,
        )
    ).first_offset


def idempotent_append(log: Log, keys: Sequence[bytes], *, pid: int, seq: int) -> int:
    return log.append(
        build_batch(
            [NewRecord(key=k, value=b"v-" + k, timestamp=START_MS) for k in keys],
            producer_id=pid,
            producer_epoch=EPOCH,
            base_sequence=seq,
        )
    ).first_offset


def marker(log: Log, control: ControlType, *, pid: int = PID) -> int:
    return log.append(
        build_control_batch(
            control, producer_id=pid, producer_epoch=EPOCH, coordinator_epoch=0, timestamp=START_MS
        ),
        origin=AppendOrigin.COORDINATOR,
    ).first_offset


def run_round(
    log: Log,
    cleaner: Cleaner | None = None,
    *,
    first_dirty: int | None = None,
    now: int | None = None,
) -> CleanerStats:
    """One round from ``first_dirty`` (default: the log start) up to the first uncleanable
    offset, as the LogCleaner would run it."""
    cleaner = cleaner or Cleaner(offset_map=SkimpyOffsetMap(24 * 1024))
    now = log.clock.milliseconds() if now is None else now
    offsets = cleanable_offsets(log, first_dirty, now)
    to_clean = log_to_clean(log, offsets, now)
    return cleaner.clean(
        CleanRequest(log, to_clean.first_dirty_offset, to_clean.first_uncleanable_offset), now
    )


def contents(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in log.records(log.log_start_offset)]


def keys_of(log: Log) -> list[bytes | None]:
    return [key for _, key, _ in contents(log)]


def batches(log: Log) -> list[RecordBatch]:
    return [b for s in log.segments for _, b in s.log.batches()]


def latest_per_key(
    pairs: Sequence[tuple[bytes | None, bytes | None]], upto: int
) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for offset, (key, _) in enumerate(pairs[:upto]):
        if key is not None:
            latest[key] = offset
    return latest


# -- 1, 20: the core rule -------------------------------------------------------------------------
def test_clean_segments_keeps_the_latest_record_per_key(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    pairs = [(b"k%d" % (i % 7), b"v%d" % i) for i in range(120)]
    put_many(log, pairs)
    end = log.active_segment.base_offset
    stats = run_round(log)
    assert stats.end_offset == end
    latest = latest_per_key(pairs, end)
    survivors = [(o, k) for o, k, _ in contents(log) if o < end]
    assert survivors == sorted((o, k) for k, o in latest.items())
    # the active segment is untouched
    assert [o for o, _, _ in contents(log) if o >= end] == list(range(end, 120))
    log.close()
    assert verify_log_dir(log.directory).ok


def test_cleaning_with_deletes_removes_earlier_values(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"k%d" % (i % 10), b"v%d" % i) for i in range(60)])
    put_many(log, [(b"k%d" % i, None) for i in range(0, 10, 2)])
    put_many(log, [(b"pad%d" % i, b"x" * 50) for i in range(40)])
    run_round(log)
    live = {k: v for _, k, v in contents(log) if k is not None and not k.startswith(b"pad")}
    for i in range(10):
        if i % 2 == 0:
            assert live[b"k%d" % i] is None, "only the tombstone remains of a deleted key"
        else:
            assert live[b"k%d" % i] == b"v%d" % (50 + i)
    assert keys_of(log).count(b"k0") == 1


# -- 21: stats ------------------------------------------------------------------------------------
def test_log_cleaner_stats_counts(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"b", b"4"), (b"c", b"5")])
    log.roll()
    size = sum(s.size_bytes for s in log.segments[:-1])
    stats = run_round(log)
    assert (stats.messages_read, stats.messages_written) == (5, 3)
    assert stats.bytes_read == size
    assert stats.bytes_written == log.segments[0].size_bytes < size
    assert stats.map_messages_read == 5 and stats.keys_in_map == 3
    assert stats.batches_copied_verbatim == 3
    line = stats.stats_line(0)
    assert "cleaned log t-0 (dirty section = [0, 5])" in line
    assert "Start size: 0.0 MB (5 messages)" in line and "End size: 0.0 MB (3 messages)" in line
    assert stats.as_dict()["messages_read"] == 5


# -- 26, 40: the uncleanable section and offset gaps ----------------------------------------------
def test_cleaning_stops_at_the_first_uncleanable_offset(tmp_path: Path, clock: ManualClock) -> None:
    config = LogConfig(
        cleanup_policy=("compact",), segment_bytes=1024, min_compaction_lag_ms=60_000
    )
    log = open_log(tmp_path, clock, config)
    put_many(log, [(b"k%d" % (i % 3), b"old") for i in range(30)], ts=START_MS - 120_000)
    young_start = log.log_end_offset
    log.roll()
    put_many(log, [(b"k%d" % (i % 3), b"new") for i in range(30)], ts=START_MS)
    log.roll()
    before = [r for r in log.records(young_start)]
    stats = run_round(log)
    assert stats.end_offset == young_start
    assert [r for r in log.records(young_start)] == before, "young segments are untouched"
    assert sum(1 for o, _, _ in contents(log) if o < young_start) == 3


def test_cleaning_beyond_missing_offsets(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"k%d" % (i % 4), b"v") for i in range(10)])
    log.roll(1000)  # offsets 10..999 never exist
    put_many(log, [(b"k%d" % (i % 4), b"w") for i in range(10)])
    log.roll()
    stats = run_round(log)
    assert stats.end_offset == log.active_segment.base_offset == 1010
    assert [o for o, _, _ in contents(log)] == [1006, 1007, 1008, 1009]


# -- 28: unkeyed records --------------------------------------------------------------------------
def test_unkeyed_records_are_removed_and_counted(tmp_path: Path, clock: ManualClock) -> None:
    # a topic switched from delete to compact can hold unkeyed records
    delete_log = open_log(tmp_path, clock, LogConfig(segment_bytes=1024))
    put_many(delete_log, [(None, b"x%d" % i) for i in range(5)] + [(b"k", b"v")] * 3)
    delete_log.roll()
    delete_log.update_config(COMPACT)
    stats = run_round(delete_log)
    assert stats.invalid_messages == 5
    assert contents(delete_log) == [(7, b"k", b"v")]


# -- 25, 34, 35: the offset map, partial rounds ---------------------------------------------------
def test_build_offset_map(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"k%d" % (i % 5), b"v") for i in range(40)])
    log.roll()
    cleaner = Cleaner(offset_map=SkimpyOffsetMap(24 * 100))
    stats = CleanerStats()
    full = cleaner.build_offset_map(log, 10, 40, [], stats)
    assert not full
    assert cleaner.offset_map.latest_offset == 39
    assert {cleaner.offset_map.get(b"k%d" % i) for i in range(5)} == set(range(35, 40))
    assert stats.map_messages_read == 30


def test_build_offset_map_probes_only_what_the_round_can_fill(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The map of a round is sized by the offsets it can walk (log end - start), not by the
    whole budget, and still maps every key without filling."""
    log = open_log(tmp_path, clock, LogConfig(cleanup_policy=("compact",)))
    put_many(log, [(b"k%d" % i, b"v") for i in range(2000)])
    log.roll()
    offset_map = SkimpyOffsetMap(24 * 100_000)
    cleaner = Cleaner(offset_map=offset_map)
    stats = CleanerStats()
    assert not cleaner.build_offset_map(log, 0, 2000, [], stats)
    assert offset_map.capacity > 2000 and offset_map.slots < offset_map.budget_slots
    assert offset_map.size == 2000 and offset_map.latest_offset == 1999
    assert all(offset_map.get(b"k%d" % i) == i for i in range(2000))
    log.close()


def test_build_partial_offset_map_stops_at_the_load_factor(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"k%d" % i, b"v") for i in range(50)])
    log.roll()
    offset_map = SkimpyOffsetMap(24 * 10, load_factor=0.5)  # 10 slots, 5 keys
    cleaner = Cleaner(offset_map=offset_map)
    assert cleaner.build_offset_map(log, 0, 50, [], CleanerStats())
    assert offset_map.size == 5 and offset_map.latest_offset == 4
    assert offset_map.get(b"k5") == -1


def test_partial_segment_clean_always_makes_progress(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, LogConfig(cleanup_policy=("compact",), segment_bytes=100_000))
    pairs = [(b"k%d" % (i % 3), b"v%d" % i) for i in range(12)]
    put_many(log, pairs)
    log.roll()
    cleaner = Cleaner(offset_map=SkimpyOffsetMap(24 * 2, load_factor=0.5))  # one key per round
    first_dirty = 0
    rounds = 0
    while first_dirty < 12:
        stats = run_round(log, cleaner, first_dirty=first_dirty)
        assert stats.end_offset > first_dirty, "every round makes progress"
        first_dirty = stats.end_offset
        rounds += 1
    assert rounds >= 3
    assert sorted(o for o, _, _ in contents(log)) == [9, 10, 11]


# -- 29: abort ------------------------------------------------------------------------------------
def test_abort_removes_the_cleaned_files_and_leaves_the_log(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"k%d" % (i % 3), b"v") for i in range(60)])
    before = contents(log)
    calls = 0

    def check_done(_tp: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:  # after the map, inside the first group
            raise CleaningAbortedError("aborted by the test")

    cleaner = Cleaner(offset_map=SkimpyOffsetMap(24 * 100), check_done=check_done)
    with pytest.raises(CleaningAbortedError):
        run_round(log, cleaner)
    assert contents(log) == before
    assert not [p for p in log.directory.iterdir() if p.name.endswith(files.CLEANED_SUFFIX)]


# -- 30: the last batch of the round --------------------------------------------------------------
def test_last_batch_of_the_round_survives_as_an_empty_batch(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"a", b"1"), (b"b", b"2")])
    put_many(log, [(b"a", None), (b"b", None)])
    log.roll()
    run_round(log)  # stamps the horizon on the tombstones
    clock.advance(COMPACT.delete_retention_ms + 1)
    run_round(log, first_dirty=4)
    assert contents(log) == []
    remaining = batches(log)
    assert len(remaining) == 1 and remaining[0].records_count == 0
    assert remaining[0].last_offset == 3 and log.log_end_offset == 4
    assert remaining[0].size_bytes == layout.RECORD_BATCH_OVERHEAD
    assert not remaining[0].has_delete_horizon and remaining[0].base_timestamp == -1


# -- 39 and KIP-534: tombstone lifetime -----------------------------------------------------------
def test_tombstone_horizon_starts_at_the_first_clean(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put(log, b"k", b"v", ts=0)
    put(log, b"k", None, ts=0)  # an ancient tombstone
    put(log, b"other", b"x")
    log.roll()
    first = run_round(log)
    assert contents(log) == [(1, b"k", None), (2, b"other", b"x")], "kept after the first clean"
    stamped = next(b for b in batches(log) if b.base_offset == 1)
    assert stamped.has_delete_horizon
    assert stamped.delete_horizon_ms == clock.milliseconds() + COMPACT.delete_retention_ms
    assert first.next_delete_horizon_ms == stamped.delete_horizon_ms
    # the record still reads with its original timestamp (deltas re-based on the horizon)
    assert next(iter(stamped)).timestamp == 0
    clock.advance(COMPACT.delete_retention_ms - 1)
    run_round(log, first_dirty=3)
    assert (1, b"k", None) in contents(log), "still inside the horizon"
    clock.advance(1)
    second = run_round(log, first_dirty=3)
    assert contents(log) == [(2, b"other", b"x")]
    assert second.next_delete_horizon_ms is None


def test_tombstone_horizon_is_readable_by_kafka_python(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put(log, b"k", b"v", ts=START_MS - 50)
    put(log, b"k", None, ts=START_MS - 40)
    put(log, b"j", b"w", ts=START_MS - 30)
    log.roll()
    run_round(log)
    stamped = next(b for b in batches(log) if b.has_delete_horizon)
    theirs = DefaultRecordBatch(bytes(stamped.buffer))
    assert theirs.validate_crc()
    (record,) = list(theirs)
    assert (record.offset, record.key, record.value, record.timestamp) == (
        1,
        b"k",
        None,
        START_MS - 40,
    )


# -- verbatim copies and recompression ------------------------------------------------------------
@pytest.mark.parametrize("codec", list(Compression))
def test_batches_with_nothing_removed_are_copied_byte_for_byte(
    tmp_path: Path, clock: ManualClock, codec: Compression
) -> None:
    log = open_log(tmp_path, clock, LogConfig(cleanup_policy=("compact",), segment_bytes=4096))
    keep = build_batch(
        [NewRecord(key=b"u%d" % i, value=b"x" * 20, timestamp=START_MS + i) for i in range(5)],
        compression=codec,
    )
    log.append(keep)
    mixed = build_batch(
        [NewRecord(key=k, value=b"y" * 20, timestamp=START_MS) for k in (b"a", b"b", b"c")],
        compression=codec,
    )
    log.append(mixed)
    put(log, b"b", b"newer")
    log.roll()
    originals = batches(log)
    run_round(log)
    cleaned = batches(log)
    assert bytes(cleaned[0].buffer) == bytes(originals[0].buffer), "unchanged batch, same bytes"
    rebuilt = cleaned[1]
    assert rebuilt.compression is codec, "recompressed with the same codec"
    assert (rebuilt.base_offset, rebuilt.last_offset) == (5, 7), "base and last offset kept"
    assert [(r.offset, r.key) for r in rebuilt] == [(5, b"a"), (7, b"c")]
    theirs = DefaultRecordBatch(bytes(rebuilt.buffer))
    assert theirs.validate_crc() and [r.offset for r in theirs] == [5, 7]


def test_log_append_time_batches_keep_their_time(tmp_path: Path, clock: ManualClock) -> None:
    config = LogConfig(
        cleanup_policy=("compact",), segment_bytes=4096, message_timestamp_type="LogAppendTime"
    )
    log = open_log(tmp_path, clock, config)
    put_many(log, [(b"a", b"1"), (b"b", b"2")])
    clock.advance(10)
    log.append(build_batch([NewRecord(key=b"a", value=b"3"), NewRecord(key=b"c", value=b"4")]))
    clock.advance(10)
    put(log, b"c", b"5")
    log.roll()
    run_round(log)
    rebuilt = next(b for b in batches(log) if b.base_offset == 2)
    assert rebuilt.max_timestamp == START_MS + 10
    assert [r.timestamp for r in rebuilt] == [START_MS + 10]


# -- 16, 17: large batches ------------------------------------------------------------------------
def test_batch_larger_than_the_io_buffer_and_max_message_bytes(
    tmp_path: Path, clock: ManualClock
) -> None:
    config = LogConfig(
        cleanup_policy=("compact",), segment_bytes=8 << 20, max_message_bytes=4 << 20
    )
    log = open_log(tmp_path, clock, config)
    big = os.urandom(3 << 20)
    put(log, b"big", big)
    put(log, b"big2", b"small")
    put(log, b"big2", b"smaller")
    log.roll()
    log.update_config(LogConfig(cleanup_policy=("compact",), max_message_bytes=1000))
    run_round(log)
    assert contents(log) == [(0, b"big", big), (2, b"big2", b"smaller")]


# -- 18, 19: corrupt input ------------------------------------------------------------------------
def test_corrupt_magic_raises_and_changes_nothing(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"k%d" % (i % 3), b"v") for i in range(30)])
    log.roll()
    first = log.segments[0]
    with open(first.log.path, "r+b") as handle:
        handle.seek(layout.MAGIC_OFFSET)
        handle.write(b"\x07")
    before = sorted(p.name for p in log.directory.iterdir())
    with pytest.raises(CorruptRecordError, match=r"t-0: .*00000000000000000000\.log at position 0"):
        run_round(log)
    assert sorted(p.name for p in log.directory.iterdir()) == before


def test_declared_size_past_the_end_of_a_sealed_segment(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"k%d" % (i % 3), b"v") for i in range(30)])
    log.roll()
    first = log.segments[0]
    size = first.size_bytes
    os.truncate(first.log.path, size - 5)
    first.log.size_bytes = size - 5  # as the file handle would see it after the damage
    with pytest.raises(CorruptRecordError, match="do not form a complete batch"):
        run_round(log)


# -- 2: concurrent deletion -----------------------------------------------------------------------
def test_swap_is_abandoned_when_retention_removed_a_source_segment(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock, COMPACT)
    put_many(log, [(b"k%d" % (i % 3), b"v" * 30) for i in range(60)])
    log.roll()
    originals = log.segments[:-1]
    cleaner = Cleaner(offset_map=SkimpyOffsetMap(2400))
    real = log.replace_segments

    def racing_replace(new: Sequence[object], old: Sequence[object]) -> bool:
        log.delete_segments([originals[0]], "retention racing the cleaner")
        return real(new, old)  # type: ignore[arg-type]

    log.replace_segments = racing_replace  # type: ignore[method-assign]
    run_round(log, cleaner)
    names = [p.name for p in log.directory.iterdir()]
    assert not [n for n in names if n.endswith((files.CLEANED_SUFFIX, files.SWAP_SUFFIX))]
    assert originals[0] not in log.segments
    log.close()
    assert verify_log_dir(log.directory).ok


# -- 3: trimmed indexes ---------------------------------------------------------------------------
def test_cleaned_segment_indexes_are_trimmed(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"k%d" % (i % 40), b"v" * 30) for i in range(80)])
    log.roll()
    run_round(log)
    for segment in log.segments[:-1]:
        assert segment.offset_index.path.stat().st_size == segment.offset_index.size_bytes
        assert segment.log.path.stat().st_size == segment.size_bytes < COMPACT.segment_bytes


# -- 22-24, 5-15: producers and transactions ------------------------------------------------------
def test_each_producers_last_batch_is_kept(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    idempotent_append(log, [b"a", b"b"], pid=1, seq=0)
    idempotent_append(log, [b"c"], pid=2, seq=0)
    idempotent_append(log, [b"a", b"b"], pid=1, seq=2)  # pid 1's last batch
    idempotent_append(log, [b"c"], pid=3, seq=0)  # supersedes pid 2's only batch
    put(log, b"pad", b"x")
    log.roll()
    run_round(log)
    by_pid = {b.producer_id: b for b in batches(log) if b.has_producer_id}
    assert by_pid[2].records_count == 0, "pid 2's last batch survives empty"
    assert (by_pid[2].base_sequence, by_pid[2].last_offset) == (0, 2)
    assert by_pid[1].base_offset == 3 and by_pid[1].last_sequence == 3
    assert keys_of(log) == [b"a", b"b", b"c", b"pad"]


def test_expired_producers_lose_their_last_batch(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    idempotent_append(log, [b"a"], pid=7, seq=0)
    put(log, b"a", b"newer")
    log.roll()
    cleaner = Cleaner(
        offset_map=SkimpyOffsetMap(2400), config=CleanerConfig(producer_id_expiration_ms=1000)
    )
    clock.advance(1001)
    run_round(log, cleaner)
    assert not [b for b in batches(log) if b.has_producer_id]


def test_aborted_transactions_are_removed_and_committed_ones_deduplicated(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock)
    txn_append(log, [b"a", b"b"], pid=1)
    txn_append(log, [b"c"], pid=2)
    marker(log, ControlType.COMMIT, pid=1)
    marker(log, ControlType.ABORT, pid=2)
    put(log, b"a", b"later")
    put(log, b"pad", b"x")
    log.roll()
    state = log.transaction_state()
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in state.aborted] == [(2, 2, 4)]
    run_round(log)
    keys = keys_of(log)
    assert b"c" not in keys, "aborted data goes at once"
    assert keys.count(b"a") == 1 and b"b" in keys
    remaining = batches(log)
    # pid 2's aborted batch is its last data batch: kept empty, with its abort marker
    assert any(b.producer_id == 2 and not b.is_control and b.records_count == 0 for b in remaining)
    assert any(b.producer_id == 2 and b.is_control for b in remaining)


def test_commit_marker_removed_after_its_data_and_horizon(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock)
    txn_append(log, [b"a"], pid=1)
    commit = marker(log, ControlType.COMMIT, pid=1)
    idempotent_append(log, [b"z"], pid=1, seq=1)  # pid 1 writes again: its marker is not last
    put(log, b"a", b"newer")
    put(log, b"pad", b"x")
    log.roll()
    run_round(log)  # data of the transaction goes (superseded); marker kept
    assert any(b.is_control and b.base_offset == commit for b in batches(log))
    run_round(log, first_dirty=log.active_segment.base_offset)  # marker: nothing left, stamped
    stamped = next(b for b in batches(log) if b.is_control)
    assert stamped.has_delete_horizon
    clock.advance(COMPACT.delete_retention_ms)
    run_round(log, first_dirty=log.active_segment.base_offset)
    assert not [b for b in batches(log) if b.is_control], "removed after the horizon"


def test_abort_marker_kept_while_its_empty_batch_exists(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    txn_append(log, [b"a"], pid=1)
    marker(log, ControlType.ABORT, pid=1)
    put(log, b"pad", b"x")
    log.roll()
    for _ in range(3):
        run_round(log, first_dirty=log.active_segment.base_offset)
        clock.advance(COMPACT.delete_retention_ms)
    kinds = [(b.producer_id, b.is_control, b.records_count) for b in batches(log)]
    assert (1, False, 0) in kinds, "the producer's last data batch, emptied"
    assert (1, True, 1) in kinds, "its abort marker stays while that batch exists"
    # the producer moves on: its old batch is no longer its last, both may go
    idempotent_append(log, [b"q"], pid=1, seq=1)
    log.roll()
    for _ in range(3):
        run_round(log, first_dirty=log.active_segment.base_offset)
        clock.advance(COMPACT.delete_retention_ms)
    assert [b.base_offset for b in batches(log) if b.producer_id == 1] == [3]


def test_undecided_transaction_is_not_cleanable(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"k", b"1"), (b"k", b"2")])
    open_at = txn_append(log, [b"k"], pid=9)
    put_many(log, [(b"k", b"3"), (b"k", b"4")])
    log.roll()
    assert log.last_stable_offset == open_at
    offsets = cleanable_offsets(log, None, clock.milliseconds())
    assert offsets.first_uncleanable_offset == open_at
    marker(log, ControlType.COMMIT, pid=9)
    assert log.last_stable_offset == log.log_end_offset


def test_marker_keys_do_not_collide_with_data_keys(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    txn_append(log, [b"a"], pid=1)
    marker(log, ControlType.COMMIT, pid=1)
    # a data record whose key equals the marker's control-record key bytes
    put(log, layout.CONTROL_RECORD_KEY.pack(0, int(ControlType.COMMIT)), b"data")
    put(log, b"pad", b"x")
    log.roll()
    run_round(log)
    assert any(b.is_control for b in batches(log)), "the marker is not deduplicated by key"


def test_cleaned_transaction_metadata_decisions() -> None:
    from storagecore.transactions import AbortedTxn

    def data(offset: int, pid: int, transactional: bool = True) -> RecordBatch:
        return RecordBatch(
            build_batch(
                [NewRecord(key=b"k", value=b"v")],
                base_offset=offset,
                producer_id=pid,
                producer_epoch=0,
                base_sequence=0,
                is_transactional=transactional,
            )
        )

    def ctrl(offset: int, pid: int, kind: ControlType) -> RecordBatch:
        return RecordBatch(
            build_control_batch(
                kind,
                producer_id=pid,
                producer_epoch=0,
                coordinator_epoch=0,
                timestamp=0,
                base_offset=offset,
            )
        )

    meta = CleanedTransactionMetadata([AbortedTxn(0, 2, 1, 3)])
    assert meta.on_data_batch(data(0, 1)) is True  # aborted
    assert meta.on_data_batch(data(1, 2)) is False  # pid 2 committed later
    assert meta.on_control_batch(ctrl(2, 1, ControlType.ABORT), ControlType.ABORT) is False
    assert meta.retained_aborted == [AbortedTxn(0, 2, 1, 3)]
    assert meta.on_control_batch(ctrl(3, 2, ControlType.COMMIT), ControlType.COMMIT) is False
    assert meta.on_control_batch(ctrl(4, 2, ControlType.COMMIT), ControlType.COMMIT) is True
    assert meta.on_control_batch(ctrl(5, 3, ControlType.ABORT), None) is True


# -- throttling -----------------------------------------------------------------------------------
def test_throttler_sleeps_off_the_excess() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    throttler = Throttler(1000.0, sleep=sleep, monotonic=lambda: now[0])
    now[0] = 0.5
    assert throttler.maybe_throttle(1500) == pytest.approx(1.0)
    assert slept == [pytest.approx(1.0)] and throttler.total_wait_s == pytest.approx(1.0)
    now[0] += 0.5
    assert throttler.maybe_throttle(400) == 0.0, "under the rate: no wait"
    unthrottled = Throttler(float("inf"), sleep=sleep)
    assert unthrottled.maybe_throttle(10**12) == 0.0


def test_cleaner_config_validation_names_the_key() -> None:
    assert CleanerConfig.from_properties({"log.cleaner.threads": "2"}).threads == 2
    with pytest.raises(ValueError, match="log.cleaner.threads"):
        CleanerConfig.from_properties({"log.cleaner.threads": "0"})
    with pytest.raises(ValueError, match="log.cleaner.bogus"):
        CleanerConfig.from_properties({"log.cleaner.bogus": "1"})
    with pytest.raises(ValueError, match="log.cleaner.backoff.ms"):
        CleanerConfig.from_properties({"log.cleaner.backoff.ms": "soon"})
    config = CleanerConfig(threads=4, dedupe_buffer_size=1 << 20)
    assert config.map_memory_per_thread == 1 << 18
