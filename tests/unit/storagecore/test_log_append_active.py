"""Log.append's common case in one native call (``storagecore.native_append.append_active``,
storagecore/records/_log_append.c): what it takes, what it leaves to the general steps (having
done nothing), its lock, its flush, and its errors.

That it writes what the general steps write is test_log_append_native.py's: its native twin
appends through this call.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

import pytest

from storagecore import (
    Compression,
    LogConfig,
    LogManager,
    ManualClock,
    StorageError,
    TopicPartition,
    build_batch,
    native_append,
)
from storagecore.clock import SystemClock
from storagecore.errors import LogDirFullError
from storagecore.file_cache import CachedFile, OpenFile
from storagecore.local_log import LocalLog
from storagecore.log import Log
from storagecore.log_info import LogAppendInfo
from storagecore.log_validator import AppendOrigin
from storagecore.producer_state import ProducerStateManager
from storagecore.records import codecs
from storagecore.segment import LogSegment
from tests.conftest import START_MS, batch, records

active = native_append.append_active
pytestmark = pytest.mark.skipif(active is None, reason="native speed-up not built")


def _log(manager: LogManager, partition: int = 0) -> Log:
    log = manager.get_or_create_log(TopicPartition("t", partition))
    log.append(batch(1))  # the general steps hold the active segment's files
    return log


def _call(log: Log, data: bytes) -> LogAppendInfo | None:
    assert active is not None
    return active(log, data)


def test_a_plain_request_is_appended_in_one_call(tmp_path: Path, clock: ManualClock) -> None:
    with LogManager([tmp_path], clock=clock) as manager:
        log = _log(manager)
        info = _call(log, batch(3, start_ms=START_MS + 5))
        assert isinstance(info, LogAppendInfo)
        assert (info.first_offset, info.last_offset, info.record_count) == (1, 3, 3)
        assert info.max_timestamp == START_MS + 7 and info.log_append_time == -1
        assert info.log_start_offset == 0 and info.duplicate is False
        assert log.log_end_offset == 4 and log.producer_state.map_end_offset == 4
        assert [r.offset for r in log.records()] == [0, 1, 2, 3]


def test_lz4_batches_are_appended_in_one_call_too(tmp_path: Path, clock: ManualClock) -> None:
    if codecs._native_lz4() is None:  # also tells the extension its decoder may serve
        pytest.skip("the extension's LZ4 decoder is not the lz4 package's")
    with LogManager([tmp_path], clock=clock) as manager:
        log = _log(manager)
        info = _call(log, batch(40, compression=Compression.LZ4))
        assert info is not None and (info.first_offset, info.last_offset) == (1, 40)
        assert [r.offset for r in log.records()] == list(range(41))
    config = LogConfig(compression_type="lz4")  # the producer's codec not kept: recompression
    with LogManager([tmp_path / "other"], clock=clock, default_config=config) as manager:
        log = _log(manager)
        assert _call(log, batch(4, compression=Compression.LZ4)) is None


def test_what_the_call_leaves_to_the_general_steps_it_does_not_touch(
    tmp_path: Path, clock: ManualClock
) -> None:
    with LogManager([tmp_path], clock=clock) as manager:
        log = _log(manager)
        producer = build_batch(records(2), producer_id=7, producer_epoch=0, base_sequence=0)
        left = {
            "producer ids": producer,
            "gzip": batch(2, compression=Compression.GZIP),
            "not a batch": b"\x00" * 10,
            "a corrupt batch": batch(2)[:-3],
        }
        for what, data in left.items():
            assert _call(log, data) is None, what
            assert log.log_end_offset == 1, what
        log.roll()  # the new active segment is not held until the general steps hold it
        assert _call(log, batch(1)) is None and log.log_end_offset == 1
        log.append(batch(1))
        assert _call(log, batch(1)) is not None and log.log_end_offset == 3
        with pytest.MonkeyPatch.context() as patch:  # the native append turned off
            patch.setattr(native_append, "append_to_segment", None)
            assert _call(log, batch(1)) is None and log.log_end_offset == 3
        log.close()
        assert _call(log, batch(1)) is None
        with pytest.raises(StorageError, match="closed"):
            log.append(batch(1))


def test_replication_and_a_manual_clock_take_their_own_ways(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[object] = []

    def counted(log: Log, data: bytes) -> LogAppendInfo | None:
        calls.append(log)
        return _call(log, data)

    monkeypatch.setattr(native_append, "append_active", counted)
    with LogManager([tmp_path], clock=clock) as manager:
        log = _log(manager)
        log.append(build_batch(records(1), base_offset=1), origin=AppendOrigin.REPLICATION)
        assert calls == [log], "a follower's append is the general steps'"
        clock.advance(10_000_000)  # a timestamp this far behind the clock is refused
        late = build_batch(records(1, start_ms=START_MS))
        config = LogConfig(message_timestamp_before_max_ms=1_000)
        log.update_config(config)
        with pytest.raises(StorageError, match="timestamp"):
            log.append(late)
        assert log.log_end_offset == 2, "the manual clock's time, not the system's, was used"


def test_the_system_clock_is_read_without_calling_it(tmp_path: Path) -> None:
    config = LogConfig(message_timestamp_before_max_ms=60_000)
    with LogManager([tmp_path], clock=SystemClock(), default_config=config) as manager:
        log = manager.get_or_create_log(TopicPartition("t", 0))
        now = SystemClock().milliseconds()
        log.append(build_batch(records(1, start_ms=now)))  # held; rolls by time from now
        assert _call(log, build_batch(records(1, start_ms=now))) is not None
        assert _call(log, build_batch(records(1, start_ms=now - 3_600_000))) is None
        with pytest.raises(StorageError, match="timestamp"):
            log.append(build_batch(records(1, start_ms=now - 3_600_000)))


def test_flush_messages_flushes_after_the_write(tmp_path: Path, clock: ManualClock) -> None:
    config = LogConfig(flush_messages=3)
    with LogManager([tmp_path], clock=clock, default_config=config) as manager:
        log = _log(manager)
        assert _call(log, batch(1)) is not None and log.recovery_point == 0
        assert _call(log, batch(1)) is not None and log.recovery_point == 3


def test_a_failed_flush_fails_the_append_once_and_releases_the_lock(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = LogConfig(flush_messages=1)
    with LogManager([tmp_path], clock=clock, default_config=config) as manager:
        log = _log(manager)

        def failing_flush(offset: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(log._local, "flush", failing_flush)
        with pytest.raises(StorageError, match="flush t-0 after an append"):
            log.append(batch(1))
        assert log.log_end_offset == 2, "written once, not retried"
        assert log.offline
        done = threading.Event()
        worker = threading.Thread(target=lambda: (log.log_start_offset, done.set()))
        worker.start()
        worker.join(timeout=30)
        assert done.is_set(), "the log's lock was released"


def test_a_write_error_leaves_the_request_to_the_general_steps(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = native_append.append_to_segment
    assert real is not None
    calls: list[int] = []

    def full_disk(*args: Any) -> Any:
        calls.append(1)
        raise OSError(errno.ENOSPC, "No space left on device")

    with LogManager([tmp_path], clock=clock) as manager:
        log = _log(manager)
        monkeypatch.setattr(native_append, "append_to_segment", full_disk)
        with pytest.raises(LogDirFullError, match="nothing was written"):
            log.append(batch(1))
        assert len(calls) == 2, "the one call, then the general steps' own try"
        assert not log.offline and log.log_end_offset == 1
        monkeypatch.setattr(native_append, "append_to_segment", real)
        assert log.append(batch(1)).first_offset == 1


def test_other_errors_propagate_and_release_the_lock(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("a bug in the native append")

    with LogManager([tmp_path], clock=clock) as manager:
        log = _log(manager)
        monkeypatch.setattr(native_append, "append_to_segment", broken)
        with pytest.raises(RuntimeError, match="a bug"):
            _call(log, batch(1))
        acquired = log._lock.acquire(timeout=30)
        assert acquired, "the log's lock was released"
        log._lock.release()


def test_appends_from_many_threads_get_distinct_contiguous_offsets(
    tmp_path: Path, clock: ManualClock
) -> None:
    threads, per_thread, size = 4, 150, 3
    with LogManager([tmp_path], clock=clock) as manager:
        log = _log(manager)
        infos: list[LogAppendInfo] = []
        lock = threading.Lock()

        def run() -> None:
            for _ in range(per_thread):
                info = log.append(batch(size))
                with lock:
                    infos.append(info)

        workers = [threading.Thread(target=run) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        firsts = sorted(info.first_offset for info in infos)
        assert firsts == list(range(1, 1 + threads * per_thread * size, size))
        assert [r.offset for r in log.records()] == list(range(1 + threads * per_thread * size))


def test_the_attributes_the_call_reaches_directly_are_slots() -> None:
    """As test_log_append_native's test of the native append's own: LOG_APPEND_SLOTS name the
    attributes read at their __slots__ offsets; each is a slot where the call reads it."""
    from storagecore.records import _native  # only with the extension, as this module

    owners: dict[str, tuple[type, ...]] = {
        "_lock": (Log,),
        "_local": (Log,),
        "clock": (Log,),
        "leader_epoch": (Log,),
        "producer_state": (Log,),
        "_log_start_offset": (Log,),
        "offline": (LocalLog,),
        "closed": (LocalLog,),
        "segments": (LocalLog,),
        "native_append": (LocalLog,),
        "recovery_point": (LocalLog,),
        "flush_messages": (LocalLog,),
        "held_log": (LogSegment,),
        "held": (CachedFile, OpenFile),
        "fd": (CachedFile, OpenFile),
        "map_end_offset": (ProducerStateManager,),
    }
    assert sorted(_native.LOG_APPEND_SLOTS) == sorted(owners)
    for name, classes in owners.items():
        for owner in classes:
            assert type(vars(owner).get(name)).__name__ == "member_descriptor", (name, owner)
