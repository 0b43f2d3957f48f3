"""Kafka LogCleanerTest scenarios (kafka-log-layer.md §8.4-8.8, §10 items 1-41), each its own
test, over real log directories: the core rule (the latest record per key), stats, the
uncleanable section and offset gaps, unkeyed records, an aborted round, a swap abandoned under
concurrent deletion and trimmed indexes. The offset map, tombstones, batch rewrites, corrupt
input, transactions and settings are in the test_cleaner_*.py files named for them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from storagecore import LogConfig, ManualClock, files
from storagecore.cleaner import Cleaner
from storagecore.cleaner.manager import CleaningAbortedError
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from storagecore.tools.verify import verify_log_dir
from tests.conftest import START_MS
from tests.unit.storagecore.helpers.cleaning import (
    COMPACT,
    contents,
    keys_of,
    latest_per_key,
    open_log,
    put_many,
    run_round,
)


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
