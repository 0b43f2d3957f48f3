"""The active segment's files held for appends (storagecore.file_cache: ``hold_all``): held from
one append to the next, released when the segment stops being active or closes, never more than
a quarter of the cache's bound, and closing a held file ends its hold."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storagecore import LogConfig, LogManager, ManualClock, TopicPartition
from storagecore.file_cache import FileCache, max_held_files
from storagecore.log import Log
from tests.conftest import START_MS, batch

SMALL_SEGMENTS = LogConfig(segment_bytes=400, index_interval_bytes=1)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def held_segments(log: Log) -> list[int]:
    return [s.base_offset for s in log.segments if s.held_log is not None and s.held_log.held]


def test_the_bound_on_held_files_is_a_quarter_of_the_cache() -> None:
    assert max_held_files(16) == 4
    assert max_held_files(2048) == 512
    assert max_held_files(3) == 1


def test_appends_hold_the_active_segment_and_a_roll_moves_the_hold(
    tmp_path: Path, clock: ManualClock
) -> None:
    with LogManager(
        [tmp_path], default_config=SMALL_SEGMENTS, clock=clock, max_open_files=64
    ) as manager:
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
    with LogManager(
        [tmp_path], default_config=SMALL_SEGMENTS, clock=clock, max_open_files=16
    ) as manager:
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
    with LogManager(
        [tmp_path], default_config=SMALL_SEGMENTS, clock=clock, max_open_files=64
    ) as manager:
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
