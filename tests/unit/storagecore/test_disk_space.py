"""A full disk is an expected condition (issue 20): the free-space floor, and appends that hit
ENOSPC leave the log at its last complete batch with the directory online. The filesystem is
simulated here (statvfs, pwrite and posix_fallocate made to fail); the real one, a tmpfs under
a Kafka producer, is tests/integration/storageworker/test_disk_full.py."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from storagecore import (
    LogConfig,
    LogManager,
    ManualClock,
    NewRecord,
    TopicPartition,
    build_batch,
    disk_space,
    native_append,
)
from storagecore.cleaner.log_cleaner import LogCleaner
from storagecore.disk_space import DiskSpace, default_floor, is_disk_full
from storagecore.errors import LogDirFullError
from storagecore.records.batch import iter_complete_batches

MIB = 1024 * 1024


class FakeStatvfs:
    def __init__(self, free: int, total: int = 1000 * MIB) -> None:
        self.free, self.total = free, total

    def __call__(self, _path: Any) -> os.statvfs_result:
        return os.statvfs_result((1, 1, self.total, self.free, self.free, 0, 0, 0, 0, 255))


def test_the_default_floor_is_the_smaller_of_5_percent_and_512_mib() -> None:
    assert default_floor(100 * MIB) == 5 * MIB
    assert default_floor(100 * 1024 * MIB) == 512 * MIB
    assert is_disk_full(OSError(errno.ENOSPC, "full")) and is_disk_full(OSError(errno.EDQUOT, "q"))
    assert not is_disk_full(OSError(errno.EIO, "bad disk"))


def test_floor_refuses_until_space_is_back_and_admitted_bytes_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs = FakeStatvfs(free=60 * MIB)
    monkeypatch.setattr(disk_space.os, "statvfs", fs)
    space = DiskSpace(tmp_path, min_free_bytes=50 * MIB, refresh_ms=10_000)
    space.check_writable(4 * MIB)
    # The cached reading says 60 MiB free, but 4 + 4 + 4 MiB admitted since would cross the
    # floor: the space is read again before letting more in.
    fs.free = 47 * MIB
    space.check_writable(4 * MIB)
    with pytest.raises(LogDirFullError, match="below the floor of 52428800 bytes"):
        space.check_writable(4 * MIB)
    assert space.reading().under_floor and space.pressure_episodes == 1
    fs.free = 80 * MIB
    assert not space.reading(fresh=True).under_floor
    space.check_writable(MIB)
    space.set_min_free_bytes(None)  # the default: 5% of 1000 MiB
    assert space.reading().floor_bytes == 50 * MIB


def test_a_failed_write_holds_until_space_is_freed_or_the_retry_time_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs = FakeStatvfs(free=3 * MIB)
    monkeypatch.setattr(disk_space.os, "statvfs", fs)
    space = DiskSpace(tmp_path, min_free_bytes=0, refresh_ms=1)
    space.note_full(OSError(errno.ENOSPC, "No space left on device"), "an append", now_ms=0)
    reading = space.reading(now_ms=5)
    assert reading.under_floor and reading.reason == "an append failed: No space left on device"
    fs.free = 3 * MIB + 4096  # a little, not enough: still held
    assert space.reading(now_ms=10).under_floor
    fs.free = 5 * MIB
    assert not space.reading(now_ms=20).under_floor
    space.note_full(OSError(errno.EDQUOT, "Disk quota exceeded"), "an append", now_ms=100)
    assert space.reading(now_ms=200).under_floor
    assert not space.reading(now_ms=100 + disk_space.FULL_RETRY_MS).under_floor


def records(n: int, start: int = 0, *, producer: bool = False) -> bytes:
    """``n`` records from key ``start``; with ``producer``, an idempotent producer's batch whose
    sequence is ``start`` (its batches written by the native producer write)."""
    ids = {"producer_id": 3, "producer_epoch": 0, "base_sequence": start} if producer else {}
    return build_batch(
        [
            NewRecord(key=b"k%d" % i, value=b"v" * 200, timestamp=1_700_000_000_000)
            for i in range(start, start + n)
        ],
        **ids,
    )


@pytest.mark.parametrize(
    ("where", "producer"),
    [
        ("pwrite", False),
        ("fallocate", False),
        ("native write", False),
        ("native write", True),  # write_to_segment, after the producer checks
    ],
)
def test_an_append_that_finds_no_space_leaves_nothing_and_the_dir_online(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, producer: bool
) -> None:
    """A full disk fails the append with nothing written (the file cut back to where it was),
    the directory stays online, and the same append succeeds once there is space (an
    idempotent producer's retry too: its failed batch left no trace in the producer state)."""
    config = LogConfig(index_interval_bytes=1, segment_bytes=1 << 20)
    with LogManager(
        [tmp_path], default_config=config, clock=ManualClock(1_700_000_000_000)
    ) as manager:
        tp = TopicPartition("t", 0)
        log = manager.get_or_create_log(tp)
        log.append(records(5, producer=producer))
        log.append(records(5, 5, producer=producer))  # the next append writes index entries
        segment = log.active_segment
        size, end = segment.size_bytes, log.log_end_offset
        real_pwrite, real_fallocate = os.pwrite, os.posix_fallocate

        def short_pwrite(fd: int, data: Any, offset: int) -> int:
            if offset >= size:  # half of it lands, then the disk is full
                if len(data) > 16:
                    return real_pwrite(fd, bytes(data)[: len(data) // 2], offset)
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_pwrite(fd, data, offset)

        def no_blocks(fd: int, offset: int, length: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        saved_fd = -1
        if where == "pwrite":  # os.pwrite is the general path's (FileRecords.append)
            monkeypatch.setattr(native_append, "append_to_segment", None)
            monkeypatch.setattr(os, "pwrite", short_pwrite)
        elif where == "fallocate":
            monkeypatch.setattr(segment.offset_index, "_reserved", 0)
            monkeypatch.setattr(os, "posix_fallocate", no_blocks)
        else:  # the native append's pwritev, on a descriptor that now leads to /dev/full
            log_fd = segment.log.acquire()  # pinned: the file cache keeps this descriptor
            saved_fd = os.dup(log_fd)
            full = os.open("/dev/full", os.O_WRONLY)
            os.dup2(full, log_fd)
            os.close(full)
        native_writes: list[object] = []
        real_write = native_append.write_to_segment
        if producer and real_write is not None:  # the failing write must be the native one

            def counted_write(*args: Any) -> Any:
                native_writes.append(args)
                return real_write(*args)

            monkeypatch.setattr(native_append, "write_to_segment", counted_write)
        with pytest.raises(LogDirFullError, match="nothing was written"):
            log.append(records(5, 10, producer=producer))
        assert len(native_writes) == (1 if producer and real_write is not None else 0)
        if saved_fd >= 0:
            os.dup2(saved_fd, log_fd)
            os.close(saved_fd)
            segment.log.release()
        assert not log.offline and tmp_path.resolve() in manager.online_dirs
        assert segment.log.path.stat().st_size == size == segment.size_bytes
        assert log.log_end_offset == end
        assert manager.disk_space[tmp_path.resolve()].reading(fresh=True).under_floor
        monkeypatch.setattr(os, "pwrite", real_pwrite)
        monkeypatch.setattr(os, "posix_fallocate", real_fallocate)
        info = log.append(records(5, 10, producer=producer))
        assert info.first_offset == end
        fetched = log.read(0, 1 << 20).records
        offsets = [r.offset for _, b in iter_complete_batches(fetched) for r in b.records()]
        assert offsets == list(range(15))


def test_a_clean_that_would_not_fit_is_deferred_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compact = LogConfig(
        cleanup_policy=("compact",), segment_bytes=2048, min_cleanable_dirty_ratio=0.01
    )
    with LogManager(
        [tmp_path], default_config=compact, clock=ManualClock(1_700_000_000_000)
    ) as manager:
        tp = TopicPartition("c", 0)
        log = manager.get_or_create_log(tp)
        for i in range(20):
            log.append(records(5, i % 2))
        files_before = sorted(p.name for p in log.directory.iterdir())
        monkeypatch.setattr(disk_space.os, "statvfs", FakeStatvfs(free=1024))
        cleaner = LogCleaner(manager)
        assert cleaner.clean_filthiest() is None
        assert (
            "needs up to 2048 bytes" in cleaner.deferred[tp] and "1024 free" in cleaner.deferred[tp]
        )
        assert tp not in cleaner.manager.uncleanable
        assert sorted(p.name for p in log.directory.iterdir()) == files_before
        monkeypatch.setattr(disk_space.os, "statvfs", FakeStatvfs(free=100 * MIB))
        manager.disk_space[tmp_path.resolve()].reading(fresh=True)
        assert cleaner.clean_filthiest() is not None
        assert tp not in cleaner.deferred


def test_a_checkpoint_that_finds_no_space_keeps_the_dir_online(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from storagecore import checkpoints

    with LogManager([tmp_path], clock=ManualClock(1_700_000_000_000)) as manager:
        log = manager.get_or_create_log(TopicPartition("t", 0))
        log.append(records(3))

        def full(*_: Any, **__: Any) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(checkpoints.OffsetCheckpointFile, "write", full)
        manager.checkpoint_recovery_points_and_log_start_offsets()
        assert tmp_path.resolve() in manager.online_dirs and not log.offline
        assert manager.disk_space[tmp_path.resolve()].reading(fresh=True).under_floor
        monkeypatch.undo()
        log.append(records(3, 3))
