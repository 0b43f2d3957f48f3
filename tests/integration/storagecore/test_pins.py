"""Read pins (``storagecore.pins``): hard links that keep a reader's planned segments readable
while the worker cleans and deletes them, and the sweep that removes pins whose lease passed."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from pathlib import Path

import pytest

from storagecore import Log, LogConfig, LogManager, ManualClock, durability, files, pins
from storagecore.config import TopicPartition
from storagecore.tools.verify import verify_log_dir
from tests.conftest import START_MS, batch
from tests.integration.storagecore.helpers.cleaning import cleaned_copy
from tests.integration.storagecore.test_replace_segments import Crash, CrashingRename

pytestmark = pytest.mark.integration

CONFIG = LogConfig(
    segment_bytes=1024, index_interval_bytes=64, segment_index_bytes=4096, file_delete_delay_ms=0
)
TP = TopicPartition("t", 0)


def setup_log(data_dir: Path, clock: ManualClock, config: LogConfig = CONFIG) -> Log:
    log = Log.open(data_dir / "t-0", config, clock)
    for i in range(60):
        log.append(batch(2, value_size=30, start_ms=START_MS + i * 10, key_prefix=f"b{i}"))
    log.flush()
    return log


def inode(path: Path) -> int:
    return os.stat(path).st_ino


def pin_all(pin_set: pins.PinSet, log: Log) -> dict[Path, bytes]:
    """Pin every segment; the pinned path -> the bytes the segment held when pinned."""
    pinned: dict[Path, bytes] = {}
    for segment in log.segments:
        path = segment.log.path
        target = pins.pin_segment(pin_set, TP, path, inode(path))
        assert target is not None
        pinned[target] = path.read_bytes()
    return pinned


def test_pins_keep_cleaned_and_deleted_segments_readable_until_released(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = setup_log(tmp_path, clock)
    pin_set = pins.create_pin_set(tmp_path, START_MS + 60_000)
    pinned = pin_all(pin_set, log)
    assert pins.pinned_bytes(tmp_path) == 0  # the log still links every pinned file
    # The cleaner replaces the first three segments, then retention deletes the next two;
    # file.delete.delay.ms is 0, so their .deleted names go at once.
    olds = log.segments[:3]
    gone = {s.base_offset for s in log.segments[:5]}
    log.replace_segments(cleaned_copy(log.directory, olds, files.CLEANED_SUFFIX), olds)
    log.maybe_increment_log_start_offset(log.segments[5].base_offset, "test")
    log.delete_old_segments()
    log.delete_expired_files(force=True)
    assert not list(log.directory.glob("*.deleted"))
    assert {s.base_offset for s in log.segments}.isdisjoint(gone - {s.base_offset for s in olds})
    for target, data in pinned.items():
        assert target.read_bytes()[: len(data)] == data, target
    # The five replaced or deleted originals (and their index files) are held only by pins.
    orphaned = [p for p in pin_set.path.rglob("*") if p.is_file() and p.stat().st_nlink == 1]
    assert {files.offset_from_file_name(p.name) for p in orphaned} == gone
    assert pins.pinned_bytes(tmp_path) == sum(p.stat().st_size for p in orphaned) > 0
    pins.release(pin_set)
    assert not pin_set.path.exists() and pins.pinned_bytes(tmp_path) == 0
    log.close()
    assert verify_log_dir(tmp_path).ok


def test_pinning_at_every_step_of_a_swap_links_only_the_planned_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker dies (stops) before each rename of its clean-and-swap protocol in turn; a
    reader pinning the first segment then gets the planned inode (with its own index files, or
    none) or is told to list again, never a successor's file."""
    delayed = dataclasses.replace(CONFIG, file_delete_delay_ms=60_000)

    def run(crash_at: int | None) -> tuple[Log, CrashingRename, dict[str, int], bytes]:
        data_dir = tmp_path / f"step{crash_at}"
        log = setup_log(data_dir, ManualClock(START_MS), delayed)
        first = log.segments[0]
        planned = {
            suffix: inode(first.log.path.with_name(files.filename_prefix(0) + suffix))
            for suffix in (files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX)
        }
        planned_bytes = first.log.path.read_bytes()
        olds = log.segments[:3]
        new = cleaned_copy(log.directory, olds, files.CLEANED_SUFFIX, close=False)
        crashing = CrashingRename(crash_at)
        monkeypatch.setattr(durability, "rename", crashing)
        with contextlib.suppress(Crash):
            log.replace_segments(new, olds)
        monkeypatch.setattr(durability, "rename", crashing.real)
        return log, crashing, planned, planned_bytes

    log, crashing, _planned, _data = run(None)
    renames = crashing.calls
    log.close()
    assert renames >= 12  # 3 segments x 4 files, twice (.cleaned -> .swap -> final) + .deleted
    for crash_at in range(renames + 1):
        log, crashing, planned, planned_bytes = run(crash_at)
        path = log.directory / (files.filename_prefix(0) + files.LOG_SUFFIX)
        pin_set = pins.create_pin_set(log.directory.parent, START_MS)
        target = pins.pin_segment(pin_set, TP, path, planned[files.LOG_SUFFIX])
        # Every file of the segment exists under its name or its .deleted name at every step.
        assert target is not None, f"step {crash_at}"
        assert inode(target) == planned[files.LOG_SUFFIX]
        assert target.read_bytes() == planned_bytes
        for suffix in (files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX):
            index = target.with_name(files.filename_prefix(0) + suffix)
            if index.exists():
                assert inode(index) == planned[suffix], f"step {crash_at}: {suffix}"
        log.close()


