"""``Log.bulk_append``: all or nothing, also when the process dies at any rename of it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from storagecore import Log, LogConfig, ManualClock, durability
from storagecore.errors import RecordTooLargeError
from storagecore.tools.verify import verify_log_dir
from tests.conftest import START_MS, batch
from tests.integration.storagecore.test_replace_segments import Crash, CrashingRename, names

pytestmark = pytest.mark.integration

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=64, segment_index_bytes=4096)


def setup_log(directory: Path, clock: ManualClock) -> tuple[Log, list[int]]:
    log = Log.open(directory, CONFIG, clock)
    for i in range(12):
        log.append(batch(2, value_size=30, start_ms=START_MS + i * 10, key_prefix=f"b{i}"))
    log.flush()
    return log, [r.offset for r in log.records()]


def bulk() -> list[bytes]:
    # Offsets inside are ignored: bulk_append assigns them from the log end.
    return [
        batch(3, value_size=40, start_ms=START_MS + 10_000 + i, key_prefix=f"n{i}")
        for i in range(20)
    ]


def test_bulk_append_assigns_offsets_rolls_segments_and_reloads(
    tmp_path: Path, clock: ManualClock
) -> None:
    log, original = setup_log(tmp_path / "t-0", clock)
    info = log.bulk_append(bulk())
    assert info is not None and info.first_offset == len(original) and info.record_count == 60
    assert [r.offset for r in log.records()] == list(range(len(original) + 60))
    assert (
        log.active_segment.size_bytes == 0
        and log.active_segment.base_offset == info.last_offset + 1
    )
    assert len(log.segments) > 3  # 20 batches of ~190 bytes in 1 KiB segments
    log.append(batch(1, start_ms=START_MS + 20_000))  # appends continue after it
    segments = len(log.segments)
    assert log.bulk_append([]) is None and len(log.segments) == segments  # no roll for nothing
    log.close()
    reloaded = Log.open(tmp_path / "t-0", CONFIG, clock, had_clean_shutdown=True)
    assert [r.offset for r in reloaded.records()] == list(range(len(original) + 61))
    reloaded.close()
    assert verify_log_dir(tmp_path / "t-0").ok


def test_a_failure_while_writing_appends_nothing(tmp_path: Path, clock: ManualClock) -> None:
    log, original = setup_log(tmp_path / "t-0", clock)

    def failing() -> Iterator[bytes]:
        yield from bulk()[:5]
        raise ValueError("source broke")

    with pytest.raises(ValueError, match="source broke"):
        log.bulk_append(failing())
    assert [r.offset for r in log.records()] == original
    assert not any(n.endswith(".cleaned") for n in names(tmp_path / "t-0"))
    too_big = LogConfig(segment_bytes=1024, max_message_bytes=100)
    log.update_config(too_big)
    with pytest.raises(RecordTooLargeError, match="t-0: batch of .* exceeds max.message.bytes=100"):
        log.bulk_append(bulk())
    assert [r.offset for r in log.records()] == original
    log.close()


def test_a_crash_at_any_rename_leaves_all_or_nothing(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = CrashingRename()
    log, _ = setup_log(tmp_path / "count-0", clock)
    with monkeypatch.context() as patch:
        patch.setattr(durability, "rename", counter)
        log.bulk_append(bulk())
    total = counter.calls
    assert total > 6
    outcomes = set()
    for crash_at in range(total + 1):
        directory = tmp_path / f"t{crash_at}-0"
        log, original = setup_log(directory, clock)
        with monkeypatch.context() as patch, contextlib.suppress(Crash):
            patch.setattr(durability, "rename", CrashingRename(crash_at))
            log.bulk_append(bulk())
        log.close_handles()
        reloaded = Log.open(directory, CONFIG, clock, had_clean_shutdown=False)
        got = [r.offset for r in reloaded.records()]
        everything = list(range(len(original) + 60))
        assert got in (original, everything), f"crash before rename {crash_at}: {len(got)} records"
        outcomes.add("old" if got == original else "new")
        assert not any(n.endswith((".cleaned", ".swap", ".deleted")) for n in names(directory))
        reloaded.close()
        assert verify_log_dir(directory).ok, crash_at
    assert outcomes == {"old", "new"}
