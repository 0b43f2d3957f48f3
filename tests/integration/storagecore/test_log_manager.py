"""LogManager over several log dirs (Kafka LogManagerTest scenarios, kafka-log-layer.md §5.4)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from storagecore import (
    LogConfig,
    LogDirLockedError,
    LogDirOfflineError,
    LogManager,
    ManualClock,
    StorageError,
    TopicPartition,
    UnknownTopicOrPartitionError,
    files,
)
from storagecore.checkpoints import OffsetCheckpointFile
from tests.conftest import batch, break_disk

pytestmark = pytest.mark.integration


def test_second_process_on_the_same_dir_fails_clearly(tmp_path: Path, clock: ManualClock) -> None:
    with LogManager([tmp_path / "d"], clock=clock):
        code = (
            "import sys\nfrom storagecore import LogManager, LogDirLockedError\n"
            "try:\n    LogManager([sys.argv[1]])\nexcept LogDirLockedError as e:\n"
            "    print(e); sys.exit(3)\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "d")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 3
        assert f"log directory {tmp_path / 'd'} is locked by another process" in result.stdout
    with LogManager([tmp_path / "d"], clock=clock):  # released at shutdown
        pass


def test_same_dir_twice_in_one_process(tmp_path: Path, clock: ManualClock) -> None:
    with LogManager([tmp_path / "d"], clock=clock), pytest.raises(LogDirLockedError):
        LogManager([tmp_path / "d"], clock=clock)


def test_least_loaded_placement(tmp_path: Path, clock: ManualClock) -> None:
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    with LogManager(dirs, clock=clock) as manager:
        placed = [manager.get_or_create_log(TopicPartition("t", p)).parent_dir for p in range(6)]
        assert sorted(placed) == sorted([d.resolve() for d in dirs] * 2)
        assert manager.get_or_create_log(TopicPartition("t", 0)).parent_dir == placed[0]


def test_placement_counts_loaded_created_and_deleted_logs(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Placement reads per-dir counts kept as logs load, are created and are deleted (not a
    walk over every log per creation): loaded logs count, a deleted log frees its place."""
    a, b = (tmp_path / "a").resolve(), (tmp_path / "b").resolve()
    for p in range(3):
        (a / f"old-{p}").mkdir(parents=True)
    with LogManager([a, b], clock=clock) as manager:
        new = [manager.get_or_create_log(TopicPartition("new", p)).parent_dir for p in range(3)]
        assert new == [b, b, b]  # a holds the 3 loaded logs
        manager.delete_log(TopicPartition("new", 0))
        manager.delete_log(TopicPartition("new", 1))
        later = [manager.get_or_create_log(TopicPartition("later", p)).parent_dir for p in range(3)]
        assert later == [b, b, a]  # b back to 1 log: 1, 2, then a tie (3 each) goes to a


def test_checkpoints_and_clean_shutdown_marker(tmp_path: Path, clock: ManualClock) -> None:
    data = tmp_path / "d"
    with LogManager([data], clock=clock) as manager:
        log = manager.get_or_create_log(TopicPartition("orders", 0))
        log.append(batch(10))
        log.delete_records(4)
        manager.get_or_create_log(TopicPartition("orders", 1)).append(batch(3))
    assert (data / files.CLEAN_SHUTDOWN_FILE).exists()
    assert json.loads((data / files.CLEAN_SHUTDOWN_FILE).read_text()) == {
        "version": 0,
        "brokerEpoch": 0,
    }
    recovery = OffsetCheckpointFile(data / files.RECOVERY_POINT_CHECKPOINT).read()
    assert recovery == {TopicPartition("orders", 0): 10, TopicPartition("orders", 1): 3}
    starts = OffsetCheckpointFile(data / files.LOG_START_OFFSET_CHECKPOINT).read()
    assert starts == {TopicPartition("orders", 0): 4}  # only logs whose start moved
    with LogManager([data], clock=clock) as manager:
        assert not (data / files.CLEAN_SHUTDOWN_FILE).exists()  # deleted as loading starts
        assert manager.get_log(TopicPartition("orders", 0)).log_start_offset == 4
        assert manager.get_log(TopicPartition("orders", 1)).log_end_offset == 3


