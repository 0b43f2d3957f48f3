"""The writer side of the clean-and-swap protocol (``Log.replace_segments``).

Every rename of the protocol is made to crash in turn (the process "dies" right before it), the
log is reloaded as after a crash, and it must read exactly as before or exactly as after the
swap: never both, never neither.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from storagecore import Log, LogConfig, ManualClock, durability, files
from storagecore.tools.verify import verify_log_dir
from tests.conftest import START_MS, batch
from tests.integration.storagecore.helpers.cleaning import cleaned_copy, offsets_after_swap

pytestmark = pytest.mark.integration

CONFIG = LogConfig(
    segment_bytes=1024, index_interval_bytes=64, segment_index_bytes=4096, file_delete_delay_ms=1000
)


class Crash(BaseException):
    """The process dies: not an OSError, so nothing in storagecore handles it."""


def setup_log(directory: Path, clock: ManualClock) -> tuple[Log, list[int], list[int]]:
    log = Log.open(directory, CONFIG, clock)
    for i in range(30):
        log.append(batch(2, value_size=30, start_ms=START_MS + i * 10, key_prefix=f"b{i}"))
    log.flush()
    original = [r.offset for r in log.records()]
    return log, original, offsets_after_swap(log, log.segments[:3])


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_replace_segments(tmp_path: Path, clock: ManualClock) -> None:
    directory = tmp_path / "t-0"
    log, original, expected = setup_log(directory, clock)
    olds = log.segments[:3]
    new = cleaned_copy(directory, olds, files.CLEANED_SUFFIX, close=False)
    log.replace_segments(new, olds)
    assert [r.offset for r in log.records()] == expected != original
    assert [s.base_offset for s in log.segments[:3]] == [s.base_offset for s in olds]
    assert not any(n.endswith((".cleaned", ".swap")) for n in names(directory))
    assert sum(n.endswith(".log.deleted") for n in names(directory)) == 3
    clock.advance(1000)
    assert log.delete_expired_files() == 3
    log.close()
    reloaded = Log.open(directory, CONFIG, clock, had_clean_shutdown=True)
    assert [r.offset for r in reloaded.records()] == expected
    reloaded.close()
    assert verify_log_dir(directory).ok


class CrashingRename:
    """``durability.rename`` that counts the renames and dies before rename number ``crash_at``
    (never, when None)."""

    def __init__(self, crash_at: int | None = None) -> None:
        self.crash_at = crash_at
        self.calls = 0
        self.real = durability.rename

    def __call__(self, source: Path, target: Path, *, sync_parent: bool = False) -> None:
        if self.calls == self.crash_at:
            raise Crash
        self.calls += 1
        self.real(source, target, sync_parent=sync_parent)


def test_a_crash_before_any_rename_of_the_protocol_leaves_old_or_new(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = CrashingRename()
    log, _, _ = setup_log(tmp_path / "count-0", clock)
    olds = log.segments[:3]
    new = cleaned_copy(tmp_path / "count-0", olds, files.CLEANED_SUFFIX, close=False)
    with monkeypatch.context() as patch:
        patch.setattr(durability, "rename", counter)
        log.replace_segments(new, olds)
    total = counter.calls
    assert total == 3 * 3 * 3  # 3 segments x 3 files x (.swap, .deleted, strip .swap)
    outcomes = set()
    for crash_at in range(total + 1):
        directory = tmp_path / f"t{crash_at}-0"
        log, original, expected = setup_log(directory, clock)
        olds = log.segments[:3]
        new = cleaned_copy(directory, olds, files.CLEANED_SUFFIX, close=False)
        with monkeypatch.context() as patch, contextlib.suppress(Crash):
            patch.setattr(durability, "rename", CrashingRename(crash_at))
            log.replace_segments(new, olds)
        log.close_handles()
        for segment in new:
            segment.close_handles()
        reloaded = Log.open(directory, CONFIG, clock, had_clean_shutdown=False)
        got = [r.offset for r in reloaded.records()]
        assert got in (original, expected), f"crash before rename {crash_at}: a mix"
        outcomes.add("old" if got == original else "new")
        assert not any(n.endswith((".cleaned", ".swap", ".deleted")) for n in names(directory))
        reloaded.close()
        assert verify_log_dir(directory).ok, crash_at
    assert outcomes == {"old", "new"}


def test_the_active_segment_is_never_replaced(tmp_path: Path, clock: ManualClock) -> None:
    directory = tmp_path / "t-0"
    log, _, _ = setup_log(directory, clock)
    with pytest.raises(AssertionError, match="active segment is never replaced"):
        log.replace_segments(
            cleaned_copy(directory, [log.segments[0]], files.CLEANED_SUFFIX, close=False),
            [log.segments[0], log.active_segment],
        )


def test_replacements_must_be_cleaned_files_inside_the_old_range(
    tmp_path: Path, clock: ManualClock
) -> None:
    directory = tmp_path / "t-0"
    log, _, _ = setup_log(directory, clock)
    olds = log.segments[:2]
    wrong_suffix = cleaned_copy(directory, olds[:1], files.SWAP_SUFFIX, close=False)
    with pytest.raises(AssertionError, match=r"\.swap"):
        log.replace_segments(wrong_suffix, olds)
    outside = cleaned_copy(directory, [log.segments[2]], files.CLEANED_SUFFIX, close=False)
    with pytest.raises(AssertionError, match="outside"):
        log.replace_segments(outside, olds)


def _compacted_log(directory: Path, clock: ManualClock) -> Log:
    config = LogConfig(
        cleanup_policy=("compact",),
        segment_bytes=600,
        index_interval_bytes=64,
        segment_index_bytes=4096,
        file_delete_delay_ms=1000,
    )
    log = Log.open(directory, config, clock)
    for i in range(60):
        log.append(batch(1, value_size=20, start_ms=START_MS + i, key_prefix=f"k{i % 4}"))
    log.roll()
    log.flush()
    return log


def test_a_real_clean_crashing_before_any_rename_reads_as_before_or_after(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cleaner's own output (several groups, each swapped in turn), crashed at every
    rename: after reload each group reads as all old or all new, so the log is a valid state
    between "before" and "after" and the latest record of every key is there."""
    from storagecore.cleaner import Cleaner, CleanRequest
    from storagecore.cleaner.offset_map import SkimpyOffsetMap

    def clean(log: Log) -> None:
        end = log.active_segment.base_offset
        Cleaner(offset_map=SkimpyOffsetMap(2400)).clean(CleanRequest(log, 0, end))

    counter = CrashingRename()
    log = _compacted_log(tmp_path / "count-0", clock)
    original = [(r.offset, r.key, r.value) for r in log.records()]
    with monkeypatch.context() as patch:
        patch.setattr(durability, "rename", counter)
        clean(log)
    after = [(r.offset, r.key, r.value) for r in log.records()]
    total = counter.calls
    assert total >= 9 and after != original
    latest = {key: (offset, key, value) for offset, key, value in original}
    outcomes = set()
    for crash_at in range(total + 1):
        directory = tmp_path / f"t{crash_at}-0"
        log = _compacted_log(directory, clock)
        with monkeypatch.context() as patch, contextlib.suppress(Crash):
            patch.setattr(durability, "rename", CrashingRename(crash_at))
            clean(log)
        log.close_handles()
        reloaded = Log.open(directory, log.config, clock, had_clean_shutdown=False)
        got = [(r.offset, r.key, r.value) for r in reloaded.records()]
        assert set(got) <= set(original), f"crash before rename {crash_at}: invented records"
        assert set(latest.values()) <= set(got), f"crash before rename {crash_at}: lost latest"
        assert set(after) <= set(got)
        outcomes.add("old" if got == original else "new" if got == after else "partway")
        assert not any(n.endswith((".cleaned", ".swap", ".deleted")) for n in names(directory))
        reloaded.close()
        assert verify_log_dir(directory).ok, crash_at
    assert {"old", "new"} <= outcomes
