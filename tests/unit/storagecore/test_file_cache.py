"""The bounded cache of open segment files: LRU eviction, pins, the lazy indexes behind it,
resource errors (EMFILE, ENFILE, ENOMEM) that fail one request and never a directory, and the
active segments' files held for appends: held from one append to the next, released when the
segment stops being active or closes, never more than a quarter of the cache's bound."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from storagecore import LogConfig, LogManager, ManualClock, TopicPartition
from storagecore import file_cache as file_cache_module
from storagecore.errors import ResourceExhaustedError
from storagecore.file_cache import (
    FileCache,
    default_max_open_files,
    is_resource_exhausted,
    max_held_files,
)
from storagecore.index import MAPPED
from storagecore.index import base as index_base
from storagecore.log import Log
from storagecore.records.batch import iter_complete_batches
from storagecore.records.file_records import FileRecords
from tests.conftest import START_MS, batch

SMALL_SEGMENTS = LogConfig(segment_bytes=400, index_interval_bytes=1)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def offsets_of(data: bytes) -> list[int]:
    return [r.offset for _, b in iter_complete_batches(data) for r in b.records()]


def small_cache(tmp_path: Path, clock: ManualClock, max_open_files: int = 16) -> LogManager:
    """Logs of small segments under ``tmp_path``, through a cache of ``max_open_files``."""
    return LogManager(
        [tmp_path], default_config=SMALL_SEGMENTS, clock=clock, max_open_files=max_open_files
    )


def test_the_cache_never_holds_more_than_its_bound(tmp_path: Path) -> None:
    cache = FileCache(16)
    paths = [tmp_path / f"{n:04d}.log" for n in range(40)]
    for n, path in enumerate(paths):
        path.write_bytes(n.to_bytes(4, "big") * 8)
    before = open_fds()
    opened = [FileRecords(path, cache=cache) for path in paths]
    assert cache.stats().open_files == 0, "existing files are opened on use only"
    for _ in range(3):
        for n, records in enumerate(opened):
            assert records.read(4, 4) == n.to_bytes(4, "big")
            stats = cache.stats()
            assert stats.open_files <= 16
            assert open_fds() - before <= 16
    stats = cache.stats()
    assert stats.evictions >= 40 * 3 - 16 and stats.misses == 40 * 3 and stats.overflows == 0
    assert opened[-1].read(0, 4) == (39).to_bytes(4, "big")
    assert cache.stats().hits == stats.hits + 1, "the most recent file stays open"
    for records in opened:
        records.close()
    assert cache.stats().open_files == 0 and open_fds() == before


def test_a_pinned_file_is_never_closed_and_the_cache_overflows_rather_than_wait(
    tmp_path: Path,
) -> None:
    cache = FileCache(16)
    files = [FileRecords(tmp_path / f"{n}.log", cache=cache) for n in range(20)]
    pinned = [f.acquire() for f in files[:16]]
    extra = files[16].acquire()
    assert cache.stats().overflows == 1 and cache.stats().open_files == 17
    for fd in [*pinned, extra]:
        os.fstat(fd)  # still open: nothing pinned was closed
    for f in files[:17]:
        f.release()
    with files[17].pinned():
        pass
    assert cache.stats().open_files <= 16, "the next open evicts the idle ones again"


def test_the_default_bound_leaves_half_of_the_soft_limit() -> None:
    assert default_max_open_files(4096) == 2048
    assert default_max_open_files(1 << 20) == 16_384
    assert default_max_open_files(20) == 16
    with pytest.raises(ValueError, match="at least 16"):
        FileCache(8)


def test_logs_with_many_segments_read_right_through_a_small_cache(
    tmp_path: Path, clock: ManualClock
) -> None:
    before = open_fds()
    with small_cache(tmp_path, clock) as manager:
        logs = [manager.get_or_create_log(TopicPartition("t", p)) for p in range(6)]
        for n in range(30):
            for log in logs:
                log.append(batch(2, start_ms=START_MS + n))
        assert all(len(log.segments) > 5 for log in logs)
        cache = manager.file_cache
        assert open_fds() - before <= 16 + 8  # the cache, the dirs' locks and checkpoints
        for log in logs:
            assert [r.offset for r in log.records()] == list(range(60))
            for offset in range(0, 60, 7):  # index lookups of evicted, reloaded indexes
                assert offsets_of(log.read(offset, 1).records)[0] <= offset
            # Batch n holds offsets 2n, 2n+1 at START_MS + n, + n + 1.
            found = log.offset_for_timestamp(START_MS + 17)
            assert found is not None and found.offset == 33
        assert cache.stats().open_files <= 16 and cache.stats().evictions > 0
    assert open_fds() == before


def test_a_clean_load_opens_only_the_active_segments(tmp_path: Path, clock: ManualClock) -> None:
    with LogManager([tmp_path], default_config=SMALL_SEGMENTS, clock=clock) as manager:
        for p in range(4):
            log = manager.get_or_create_log(TopicPartition("t", p))
            for n in range(20):
                log.append(batch(2, start_ms=START_MS + n))
        segments = sum(len(log.segments) for log in manager.logs.values())
    with LogManager([tmp_path], default_config=SMALL_SEGMENTS, clock=clock) as manager:
        # The active segment of each log: its log end offset and preallocated indexes.
        assert manager.file_cache.stats().misses <= 3 * 4 < segments
        log = manager.get_log(TopicPartition("t", 2))
        assert [r.offset for r in log.records()] == list(range(40))


def test_emfile_sheds_the_cache_and_the_open_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = FileCache(16)
    files = [FileRecords(tmp_path / f"{n}.log", cache=cache) for n in range(10)]
    for f in files:
        f.read(0, 1)
    real_open = file_cache_module.open_fd
    failures = [OSError(errno.EMFILE, "Too many open files")]

    def open_once_failing(path: Path, flags: int) -> int:
        if failures:
            raise failures.pop()
        return real_open(path, flags)

    monkeypatch.setattr(file_cache_module, "open_fd", open_once_failing)
    files[0].close()
    late = FileRecords(tmp_path / "late.log", cache=cache)
    late.read(0, 1)
    assert not late.closed
    stats = cache.stats()
    assert stats.sheds == 1 and stats.evictions >= 4 and stats.resource_errors == 0


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.ENOMEM])
def test_resource_errors_fail_the_request_only_and_never_the_dir(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    assert is_resource_exhausted(OSError(code, os.strerror(code)))
    with small_cache(tmp_path, clock) as manager:
        logs = [manager.get_or_create_log(TopicPartition("t", p)) for p in range(8)]
        for n in range(10):
            for log in logs:
                log.append(batch(2, start_ms=START_MS + n))
        real_open = file_cache_module.open_fd

        def exhausted(*_args: object) -> int:
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(file_cache_module, "open_fd", exhausted)
        # Segment 0 of every log was evicted long ago: reading it needs an open.
        with pytest.raises(ResourceExhaustedError, match="stays online"):
            logs[0].read(0, 1 << 20)
        real_os_open = os.open
        monkeypatch.setattr(os, "open", exhausted)
        manager.checkpoint_recovery_points_and_log_start_offsets()  # logged, retried later
        monkeypatch.setattr(os, "open", real_os_open)
        assert not any(log.offline for log in logs)
        assert manager.offline_dirs == [] and manager.dir_error(tmp_path.resolve()) is None
        assert manager.file_cache.stats().resource_errors >= 1
        monkeypatch.setattr(file_cache_module, "open_fd", real_open)
        assert [r.offset for r in logs[0].records()] == list(range(20))
        info = logs[0].append(batch(2, start_ms=START_MS + 99))
        assert info.first_offset == 20


def test_an_append_retried_after_a_resource_error_is_written_once(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    with small_cache(tmp_path, clock) as manager:
        logs = [manager.get_or_create_log(TopicPartition("t", p)) for p in range(8)]
        for n in range(10):
            for log in logs:
                log.append(batch(2, start_ms=START_MS + n))
        real_open = file_cache_module.open_fd
        # Two failures: the cache's own retry fails too, the Log sheds and appends again.
        failures = [OSError(errno.EMFILE, "Too many open files")] * 2

        def open_failing(path: Path, flags: int) -> int:
            if failures:
                raise failures.pop()
            return real_open(path, flags)

        manager.file_cache.set_max_open_files(16)
        manager.file_cache.shed(1.0)  # the active segment of log 0 must be opened again
        monkeypatch.setattr(file_cache_module, "open_fd", open_failing)
        info = logs[0].append(batch(2, start_ms=START_MS + 50))
        assert info.first_offset == 20 and not failures
        assert [r.offset for r in logs[0].records()] == list(range(22))


def descriptors_and_mappings(directory: Path) -> tuple[list[str], list[str]]:
    """Paths (relative to ``directory``) of the files under it that this process holds a
    descriptor of, and of those it maps (/proc/self/maps: what counts against
    vm.max_map_count)."""
    prefix = str(directory) + os.sep
    held = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own descriptor
            target = os.readlink(f"/proc/self/fd/{name}")
            if target.startswith(prefix):
                held.append(target.removeprefix(prefix))
    with open("/proc/self/maps") as maps:
        mapped = [
            line.split(maxsplit=5)[5].strip().removeprefix(prefix)
            for line in maps
            if len(line.split(maxsplit=5)) == 6 and line.split(maxsplit=5)[5].startswith(prefix)
        ]
    return held, mapped


def test_appended_to_indexes_hold_no_descriptor_and_only_active_ones_are_mapped(
    tmp_path: Path, clock: ManualClock
) -> None:
    with small_cache(tmp_path, clock) as manager:
        logs = [manager.get_or_create_log(TopicPartition("t", p)) for p in range(3)]
        for n in range(40):
            for log in logs:
                log.append(batch(2, start_ms=START_MS + n))
                segment = log.active_segment
                if segment.offset_index.entries:  # the native append or the general path
                    assert segment.offset_index.mapped is MAPPED
        assert all(len(log.segments) > 10 for log in logs)
        next_ms = START_MS + 40
        for log in logs:  # end with an entry in each active segment
            while not log.active_segment.offset_index.entries:
                log.append(batch(2, start_ms=next_ms))
                next_ms += 1
        held, mapped = descriptors_and_mappings(tmp_path.resolve())
        indexes = [name for name in held if name.endswith(("index", "timeindex"))]
        stats = manager.file_cache.stats()
        if MAPPED:
            assert indexes == [], "a mapped index keeps no descriptor"
            # Active segments' indexes (mapped by their first write), none of the rolled ones'.
            active = {
                str(index.path.relative_to(tmp_path.resolve()))
                for log in logs
                for index in (log.active_segment.offset_index, log.active_segment.time_index)
                if index.mapped
            }
            assert len(active) == 2 * len(logs) and set(mapped) == active == set(mapped)
            assert len(mapped) == len(active), "one mapping per index"
            logs_held = [name for name in held if name.endswith(".log")]
            assert stats.open_files == len(logs_held) <= 16, "the cache holds every one"
        else:
            assert mapped == [] and stats.open_files <= 16
        for log in logs:  # index lookups through mapped and read (unmapped) indexes agree
            end = log.log_end_offset
            assert [r.offset for r in log.records()] == list(range(end))
            for offset in range(0, end, 9):
                assert offsets_of(log.read(offset, 1).records)[0] <= offset
            assert sum(s.offset_index.mapped for s in log.segments) == (1 if MAPPED else 0)
    held, mapped = descriptors_and_mappings(tmp_path.resolve())
    assert held == [] and mapped == []


@pytest.mark.skipif(not MAPPED, reason="the index mapping extension is not loaded")
@pytest.mark.parametrize("failures", [1, 2])
def test_enomem_on_mapping_an_index_fails_the_append_only_and_never_the_dir(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, failures: int
) -> None:
    real = index_base._MAPPING
    assert real is not None
    left = [failures]

    def failing_mapping(path: Path) -> object:
        if left[0]:
            left[0] -= 1
            raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM), str(path))
        return real.Mapping(path)

    with small_cache(tmp_path, clock) as manager:
        log = manager.get_or_create_log(TopicPartition("t", 0))
        monkeypatch.setattr(index_base, "_MAPPING", SimpleNamespace(Mapping=failing_mapping))
        # The segment's first append maps its indexes, before anything is written.
        if failures == 2:  # the Log's retry fails too: this request fails, retriable
            with pytest.raises(ResourceExhaustedError, match="stays online"):
                log.append(batch(2, start_ms=START_MS))
            assert log.log_end_offset == 0 and log.active_segment.size_bytes == 0
        info = log.append(batch(2, start_ms=START_MS))
        assert left == [0], "the mapping failed as many times as asked"
        assert info.first_offset == 0 and log.active_segment.offset_index.mapped
        log.append(batch(2, start_ms=START_MS + 1))
        assert log.active_segment.offset_index.entries == 1
        assert not log.offline and manager.offline_dirs == []
        assert [r.offset for r in log.records()] == list(range(4))


# -- the active segments' files, held for appends (FileCache.hold_all) ------------------------
def held_segments(log: Log) -> list[int]:
    return [s.base_offset for s in log.segments if s.held_log is not None and s.held_log.held]


def test_the_bound_on_held_files_is_a_quarter_of_the_cache() -> None:
    assert max_held_files(16) == 4
    assert max_held_files(2048) == 512
    assert max_held_files(3) == 1


def test_appends_hold_the_active_segment_and_a_roll_moves_the_hold(
    tmp_path: Path, clock: ManualClock
) -> None:
    with small_cache(tmp_path, clock, 64) as manager:
        log = manager.get_or_create_log(TopicPartition("t", 0))
        cache = manager.file_cache
        log.append(batch(2, start_ms=START_MS))
        active = log.segments[-1]
        assert held_segments(log) == [active.base_offset]
        assert active.held_log is not None and active.held_log.users == 1
        stats = cache.stats()
        assert stats.held_files == stats.pinned_files == len(active._held) >= 1
        while len(log.segments) == 1:
            log.append(batch(2, start_ms=START_MS))
        # The roll released the old segment; the next append holds the new one.
        assert held_segments(log) == [] and cache.stats().held_files == 0
        assert active.held_log is None and all(not h.held for h in active._handles or ())
        log.append(batch(2, start_ms=START_MS))
        assert held_segments(log) == [log.segments[-1].base_offset]
        assert cache.stats().held_files == len(log.segments[-1]._held)
        assert [r.offset for r in log.records()] == list(range(log.log_end_offset))
    assert cache.stats().held_files == 0 and cache.stats().pinned_files == 0


def test_no_more_than_the_bound_is_held_and_the_rest_pin_per_append(
    tmp_path: Path, clock: ManualClock
) -> None:
    before = open_fds()
    with small_cache(tmp_path, clock) as manager:
        logs = [manager.get_or_create_log(TopicPartition("t", p)) for p in range(10)]
        cache = manager.file_cache
        for n in range(20):
            for log in logs:
                log.append(batch(2, start_ms=START_MS + n))
                stats = cache.stats()
                assert stats.held_files <= max_held_files(16)
                assert stats.open_files <= 16
        held = [log for log in logs if held_segments(log)]
        assert 0 < cache.stats().held_files <= max_held_files(16)
        assert len(held) < len(logs), "past the bound, appends pin per call"
        for log in logs:
            assert [r.offset for r in log.records()] == list(range(40))
        # Only the held files stay pinned between appends.
        assert cache.stats().pinned_files == cache.stats().held_files
    assert open_fds() == before


def test_closing_a_held_file_ends_its_hold(tmp_path: Path) -> None:
    cache = FileCache(16)
    path = tmp_path / "0.log"
    path.write_bytes(b"x")
    handle = cache.file(path, os.O_RDWR)
    assert cache.hold_all((handle,)) and handle.held and handle.fd >= 0
    assert cache.hold_all((handle,)), "held twice is held once"
    assert cache.stats().held_files == 1 and handle.users == 1
    handle.close()
    assert not handle.held and handle.fd == -1 and handle.users == 0
    assert cache.stats().held_files == 0 and cache.stats().open_files == 0
    cache.release_held((handle,))  # a release after the close changes nothing
    assert cache.stats().held_files == 0


def test_a_full_hold_budget_pins_nothing(tmp_path: Path) -> None:
    cache = FileCache(16)
    handles = []
    for n in range(5):
        path = tmp_path / f"{n}.log"
        path.write_bytes(b"x")
        handles.append(cache.file(path, os.O_RDWR))
    for handle in handles[:4]:
        assert cache.hold_all((handle,))
    assert not cache.hold_all((handles[4],))
    assert handles[4].users == 0 and handles[4].fd == -1 and not handles[4].held
    cache.release_held(tuple(handles[:1]))
    assert cache.hold_all((handles[4],)) and cache.stats().held_files == 4


@pytest.mark.parametrize("how", ["delete_every_segment", "bulk_append"])
def test_appends_after_the_held_segment_goes_write_to_the_new_one(
    tmp_path: Path, clock: ManualClock, how: str
) -> None:
    with small_cache(tmp_path, clock, 64) as manager:
        log = manager.get_or_create_log(TopicPartition("t", 0))
        log.append(batch(2, start_ms=START_MS))
        held = log.segments[-1]
        assert held_segments(log) == [held.base_offset]
        if how == "delete_every_segment":  # rolls first, then deletes the held segment
            log.delete_segments(list(log.segments), "test")
            expected = [2, 3, 4, 5]
        else:  # swaps the bulk-appended segments in for the (held) active one
            log.bulk_append([batch(2, start_ms=START_MS + 1)])
            expected = [0, 1, 2, 3, 4, 5, 6, 7]
        log.append(batch(2, start_ms=START_MS + 20))
        assert held_segments(log) == [log.segments[-1].base_offset]
        log.append(batch(2, start_ms=START_MS + 21))
        if held not in log.segments:
            assert held.held_log is None, "a segment that left the log holds nothing"
        assert [r.offset for r in log.records()] == expected
        assert manager.file_cache.stats().held_files == len(log.segments[-1]._held)
    assert manager.file_cache.stats().held_files == 0