def test_crash_leaves_no_marker_and_recovery_runs(tmp_path: Path, clock: ManualClock) -> None:
    data = tmp_path / "d"
    manager = LogManager([data], clock=clock)
    log = manager.get_or_create_log(TopicPartition("t", 0))
    log.append(batch(5))
    path = log.active_segment.log.path
    manager.close_without_shutdown()
    manager.shutdown()  # a no-op after a crash: never writes the marker
    assert not (data / files.CLEAN_SHUTDOWN_FILE).exists()
    with path.open("ab") as handle:
        handle.write(b"\x00" * 100)
    with LogManager([data], clock=clock) as reopened:
        assert reopened.get_log(TopicPartition("t", 0)).log_end_offset == 5
    assert path.stat().st_size == len(batch(5))


def test_unreadable_checkpoint_means_recover_everything(tmp_path: Path, clock: ManualClock) -> None:
    data = tmp_path / "d"
    with LogManager([data], clock=clock) as manager:
        manager.get_or_create_log(TopicPartition("t", 0)).append(batch(5))
    (data / files.RECOVERY_POINT_CHECKPOINT).write_text("garbage\n")
    (data / files.CLEAN_SHUTDOWN_FILE).unlink()
    with LogManager([data], clock=clock) as manager:
        assert manager.get_log(TopicPartition("t", 0)).log_end_offset == 5


def test_parallel_load_of_many_logs(tmp_path: Path, clock: ManualClock) -> None:
    data = tmp_path / "d"
    with LogManager([data], clock=clock) as manager:
        for p in range(16):
            manager.get_or_create_log(TopicPartition("t", p)).append(batch(p + 1))
    with LogManager([data], clock=clock, recovery_threads_per_dir=4) as manager:
        assert {tp.partition: log.log_end_offset for tp, log in manager.logs.items()} == {
            p: p + 1 for p in range(16)
        }


def test_same_partition_in_two_dirs_is_fatal(tmp_path: Path, clock: ManualClock) -> None:
    for name in ("a", "b"):
        with LogManager([tmp_path / name], clock=clock) as manager:
            manager.get_or_create_log(TopicPartition("t", 0)).append(batch(1))
    with pytest.raises(StorageError, match="duplicate log directories for t-0"):
        LogManager([tmp_path / "a", tmp_path / "b"], clock=clock)
    with LogManager([tmp_path / "a"], clock=clock):  # locks were released by the failure
        pass


def test_partition_deletion_is_delayed(tmp_path: Path, clock: ManualClock) -> None:
    data = tmp_path / "d"
    config = LogConfig(file_delete_delay_ms=1000)
    with LogManager([data], clock=clock, default_config=config) as manager:
        tp = TopicPartition("gone", 0)
        manager.get_or_create_log(tp).append(batch(3))
        manager.get_or_create_log(TopicPartition("kept", 0)).append(batch(1))
        renamed = manager.delete_log(tp)
        assert renamed.name.startswith("gone-0.") and renamed.name.endswith("-delete")
        assert renamed.exists() and not (data / "gone-0").exists()
        with pytest.raises(UnknownTopicOrPartitionError, match="gone-0"):
            manager.get_log(tp)
        assert tp not in OffsetCheckpointFile(data / files.RECOVERY_POINT_CHECKPOINT).read()
        assert manager.delete_expired_logs() == 0
        clock.advance(1000)
        assert manager.delete_expired_logs() == 1
        assert not renamed.exists() and (data / "kept-0").exists()


def test_leftover_delete_dirs_are_removed_at_load(tmp_path: Path, clock: ManualClock) -> None:
    data = tmp_path / "d"
    with LogManager(
        [data], clock=clock, default_config=LogConfig(file_delete_delay_ms=10**9)
    ) as manager:
        manager.get_or_create_log(TopicPartition("gone", 0)).append(batch(3))
        renamed = manager.delete_log(TopicPartition("gone", 0))
    (data / "not-a-partition").mkdir()
    (data / "not-a-partition" / "precious").write_text("never touched")
    with LogManager([data], clock=clock) as manager:
        assert manager.logs == {}
        assert manager.delete_expired_logs() == 1
        assert not renamed.exists()
    assert (data / "not-a-partition" / "precious").read_text() == "never touched"


