"""The cleaned segment's write-behind (storagecore.durability.WriteBehind): its data is synced
on a thread while the filter pass writes it, so the swap's fsync finds little left. It changes
no byte of the output, replaces no fsync of the protocol, and a sync that fails fails the
round as the protocol's own fsync would (the ``.cleaned`` files removed, the log untouched)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from storagecore import Log, LogConfig, ManualClock, NewRecord, build_batch, files
from storagecore.cleaner import Cleaner, CleanRequest
from storagecore.cleaner import cleaner as cleaner_module
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from storagecore.durability import WriteBehind
from tests.conftest import START_MS

COMPACT = LogConfig(cleanup_policy=("compact",), segment_bytes=1 << 20, index_interval_bytes=256)


def written_log(directory: Path, clock: ManualClock) -> Log:
    """Two segments of 3,000 records over 200 keys: a round keeps 200 of them."""
    log = Log.open(directory, COMPACT, clock)
    for first in range(0, 3000, 30):
        batch = [
            NewRecord(key=b"key-%d" % ((first + i) % 200), value=b"v" * 50, timestamp=START_MS)
            for i in range(30)
        ]
        log.append(build_batch(batch))
        if first == 1500:
            log.roll()
    log.roll()
    return log


def clean(log: Log) -> None:
    cleaner = Cleaner(offset_map=SkimpyOffsetMap(24 * 1024))
    cleaner.clean(CleanRequest(log, 0, log.active_segment.base_offset), START_MS)


def log_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.suffix == ".log"}


def test_syncs_start_past_every_bytes_and_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    release = threading.Event()
    synced: list[int] = []

    def slow_fdatasync(fd: int) -> None:
        synced.append(fd)
        release.wait(5)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    behind = WriteBehind(path, every_bytes=10)
    behind.written(9)
    assert behind.close() is None and synced == []  # below every_bytes: nothing started
    behind.written(10)
    behind.written(25)  # the first sync still runs: no second one
    release.set()
    assert behind.close() is None
    assert len(synced) == 1
    behind.written(30)  # 10 + 10 reached: the next one
    assert behind.close() is None
    assert len(synced) == 2


def test_close_returns_what_the_sync_failed_with(tmp_path: Path) -> None:
    behind = WriteBehind(tmp_path / "gone", every_bytes=1)
    behind.written(1)
    assert isinstance(behind.close(), FileNotFoundError)
    assert behind.close() is None  # reported once


def test_a_clean_with_write_behind_writes_the_same_bytes(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = written_log(tmp_path / "plain" / "t-0", clock)
    plain.close()
    shutil.copytree(tmp_path / "plain", tmp_path / "behind")
    synced: list[str] = []
    real_fdatasync = os.fdatasync

    def recording_fdatasync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fdatasync(fd)

    log = Log.open(tmp_path / "plain" / "t-0", COMPACT, clock)
    clean(log)  # the standard 2 MiB: this small output never reaches it
    log.close()
    monkeypatch.setattr(cleaner_module, "WRITE_BEHIND_BYTES", 1)
    monkeypatch.setattr(os, "fdatasync", recording_fdatasync)
    log = Log.open(tmp_path / "behind" / "t-0", COMPACT, clock)
    clean(log)
    log.close()
    assert synced and all(p.endswith(".log" + files.CLEANED_SUFFIX) for p in synced)
    assert log_bytes(tmp_path / "behind" / "t-0") == log_bytes(tmp_path / "plain" / "t-0")


def test_a_failed_write_behind_sync_fails_the_round(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = written_log(tmp_path / "t-0", clock)
    before = log_bytes(log.directory)

    def failing_fdatasync(_fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(cleaner_module, "WRITE_BEHIND_BYTES", 1)
    monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
    with pytest.raises(OSError, match="Input/output error"):
        clean(log)
    assert log_bytes(log.directory) == before
    assert not [p for p in log.directory.iterdir() if p.name.endswith(files.CLEANED_SUFFIX)]
    log.close()
