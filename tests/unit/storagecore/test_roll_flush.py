"""The flush of a rolled segment and of the producer snapshot written at the roll, run off the
appending thread (storagecore.roll_flush, Kafka's "flush-log" task): the append returns before
the fsyncs, they hold no lock and use descriptors of their own (the file cache may close the
segment's at any time), the recovery point moves only once they are done, and a failure takes
the log offline and leaves the recovery point where it was.

The tests schedule on a list (the test runs each job when it chooses, as Kafka's tests do with
their MockScheduler) or use the LogManager's real thread."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from storagecore import Log, LogConfig, LogDirOfflineError, ManualClock, TopicPartition, durability
from storagecore.checkpoints import OffsetCheckpointFile
from storagecore.file_cache import FileCache
from storagecore.files import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT
from storagecore.log_manager import LogManager
from storagecore.producer_state.snapshot import snapshot_file
from tests.conftest import batch

WAIT_S = 30  # a bound on waits for another thread, never reached when the code is right
Job = Callable[[], None]


def open_log(
    tmp_path: Path, clock: ManualClock, jobs: list[Job], cache: FileCache | None = None
) -> Log:
    return Log.open(
        tmp_path / "topic-0",
        LogConfig(segment_bytes=300),
        clock,
        file_cache=cache,
        flush_scheduler=jobs.append,
    )


def roll(log: Log, segments: int = 2) -> None:
    while len(log.segments) < segments:
        log.append(batch(2, value_size=40))


def open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The paths the job synced, in order (the real sync runs)."""
    paths: list[Path] = []
    real = durability.sync_path

    def sync_path(path: Path) -> bool:
        done = real(path)
        if done:
            paths.append(path)
        return done

    monkeypatch.setattr(durability, "sync_path", sync_path)
    return paths


def test_an_append_that_rolls_leaves_the_flush_to_the_scheduler(
    tmp_path: Path, clock: ManualClock, synced: list[Path]
) -> None:
    jobs: list[Job] = []
    log = open_log(tmp_path, clock, jobs)
    roll(log)
    old, new = log.segments
    assert len(jobs) == 1
    assert log.recovery_point == 0  # nothing synced yet: a crash now recovers the old segment
    snapshot = snapshot_file(log.directory, new.base_offset)
    assert snapshot.is_file()  # written at the roll, synced by the job, first
    jobs.pop()()
    assert synced == [
        snapshot,
        old.log.path,
        old.offset_index.path,
        old.time_index.path,
        log.directory,  # the new segment's files and the snapshot's rename
    ]
    assert log.recovery_point == new.base_offset
    log.close()


def test_a_roll_without_a_scheduler_flushes_at_once(tmp_path: Path, clock: ManualClock) -> None:
    log = Log.open(tmp_path / "topic-0", LogConfig(segment_bytes=300), clock)
    roll(log)
    assert log.recovery_point == log.active_segment.base_offset
    log.close()