def test_a_segment_gone_from_both_names_is_not_pinned(tmp_path: Path, clock: ManualClock) -> None:
    log = setup_log(tmp_path, clock)
    path = log.segments[0].log.path
    planned = inode(path)
    pin_set = pins.create_pin_set(tmp_path, START_MS)
    olds = log.segments[:1]
    log.replace_segments(cleaned_copy(log.directory, olds, files.CLEANED_SUFFIX), olds)
    log.delete_expired_files(force=True)
    # The name now holds the cleaned successor: a different inode, so no pin and no leftovers.
    assert pins.pin_segment(pin_set, TP, path, planned) is None
    assert not any(p.is_file() for p in pin_set.path.rglob("*"))
    # From the .deleted name (within the delay) the pin has no index files (see pin_segment).
    other = log.segments[1].log.path
    planned_other = inode(other)
    olds = log.segments[1:2]
    log.update_config(dataclasses.replace(CONFIG, file_delete_delay_ms=60_000))
    log.replace_segments(cleaned_copy(log.directory, olds, files.CLEANED_SUFFIX), olds)
    target = pins.pin_segment(pin_set, TP, other, planned_other)
    assert target is not None and inode(target) == planned_other
    assert sorted(p.name for p in target.parent.iterdir()) == [other.name]
    log.close()


def test_sweep_removes_expired_sets_only_and_leaves_foreign_names(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = pins.create_pin_set(tmp_path, START_MS - 1)
    live = pins.create_pin_set(tmp_path, START_MS + 1)
    foreign = tmp_path / files.PINS_DIR / "not-a-pin-set"
    foreign.mkdir()
    with caplog.at_level(logging.WARNING):
        assert pins.sweep_expired(tmp_path, START_MS) == 1
    assert not old.path.exists() and live.path.exists() and foreign.exists()
    assert "not-a-pin-set: not a pin set; left alone" in caplog.text
    assert pins.open_pin_set(live.path) == live
    with pytest.raises(ValueError, match="is not a pin set"):
        pins.open_pin_set(foreign)
    with pytest.raises(FileNotFoundError, match="released or expired"):
        pins.open_pin_set(old.path)
    assert pins.sweep_expired(tmp_path / "elsewhere", START_MS) == 0  # no pins dir at all


def test_the_log_manager_and_verify_skip_the_pipeline_dirs(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    log = setup_log(tmp_path, clock)
    pin_all(pins.create_pin_set(tmp_path, START_MS), log)
    log.close()
    (tmp_path / files.STAGING_DIR / "job").mkdir(parents=True)
    with caplog.at_level(logging.WARNING), LogManager([tmp_path], clock=clock) as manager:
        assert list(manager.logs) == [TP]
    assert "not a partition directory" not in caplog.text
    report = verify_log_dir(tmp_path)
    assert report.ok and [p.tp for p in report.partitions] == [TP]