def test_stray_deleted_files_are_unlinked_after_the_load(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The ``.deleted`` files a load finds (a restart before ``file.delete.delay.ms`` passed)
    are not unlinked by the load but by the delete task, or at the latest at shutdown."""
    data = tmp_path / "d"
    tp = TopicPartition("t", 0)
    with LogManager([data], clock=clock) as manager:
        manager.get_or_create_log(tp).append(batch(3))
    stray = [data / "t-0" / f"{files.filename_prefix(100)}{s}.deleted" for s in (".log", ".index")]
    for path in stray:
        path.write_bytes(b"x")
    with LogManager([data], clock=clock) as manager:
        assert all(path.exists() for path in stray)  # left by the load
        assert manager.get_log(tp).log_end_offset == 3
        assert manager.delete_expired_logs() == 0  # no -delete dir; the stray files go
        assert not any(path.exists() for path in stray)
    for path in stray:
        path.write_bytes(b"x")
    with LogManager([data], clock=clock):
        assert all(path.exists() for path in stray)
    assert not any(path.exists() for path in stray)  # shutdown unlinked what was left
    assert (data / "t-0" / files.filename_prefix(0)).with_suffix(".log").exists()


def test_io_error_takes_only_that_dir_offline(tmp_path: Path, clock: ManualClock) -> None:
    with LogManager([tmp_path / "a", tmp_path / "b"], clock=clock) as manager:
        bad = manager.get_or_create_log(TopicPartition("t", 0))
        good = manager.get_or_create_log(TopicPartition("t", 1))
        assert bad.parent_dir != good.parent_dir
        bad.append(batch(1))
        break_disk(bad)
        with pytest.raises(LogDirOfflineError):
            bad.append(batch(1))
        assert manager.offline_dirs == [bad.parent_dir]
        assert "Bad file descriptor" in (manager.dir_error(bad.parent_dir) or "")
        good.append(batch(2))
        assert good.log_end_offset == 2
        placed = manager.get_or_create_log(TopicPartition("t", 2))
        assert placed.parent_dir == good.parent_dir  # new logs avoid the offline dir
        manager.checkpoint_recovery_points_and_log_start_offsets()
    assert (good.parent_dir / files.CLEAN_SHUTDOWN_FILE).exists()
    assert not (bad.parent_dir / files.CLEAN_SHUTDOWN_FILE).exists()


def test_flush_dirty_logs_by_flush_ms(tmp_path: Path, clock: ManualClock) -> None:
    with LogManager(
        [tmp_path / "d"], clock=clock, default_config=LogConfig(flush_ms=1000)
    ) as manager:
        log = manager.get_or_create_log(TopicPartition("t", 0))
        log.append(batch(4))
        assert manager.flush_dirty_logs() == 0
        clock.advance(1000)
        assert manager.flush_dirty_logs() == 1
        assert log.recovery_point == 4


def test_topic_names_never_escape_the_data_dir(tmp_path: Path, clock: ManualClock) -> None:
    from storagecore import ConfigError

    with LogManager([tmp_path / "d"], clock=clock) as manager:
        for bad in ("../evil", "a/b", "..", "."):
            with pytest.raises(ConfigError):
                manager.get_or_create_log(TopicPartition(bad, 0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_cleanup_logs_applies_each_topics_retention(tmp_path: Path, clock: ManualClock) -> None:
    """Kafka LogManagerTest testCleanupExpiredSegments / testCleanupSegmentsToMaintainSize /
    testDoesntCleanLogsWithCompactPolicy, and an offline dir does not stop the others."""
    configs = {
        "broken": LogConfig(segment_bytes=300, retention_ms=1_000),
        "timed": LogConfig(segment_bytes=300, retention_ms=1_000),
        "sized": LogConfig(segment_bytes=300, retention_bytes=600),
        "compacted": LogConfig(segment_bytes=300, retention_ms=1_000, cleanup_policy=("compact",)),
    }
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    with LogManager(dirs, config_for=configs, clock=clock) as manager:
        for topic in configs:  # least-loaded placement: broken in a, timed in b, sized in c
            log = manager.get_or_create_log(TopicPartition(topic, 0))
            for _ in range(12):
                log.append(batch(2, value_size=40))
        broken = manager.get_log(TopicPartition("broken", 0))
        break_disk(broken)
        with pytest.raises(LogDirOfflineError):
            broken.append(batch(1))
        assert manager.offline_dirs == [broken.parent_dir]
        clock.advance(2_000)
        plans = {plan.tp.topic: plan for plan in manager.cleanup_logs()}
        assert set(plans) == {"timed", "sized"}
        assert manager.get_log(TopicPartition("timed", 0)).size_bytes == 0
        assert manager.get_log(TopicPartition("sized", 0)).size_bytes >= 600
        compacted = manager.get_log(TopicPartition("compacted", 0))
        assert compacted.offline or len(compacted.segments) > 1  # compact: no time retention


def test_periodic_checkpoints_race_no_deletion(tmp_path: Path, clock: ManualClock) -> None:
    """The worker's checkpoint task and a partition deletion (DeleteTopics, a Topic removed
    with deletionPolicy Delete) write the same checkpoint files from two threads: each write
    must be whole (one ``.tmp`` at a time), never an I/O error that takes the dir offline."""
    import threading

    data = tmp_path / "d"
    with LogManager([data], clock=clock) as manager:
        stop = threading.Event()
        failures: list[BaseException] = []

        def checkpoint_forever() -> None:
            while not stop.is_set():
                try:
                    manager.checkpoint_recovery_points_and_log_start_offsets()
                except BaseException as exc:  # reported by the test below
                    failures.append(exc)
                    return

        writer = threading.Thread(target=checkpoint_forever)
        writer.start()
        try:
            for round_ in range(150):
                tp = TopicPartition(f"t{round_}", 0)
                manager.get_or_create_log(tp).append(batch(1))
                manager.delete_log(tp)
        finally:
            stop.set()
            writer.join(30)
        assert failures == []
        assert manager.dir_error(data) is None
        assert all(log.parent_dir == data for log in manager.logs.values())


def test_unchanged_checkpoints_are_not_rewritten(tmp_path: Path, clock: ManualClock) -> None:
    """A checkpoint whose offsets stable storage already holds is not written again (two
    fsyncs saved per file): after a clean shutdown the open's directory fsync makes what it
    reads durable; after an unclean one, or once the offsets change, the file is rewritten
    (write_atomically: a new inode)."""
    data = tmp_path / "d"
    tp = TopicPartition("t", 0)
    recovery = data / files.RECOVERY_POINT_CHECKPOINT
    starts = data / files.LOG_START_OFFSET_CHECKPOINT
    with LogManager([data], clock=clock) as manager:
        log = manager.get_or_create_log(tp)
        log.append(batch(5))
        log.delete_records(2)
    written = (recovery.stat().st_ino, starts.stat().st_ino)
    with LogManager([data], clock=clock) as manager:
        manager.checkpoint_recovery_points_and_log_start_offsets()
    assert (recovery.stat().st_ino, starts.stat().st_ino) == written
    with LogManager([data], clock=clock) as manager:
        manager.get_log(tp).append(batch(1))
        manager.get_log(tp).flush()
    assert recovery.stat().st_ino != written[0]
    assert starts.stat().st_ino == written[1]
    assert OffsetCheckpointFile(recovery).read() == {tp: 6}
    # An unclean shutdown: what the next open reads may not be durable, so it is rewritten.
    (data / files.CLEAN_SHUTDOWN_FILE).unlink()
    before = (recovery.stat().st_ino, starts.stat().st_ino)
    with LogManager([data], clock=clock):
        pass
    after = (recovery.stat().st_ino, starts.stat().st_ino)
    assert after[0] != before[0] and after[1] != before[1]
    # A checkpoint removed behind the manager's back is written again.
    with LogManager([data], clock=clock) as manager:
        starts.unlink()
        manager.checkpoint_recovery_points_and_log_start_offsets()
        assert OffsetCheckpointFile(starts).read() == {tp: 2}


def test_shutdown_runs_before_unlock_while_the_dir_is_still_locked(
    tmp_path: Path, clock: ManualClock
) -> None:
    """``before_unlock`` (where ``logkeeper clean`` joins its file-deletion thread) runs after
    the clean-shutdown marker is written and before the lock is released, and the lock is
    released even when it raises."""
    data = tmp_path / "d"
    seen: list[bool] = []

    def check_locked() -> None:
        seen.append((data / files.CLEAN_SHUTDOWN_FILE).exists())
        with pytest.raises(LogDirLockedError):
            LogManager([data], clock=clock)

    LogManager([data], clock=clock).shutdown(before_unlock=check_locked)
    assert seen == [True]

    def fail() -> None:
        raise OSError("unlink failed")

    manager = LogManager([data], clock=clock)
    with pytest.raises(OSError, match="unlink failed"):
        manager.shutdown(before_unlock=fail)
    with LogManager([data], clock=clock):  # released all the same
        pass
