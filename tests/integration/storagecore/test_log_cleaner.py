"""The cleaner threads over a LogManager: real threads, real files.

A cleaner never dies silently: a corrupt partition becomes uncleanable with a visible reason and
the others are still cleaned; a pause aborts a running clean safely; shutdown leaves no
half-written files; retention of compacted logs runs between cleans.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from storagecore import LogConfig, LogManager, ManualClock, NewRecord, TopicPartition, build_batch
from storagecore.checkpoints import OffsetCheckpointFile
from storagecore.cleaner.log_cleaner import LogCleaner
from storagecore.cleaner.manager import CleaningState
from storagecore.config import CleanerConfig
from storagecore.records import layout
from tests.conftest import START_MS

pytestmark = pytest.mark.integration

COMPACT = LogConfig(
    cleanup_policy=("compact",),
    segment_bytes=2048,
    min_cleanable_dirty_ratio=0.1,
    file_delete_delay_ms=0,
)
SMALL = CleanerConfig(dedupe_buffer_size=64 * 1024, backoff_ms=20, threads=2)
#: ~100 KB to read at 20 KB/s: a clean is still running when the test interferes with it.
SLOW = CleanerConfig(dedupe_buffer_size=64 * 1024, io_max_bytes_per_second=20_000, backoff_ms=20)


def fill(manager: LogManager, topic: str, records: int = 300, keys: int = 10) -> TopicPartition:
    tp = TopicPartition(topic, 0)
    log = manager.get_or_create_log(tp)
    for i in range(records):
        log.append(
            build_batch([NewRecord(key=b"k%d" % (i % keys), value=b"v%d" % i, timestamp=START_MS)])
        )
    log.roll()
    return tp


def wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def distinct_keys(manager: LogManager, tp: TopicPartition) -> tuple[int, int]:
    records = list(manager.get_log(tp).records())
    return len(records), len({r.key for r in records})


def test_threads_clean_every_dirty_log(tmp_path: Path, clock: ManualClock) -> None:
    with LogManager([tmp_path], default_config=COMPACT, clock=clock) as manager:
        tps = [fill(manager, f"t{i}") for i in range(3)]
        cleaner = LogCleaner(manager, SMALL)
        cleaner.start()
        try:
            wait_for(lambda: all(distinct_keys(manager, tp) == (10, 10) for tp in tps))
        finally:
            cleaner.shutdown()
        assert cleaner.alive_threads == 0
        checkpoint = OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").read()
        for tp in tps:
            assert checkpoint[tp] == manager.get_log(tp).active_segment.base_offset
            assert cleaner.last_stats[tp].messages_written <= 10 * 2
        assert cleaner.rounds_total >= 3


def test_corrupt_partition_is_uncleanable_and_the_others_are_cleaned(
    tmp_path: Path, clock: ManualClock
) -> None:
    with LogManager([tmp_path], default_config=COMPACT, clock=clock) as manager:
        bad, good = fill(manager, "bad"), fill(manager, "good")
        bad_log = manager.get_log(bad)
        victim = bad_log.segments[1]
        with open(victim.log.path, "r+b") as handle:  # flip a byte inside the first batch
            handle.seek(layout.RECORDS_OFFSET + 2)
            byte = handle.read(1)
            handle.seek(layout.RECORDS_OFFSET + 2)
            handle.write(bytes([byte[0] ^ 0xFF]))
        before = {p.name: p.stat().st_size for p in bad_log.directory.iterdir()}
        cleaner = LogCleaner(manager, SMALL)
        cleaner.start()
        try:
            wait_for(lambda: bad in cleaner.manager.uncleanable)
            wait_for(lambda: distinct_keys(manager, good) == (10, 10))
            gauges = cleaner.gauges()
        finally:
            cleaner.shutdown()
        reason = cleaner.manager.uncleanable[bad]
        assert "CorruptRecordError" in reason and victim.log.path.name in reason
        assert "CRC mismatch" in reason
        assert gauges.uncleanable_partitions == {str(tmp_path): 1}
        assert gauges.uncleanable_bytes[str(tmp_path)] > 0
        assert gauges.dead_thread_count == 0
        after = {p.name: p.stat().st_size for p in bad_log.directory.iterdir()}
        assert after == before, "nothing of the corrupt partition was rewritten"
        # a cleared mark (KAFKA-19895: no restart needed) lets it be tried again
        assert cleaner.manager.clear_uncleanable(bad)
        assert bad not in cleaner.manager.uncleanable


def test_pause_aborts_a_running_clean(tmp_path: Path, clock: ManualClock) -> None:
    with LogManager([tmp_path], default_config=COMPACT, clock=clock) as manager:
        tp = fill(manager, "slow", records=600)
        log = manager.get_log(tp)
        before = [(r.offset, r.value) for r in log.records()]
        cleaner = LogCleaner(manager, SLOW)
        cleaner.start()
        try:
            wait_for(lambda: cleaner.manager.state(tp)[0] is CleaningState.IN_PROGRESS)
            cleaner.manager.abort_and_pause(tp, timeout_s=20)
            assert cleaner.manager.state(tp) == (CleaningState.PAUSED, 1)
            assert [(r.offset, r.value) for r in log.records()] == before
            assert not [p for p in log.directory.iterdir() if p.suffix in (".cleaned", ".swap")]
            cleaner.throttler.set_rate(float("inf"))
            cleaner.manager.resume(tp)
            wait_for(lambda: distinct_keys(manager, tp) == (10, 10))
        finally:
            cleaner.shutdown()


def test_shutdown_during_a_clean_leaves_no_partial_files(
    tmp_path: Path, clock: ManualClock
) -> None:
    with LogManager([tmp_path], default_config=COMPACT, clock=clock) as manager:
        tp = fill(manager, "slow", records=600)
        log = manager.get_log(tp)
        before = [(r.offset, r.key, r.value) for r in log.records()]
        cleaner = LogCleaner(manager, SLOW)
        cleaner.start()
        wait_for(lambda: cleaner.manager.state(tp)[0] is CleaningState.IN_PROGRESS)
        cleaner.shutdown()
        assert cleaner.alive_threads == 0
        assert cleaner.manager.state(tp) == (None, 0)
        assert not [p for p in log.directory.iterdir() if p.suffix in (".cleaned", ".swap")]
        # The throttler lets the first check interval run unthrottled (as Kafka's does), so
        # groups of the round may have been swapped in before the shutdown aborted it: each
        # group is either old or cleaned, never a mix (Invariant 3), and no record moved or
        # changed (Invariant 2).
        after = [(r.offset, r.key, r.value) for r in log.records()]
        assert_cleaned_prefix_or_untouched(before, after)


def assert_cleaned_prefix_or_untouched(
    before: list[tuple[int, bytes | None, bytes | None]],
    after: list[tuple[int, bytes | None, bytes | None]],
) -> None:
    """``after`` is ``before`` (offset, key, value) with some records dropped, each of them
    superseded by a later record of its key."""
    remaining = iter(before)
    assert all(record in remaining for record in after), "a record moved, changed or repeated"
    kept = {offset for offset, _, _ in after}
    latest = {key: offset for offset, key, _ in before}
    assert set(latest.values()) <= kept, "a key's latest record is gone"


def test_compact_delete_logs_get_retention_from_the_cleaner(
    tmp_path: Path, clock: ManualClock
) -> None:
    config = LogConfig(
        cleanup_policy=("compact", "delete"),
        segment_bytes=2048,
        retention_ms=1000,
        file_delete_delay_ms=0,
    )
    with LogManager([tmp_path], default_config=config, clock=clock) as manager:
        tp = fill(manager, "both")
        cleaner = LogCleaner(manager, SMALL)
        clock.advance(2000)
        # retention thread: compacted logs are left to the cleaner
        assert manager.cleanup_logs(cleaner.manager) == []
        plans = cleaner.delete_old_segments_of_compacted_logs()
        assert [p.tp for p in plans] == [tp]
        assert cleaner.manager.state(tp) == (None, 0)
        assert len(manager.get_log(tp).segments) == 1


def test_retention_pauses_non_compacted_logs_meanwhile(tmp_path: Path, clock: ManualClock) -> None:
    config = LogConfig(segment_bytes=2048, retention_ms=1000, file_delete_delay_ms=0)
    with LogManager([tmp_path], default_config=config, clock=clock) as manager:
        tp = fill(manager, "plain")
        cleaner = LogCleaner(manager, SMALL)
        seen: list[object] = []
        log = manager.get_log(tp)
        real = log.delete_old_segments

        def spying(now_ms: int | None = None) -> object:
            seen.append(cleaner.manager.state(tp))
            return real(now_ms)

        log.delete_old_segments = spying  # type: ignore[assignment,method-assign]
        clock.advance(2000)
        plans = manager.cleanup_logs(cleaner.manager)
        assert [p.tp for p in plans] == [tp]
        assert seen == [(CleaningState.PAUSED, 1)]
        assert cleaner.manager.state(tp) == (None, 0)


def test_compact_now_request_cleans_below_the_dirty_ratio(
    tmp_path: Path, clock: ManualClock
) -> None:
    config = LogConfig(cleanup_policy=("compact",), segment_bytes=2048, file_delete_delay_ms=0)
    with LogManager([tmp_path], default_config=config, clock=clock) as manager:
        tp = fill(manager, "lazy", records=40)
        log = manager.get_log(tp)
        cleaner = LogCleaner(manager, SMALL)
        assert cleaner.clean_filthiest() is not None  # first clean: all dirty
        for i in range(5):  # a little more: ratio far below 0.5
            log.append(build_batch([NewRecord(key=b"k%d" % i, value=b"late", timestamp=START_MS)]))
        log.roll()
        assert cleaner.clean_filthiest() is None
        stats = cleaner.clean_log(tp)
        assert stats is not None and stats.end_offset == log.active_segment.base_offset
        assert cleaner.manager.compaction_requests == set()
        assert cleaner.clean_log(tp) is None, "nothing left to clean"
        assert cleaner.manager.compaction_requests == set(), "no request left pending"
        assert cleaner.clean_until_done() == []
        assert cleaner.manager.compaction_requests == set()


def test_tombstones_are_removed_once_their_horizon_passes_without_new_writes(
    tmp_path: Path, clock: ManualClock
) -> None:
    config = LogConfig(
        cleanup_policy=("compact",),
        segment_bytes=2048,
        delete_retention_ms=5000,
        file_delete_delay_ms=0,
    )
    with LogManager([tmp_path], default_config=config, clock=clock) as manager:
        tp = fill(manager, "quiet", records=40, keys=4)
        log = manager.get_log(tp)
        log.append(build_batch([NewRecord(key=b"k0", value=None, timestamp=START_MS)]))
        log.roll()
        cleaner = LogCleaner(manager, SMALL)
        cleaner.clean_until_done()
        assert b"k0" in {r.key for r in log.records()}, "the tombstone is kept until its horizon"
        assert cleaner.clean_filthiest() is None, "nothing dirty, horizon not reached"
        clock.advance(5000)
        stats = cleaner.clean_filthiest()
        assert stats is not None, "the passed horizon alone makes the log eligible"
        assert b"k0" not in {r.key for r in log.records()}
        assert cleaner.manager.pending_delete_horizon(tp) is None
        assert cleaner.clean_filthiest() is None


def test_deleting_a_partition_aborts_its_clean_first(tmp_path: Path, clock: ManualClock) -> None:
    with LogManager([tmp_path], default_config=COMPACT, clock=clock) as manager:
        tp, other = fill(manager, "doomed", records=600), fill(manager, "kept")
        cleaner = LogCleaner(manager, SLOW)
        cleaner.manager.update_checkpoint(tmp_path, [tp, other], update=(other, 0))
        cleaner.start()
        try:
            wait_for(lambda: cleaner.manager.state(tp)[0] is CleaningState.IN_PROGRESS)
            target = cleaner.delete_log(tp, timeout_s=20)
        finally:
            cleaner.shutdown()
        assert cleaner.manager.state(tp) == (None, 0)
        assert manager.find_log(tp) is None
        assert not [p for p in target.iterdir() if p.suffix in (".cleaned", ".swap")]
        checkpoint = OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").read()
        assert tp not in checkpoint
