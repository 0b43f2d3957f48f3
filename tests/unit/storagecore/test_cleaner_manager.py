"""Kafka LogCleanerManagerTest scenarios (kafka-log-layer.md §8.2, §8.3, §8.10, §10 items 42-55)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from storagecore import Log, LogConfig, ManualClock, NewRecord, TopicPartition, build_batch, files
from storagecore.checkpoints import OffsetCheckpointFile
from storagecore.cleaner.log_to_clean import cleanable_offsets, log_to_clean
from storagecore.cleaner.manager import CleaningAbortedError, CleaningState, LogCleanerManager
from tests.conftest import START_MS

COMPACT = LogConfig(cleanup_policy=("compact",), segment_bytes=1024, min_cleanable_dirty_ratio=0.1)


def make_log(
    root: Path,
    clock: ManualClock,
    name: str = "t",
    batches: int = 40,
    config: LogConfig = COMPACT,
    timestamp: int = START_MS,
) -> Log:
    log = Log.open(root / f"{name}-0", config, clock)
    for i in range(batches):
        log.append(
            build_batch([NewRecord(key=b"k%d" % (i % 5), value=b"v" * 40, timestamp=timestamp + i)])
        )
    return log


def manager(root: Path) -> LogCleanerManager:
    return LogCleanerManager([root])


def test_grab_filthiest_returns_the_log_with_the_highest_ratio(
    tmp_path: Path, clock: ManualClock
) -> None:
    a = make_log(tmp_path, clock, "a")
    b = make_log(tmp_path, clock, "b")
    cm = manager(tmp_path)
    # a is half clean: checkpoint in the middle of its non-active range.
    middle = a.segments[len(a.segments) // 2].base_offset
    cm.update_checkpoint(tmp_path, [a.tp, b.tp], update=(a.tp, middle))
    chosen = cm.grab_filthiest_log([a, b], clock.milliseconds())
    assert chosen is not None and chosen.tp == b.tp and chosen.cleanable_ratio == 1.0
    assert cm.state(b.tp) == (CleaningState.IN_PROGRESS, 0)
    assert cm.last_pre_clean_stats.max_dirty_percent == 100.0


def test_selection_keeps_each_logs_dirty_ratio_and_states_in_one_read(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The ratios a selection planned stay for the worker's per-log gauge (a scrape plans
    no log); a log being cleaned keeps the ratio it had; states() is state() for all."""
    a = make_log(tmp_path, clock, "a")
    b = make_log(tmp_path, clock, "b")
    cm = manager(tmp_path)
    middle = a.segments[len(a.segments) // 2].base_offset
    cm.update_checkpoint(tmp_path, [a.tp, b.tp], update=(a.tp, middle))
    now = clock.milliseconds()
    expected = {
        log.tp: log_to_clean(log, cleanable_offsets(log, checkpoint, now), now).cleanable_ratio
        for log, checkpoint in ((a, middle), (b, None))
    }
    assert cm.dirty_ratios == {}
    chosen = cm.grab_filthiest_log([a, b], now)
    assert chosen is not None and chosen.tp == b.tp
    assert cm.dirty_ratios == expected and 0 < expected[a.tp] < expected[b.tp] == 1.0
    assert cm.grab_filthiest_log([a, b], now) is not None  # a now; b in progress, kept
    assert cm.dirty_ratios == expected
    cm.abort_and_pause(TopicPartition("c", 0))
    assert cm.states() == {
        a.tp: (CleaningState.IN_PROGRESS, 0),
        b.tp: (CleaningState.IN_PROGRESS, 0),
        TopicPartition("c", 0): (CleaningState.PAUSED, 1),
    }
    assert all(cm.reported_state(tp) == state for tp, state in cm.states().items())
    cm.forget(a.tp)
    assert a.tp not in cm.dirty_ratios


def test_grab_filthiest_ignores_uncleanable_and_in_progress(
    tmp_path: Path, clock: ManualClock
) -> None:
    a = make_log(tmp_path, clock, "a")
    b = make_log(tmp_path, clock, "b")
    cm = manager(tmp_path)
    cm.mark_uncleanable(a.tp, "corrupt batch at offset 3", clock.milliseconds())
    first = cm.grab_filthiest_log([a, b], clock.milliseconds())
    assert first is not None and first.tp == b.tp
    assert (
        cm.grab_filthiest_log([a, b], clock.milliseconds()) is None
    )  # b in progress, a uncleanable
    assert cm.uncleanable == {a.tp: "corrupt batch at offset 3"}
    assert cm.clear_uncleanable(a.tp)
    again = cm.grab_filthiest_log([a, b], clock.milliseconds())
    assert again is not None and again.tp == a.tp


def test_only_compacted_logs_are_candidates(tmp_path: Path, clock: ManualClock) -> None:
    log = make_log(tmp_path, clock, config=LogConfig(segment_bytes=1024))
    assert manager(tmp_path).grab_filthiest_log([log], clock.milliseconds()) is None


def test_min_cleanable_ratio_is_strictly_greater(tmp_path: Path, clock: ManualClock) -> None:
    log = make_log(
        tmp_path,
        clock,
        config=LogConfig(
            cleanup_policy=("compact",), segment_bytes=1024, min_cleanable_dirty_ratio=1.0
        ),
    )
    assert manager(tmp_path).grab_filthiest_log([log], clock.milliseconds()) is None


@pytest.mark.parametrize("checkpoint", [10**9, -5])
def test_dirty_offset_reset_when_out_of_range(
    tmp_path: Path, clock: ManualClock, checkpoint: int
) -> None:
    log = make_log(tmp_path, clock)
    log.delete_records(3)
    offsets = cleanable_offsets(log, checkpoint, clock.milliseconds())
    assert offsets.first_dirty_offset == 3 and offsets.force_update_checkpoint


def test_checkpoint_rewritten_for_invalid_offset_even_when_not_selected(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = make_log(
        tmp_path,
        clock,
        config=LogConfig(
            cleanup_policy=("compact",), segment_bytes=1024, min_cleanable_dirty_ratio=1.0
        ),
    )
    cm = manager(tmp_path)
    cm.update_checkpoint(tmp_path, [log.tp], update=(log.tp, 10**9))
    assert cm.grab_filthiest_log([log], clock.milliseconds()) is None
    assert OffsetCheckpointFile(tmp_path / files.CLEANER_OFFSET_CHECKPOINT).read() == {log.tp: 0}


def test_only_the_active_segment_left_is_not_selected(tmp_path: Path, clock: ManualClock) -> None:
    log = make_log(tmp_path, clock)
    cm = manager(tmp_path)
    cm.update_checkpoint(tmp_path, [log.tp], update=(log.tp, log.active_segment.base_offset))
    assert cm.grab_filthiest_log([log], clock.milliseconds()) is None


def test_cleanable_offsets_without_lag_stop_at_the_active_segment(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = make_log(tmp_path, clock)
    offsets = cleanable_offsets(log, None, clock.milliseconds())
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_offset) == (
        0,
        log.active_segment.base_offset,
    )


def test_cleanable_offsets_with_min_compaction_lag(tmp_path: Path, clock: ManualClock) -> None:
    config = LogConfig(
        cleanup_policy=("compact",), segment_bytes=1024, min_compaction_lag_ms=60_000
    )
    log = Log.open(tmp_path / "t-0", config, clock)
    for i in range(40):  # the first 20 batches an hour old, the rest fresh
        ts = START_MS - 3_600_000 if i < 20 else START_MS
        log.append(build_batch([NewRecord(key=b"k", value=b"v" * 40, timestamp=ts)]))
    offsets = cleanable_offsets(log, None, START_MS)
    young = next(s for s in log.segments if s.largest_timestamp > START_MS - 60_000)
    assert offsets.first_uncleanable_offset == young.base_offset
    assert cleanable_offsets(log, None, START_MS + 120_000).first_uncleanable_offset == (
        log.active_segment.base_offset
    )


def test_log_to_clean_byte_accounting(tmp_path: Path, clock: ManualClock) -> None:
    log = make_log(tmp_path, clock)
    segments = log.segments
    first_dirty = segments[2].base_offset + 1  # mid-segment: counted as clean and cleanable
    offsets = cleanable_offsets(log, first_dirty, clock.milliseconds())
    ltc = log_to_clean(log, offsets, clock.milliseconds())
    assert ltc.clean_bytes == sum(s.size_bytes for s in segments[:3])
    assert ltc.cleanable_bytes == sum(s.size_bytes for s in segments[2:-1])
    assert ltc.cleanable_ratio == ltc.cleanable_bytes / (ltc.clean_bytes + ltc.cleanable_bytes)


def test_max_compaction_lag_forces_a_clean_below_the_ratio(
    tmp_path: Path, clock: ManualClock
) -> None:
    config = LogConfig(
        cleanup_policy=("compact",),
        segment_bytes=1024,
        min_cleanable_dirty_ratio=1.0,
        max_compaction_lag_ms=60_000,
    )
    log = make_log(tmp_path, clock, config=config, timestamp=START_MS - 120_000)
    chosen = manager(tmp_path).grab_filthiest_log([log], START_MS)
    assert chosen is not None and chosen.needs_compaction_now
    assert chosen.max_compaction_delay_ms == 60_000


def test_state_transitions(tmp_path: Path, clock: ManualClock) -> None:
    tp = TopicPartition("t", 0)
    cm = manager(tmp_path)
    cm.abort_and_pause(tp)
    cm.abort_and_pause(tp)
    assert cm.state(tp) == (CleaningState.PAUSED, 2)
    cm.resume(tp)
    assert cm.state(tp) == (CleaningState.PAUSED, 1)
    cm.resume(tp)
    assert cm.state(tp) == (None, 0)
    with pytest.raises(AssertionError, match="not paused"):
        cm.resume(tp)
    with pytest.raises(AssertionError, match="without a clean in progress"):
        cm.done_cleaning(tp, tmp_path, [tp], 5)


def test_done_cleaning_writes_the_checkpoint(tmp_path: Path, clock: ManualClock) -> None:
    log = make_log(tmp_path, clock)
    cm = manager(tmp_path)
    assert cm.grab_filthiest_log([log], clock.milliseconds()) is not None
    cm.done_cleaning(log.tp, tmp_path, [log.tp], 17)
    assert cm.state(log.tp) == (None, 0)
    assert cm.all_checkpoints() == {log.tp: 17}


def test_abort_waits_for_the_cleaning_thread(tmp_path: Path, clock: ManualClock) -> None:
    """A clean in progress is aborted: the thread notices at its next check and acknowledges."""
    log = make_log(tmp_path, clock)
    cm = manager(tmp_path)
    assert cm.grab_filthiest_log([log], clock.milliseconds()) is not None
    noticed = threading.Event()

    def cleaner() -> None:
        while True:
            try:
                cm.check_aborted(log.tp)
            except CleaningAbortedError:
                noticed.set()
                cm.done_cleaning(log.tp, tmp_path, [log.tp], None)
                return
            time.sleep(0.005)

    thread = threading.Thread(target=cleaner)
    thread.start()
    cm.abort_and_pause(log.tp, timeout_s=10)
    thread.join(10)
    assert noticed.is_set()
    assert cm.state(log.tp) == (CleaningState.PAUSED, 1)
    assert cm.all_checkpoints() == {}  # an aborted clean writes no checkpoint
    cm.resume(log.tp)
    assert cm.state(log.tp) == (None, 0)


def test_concurrent_pauses_nest_back_to_none(tmp_path: Path, clock: ManualClock) -> None:
    """Kafka testConcurrentLogCleanupAndLogTruncation / ...AndTopicDeletion."""
    tp = TopicPartition("t", 0)
    cm = manager(tmp_path)
    errors: list[Any] = []

    def pause_resume() -> None:
        try:
            for _ in range(200):
                cm.abort_and_pause(tp)
                cm.resume(tp)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=pause_resume) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and cm.state(tp) == (None, 0)


def test_update_checkpoint_prunes_partitions_that_are_gone(
    tmp_path: Path, clock: ManualClock
) -> None:
    cm = manager(tmp_path)
    a, b = TopicPartition("a", 0), TopicPartition("b", 0)
    cm.update_checkpoint(tmp_path, [a, b], update=(a, 5))
    cm.update_checkpoint(tmp_path, [a, b], update=(b, 7))
    assert cm.all_checkpoints() == {a: 5, b: 7}
    cm.update_checkpoint(tmp_path, [a], update=(a, 9))
    assert cm.all_checkpoints() == {a: 9}
    cm.update_checkpoint(tmp_path, [a], remove=a)
    assert cm.all_checkpoints() == {}
    assert (tmp_path / files.CLEANER_OFFSET_CHECKPOINT).read_text() == "0\n0\n"
    # Many rounds' ends in one write (the Spark compact job's), the gone ones pruned too.
    c = TopicPartition("c", 0)
    cm.update_checkpoint(tmp_path, [a, b, c], updates={a: 3, b: 4, c: 5})
    assert cm.all_checkpoints() == {a: 3, b: 4, c: 5}
    cm.update_checkpoint(tmp_path, [b, c], update=(a, 1), updates={c: 8})
    assert cm.all_checkpoints() == {b: 4, c: 8}


def test_retention_holds_are_not_reported_and_only_retention_releases_its_own(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = make_log(tmp_path, clock)
    cm = manager(tmp_path)
    tp = log.tp
    # The retention task's pause of a log that is not compacted: held, reported idle.
    plain = make_log(tmp_path, clock, "plain", config=LogConfig(cleanup_policy=("delete",)))
    assert cm.pause_cleaning_for_non_compacted([plain]) == [plain]
    assert cm.state(plain.tp) == (CleaningState.PAUSED, 1)
    assert cm.reported_state(plain.tp) == (None, 0)
    assert cm.states() == {plain.tp: (None, 0)}  # the status/metrics read: the same view
    with pytest.raises(AssertionError, match="retention's own pause"):
        cm.resume(plain.tp)  # nobody else may release it
    cm.abort_and_pause(plain.tp)  # an admin's pause meanwhile shows
    assert cm.reported_state(plain.tp) == (CleaningState.PAUSED, 1)
    cm.resume_after_retention(plain.tp)
    assert cm.state(plain.tp) == cm.reported_state(plain.tp) == (CleaningState.PAUSED, 1)
    cm.resume(plain.tp)
    assert cm.state(plain.tp) == (None, 0)
    # The cleaner's retention pass over a compacted log: in progress, reported idle.
    assert cm.deletable_logs([log]) == [log]
    assert cm.state(tp) == (CleaningState.IN_PROGRESS, 0)
    assert cm.reported_state(tp) == (None, 0)
    assert cm.states()[tp] == (None, 0)
    cm.done_deleting([tp])
    assert cm.state(tp) == cm.reported_state(tp) == (None, 0)
    # A clean is reported as one.
    assert cm.grab_filthiest_log([log], clock.milliseconds()) is not None
    assert cm.reported_state(tp) == (CleaningState.IN_PROGRESS, 0)