def test_the_fsync_holds_no_lock_so_appends_go_on(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs: list[Job] = []
    log = open_log(tmp_path, clock, jobs)
    roll(log)
    base = log.active_segment.base_offset
    rolled = log.segments[0].log.path
    in_fsync, release = threading.Event(), threading.Event()
    real = durability.sync_path

    def slow_sync(path: Path) -> bool:
        if path == rolled:  # the big one: the rolled segment's records
            in_fsync.set()
            assert release.wait(WAIT_S), "the test never released the fsync"
        return real(path)

    monkeypatch.setattr(durability, "sync_path", slow_sync)
    flusher = threading.Thread(target=jobs.pop())
    flusher.start()
    assert in_fsync.wait(WAIT_S)
    appended = threading.Event()

    def append() -> None:
        log.append(batch(1))
        appended.set()

    appender = threading.Thread(target=append)
    appender.start()
    try:
        # Under the log's lock this append would wait for the fsync, which waits for the test.
        assert appended.wait(WAIT_S), "the append waited for the rolled segment's fsync"
        assert log.recovery_point == 0  # not before the fsync is done
    finally:
        release.set()
        flusher.join(WAIT_S)
        appender.join(WAIT_S)
    assert log.recovery_point == base
    log.close()


def test_files_the_cache_closed_are_synced_by_path(
    tmp_path: Path, clock: ManualClock, synced: list[Path]
) -> None:
    cache = FileCache(16)
    jobs: list[Job] = []
    log = open_log(tmp_path, clock, jobs, cache)
    roll(log)
    old = log.segments[0]
    cache.shed(1.0)  # the inactive segment's descriptors are closed, as the cache may at any time
    assert all(handle.fd < 0 for handle in old._cached_handles())
    before = open_fds()
    jobs.pop()()
    assert not log.offline and log.recovery_point == log.active_segment.base_offset
    assert old.log.path in synced and old.offset_index.path in synced
    assert open_fds() == before  # its own descriptors, each closed after its fsync
    assert all(handle.fd < 0 for handle in old._cached_handles())  # the cache's stay closed
    log.close()


def test_a_segment_deleted_before_its_flush_runs(
    tmp_path: Path, clock: ManualClock, synced: list[Path]
) -> None:
    jobs: list[Job] = []
    log = open_log(tmp_path, clock, jobs)
    roll(log, 3)
    first, second = log.segments[:2]
    log.delete_segments([first], "retention")  # renamed .deleted and unlinked (delay 0)
    while jobs:
        jobs.pop(0)()
    assert not log.offline and log.recovery_point == log.active_segment.base_offset
    assert first.log.path not in synced and second.log.path in synced
    log.close()


def test_a_log_closed_before_its_flush_runs(tmp_path: Path, clock: ManualClock) -> None:
    jobs: list[Job] = []
    before = open_fds()
    log = open_log(tmp_path, clock, jobs)
    roll(log)
    log.close()  # a deleted topic, or the shutdown's own flush ran
    jobs.pop()()
    assert not log.offline
    assert open_fds() == before


def test_a_failed_fsync_takes_the_log_offline(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs: list[Job] = []
    log = open_log(tmp_path, clock, jobs)
    roll(log)
    rolled = log.segments[0].log.path
    real = durability.sync_path

    def failing_sync(path: Path) -> bool:
        if path == rolled:
            raise OSError(errno.EIO, "Input/output error")
        return real(path)

    monkeypatch.setattr(durability, "sync_path", failing_sync)
    jobs.pop()()
    assert log.offline and log.recovery_point == 0
    with pytest.raises(LogDirOfflineError, match="topic-0"):
        log.append(batch(1))
    log.close_handles()


def test_running_out_of_descriptors_fails_the_job_only(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs: list[Job] = []
    log = open_log(tmp_path, clock, jobs, FileCache(16))
    roll(log)

    def exhausted(path: Path) -> bool:
        raise OSError(errno.EMFILE, "Too many open files", str(path))

    monkeypatch.setattr(durability, "sync_path", exhausted)
    jobs.pop()()
    assert not log.offline and log.recovery_point == 0  # not synced: not marked
    monkeypatch.undo()
    roll(log, 3)  # the next roll's job covers both segments from the recovery point
    jobs.pop()()
    assert log.recovery_point == log.active_segment.base_offset
    log.close()


def test_the_manager_runs_roll_flushes_on_its_thread(tmp_path: Path, clock: ManualClock) -> None:
    data = tmp_path / "data"
    manager = LogManager(
        [data], default_config=LogConfig(segment_bytes=300), clock=clock, background_roll_flush=True
    )
    flusher = manager.roll_flusher
    assert flusher is not None
    log = manager.get_or_create_log(TopicPartition("topic", 0))
    roll(log, 4)
    flusher.wait()
    assert log.recovery_point == log.active_segment.base_offset
    manager.shutdown()
    assert (data / CLEAN_SHUTDOWN_FILE).is_file()
    ran: list[str] = []
    flusher.schedule(lambda: ran.append("late"))  # a roll after shutdown flushes at once
    assert ran == ["late"]


def test_a_crash_while_roll_flushes_are_pending(tmp_path: Path, clock: ManualClock) -> None:
    """The checkpoint written while the flushes wait does not claim the rolled segments, and
    the reload after the crash recovers them from there with every record."""
    data = tmp_path / "data"
    tp = TopicPartition("topic", 0)
    config = LogConfig(segment_bytes=300)
    manager = LogManager([data], default_config=config, clock=clock, background_roll_flush=True)
    flusher = manager.roll_flusher
    assert flusher is not None
    log = manager.get_or_create_log(tp)
    roll(log, 2)
    flusher.wait()
    synced_to = log.recovery_point
    assert synced_to > 0
    held, release = threading.Event(), threading.Event()

    def slow_disk() -> None:  # the flush thread busy, as with a long fsync
        held.set()
        assert release.wait(WAIT_S)

    flusher.schedule(slow_disk)
    assert held.wait(WAIT_S)
    roll(log, 5)
    end = log.log_end_offset
    manager.checkpoint_recovery_points_and_log_start_offsets()
    assert OffsetCheckpointFile(data / RECOVERY_POINT_CHECKPOINT).read()[tp] == synced_to
    release.set()
    manager.close_without_shutdown()  # the queued flushes are dropped, as by a crash
    with LogManager([data], default_config=config, clock=clock) as reloaded:
        log = reloaded.get_log(tp)
        assert log.log_end_offset == end
        assert [r.offset for r in log.records()] == list(range(end))
