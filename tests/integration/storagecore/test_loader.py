"""Loading and crash recovery (Kafka LogLoaderTest scenarios, kafka-log-layer.md §5, §8.9).

Every intermediate on-disk state of the clean-and-swap protocol is built by hand, and so are
torn, corrupt and zero-filled tails, missing and garbage indexes and orphan files.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storagecore import Log, LogConfig, ManualClock, NewRecord, build_batch, files
from storagecore.segment import LogSegment
from storagecore.segment_recovery import sanity_check_segment
from tests.conftest import START_MS, batch
from tests.integration.storagecore.helpers.cleaning import cleaned_copy, offsets_after_swap

pytestmark = pytest.mark.integration

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=64, segment_index_bytes=4096)


def write_log(
    directory: Path, clock: ManualClock, batches: int = 30, config: LogConfig = CONFIG
) -> Log:
    log = Log.open(directory, config, clock)
    for i in range(batches):
        log.append(batch(2, value_size=30, start_ms=START_MS + i * 10, key_prefix=f"b{i}"))
    return log


def reopen(
    directory: Path,
    clock: ManualClock,
    *,
    clean: bool,
    recovery_point: int = 0,
    log_start_offset: int = 0,
    config: LogConfig = CONFIG,
) -> Log:
    return Log.open(
        directory,
        config,
        clock,
        recovery_point=recovery_point,
        log_start_offset=log_start_offset,
        had_clean_shutdown=clean,
    )


def snapshot(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in log.records()]


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


def crash(log: Log) -> None:
    """What a SIGKILL leaves: unflushed data in the page cache survives a process crash, the
    indexes are not trimmed, nothing else is written."""
    log.close_handles()


# -- clean and unclean shutdown ----------------------------------------------------------------


def test_clean_shutdown_skips_recovery(directory: Path, clock: ManualClock) -> None:
    log = write_log(directory, clock)
    expected = snapshot(log)
    log.flush()
    log.close()
    reloaded = reopen(directory, clock, clean=True)
    assert snapshot(reloaded) == expected
    assert reloaded.recovery_point == reloaded.log_end_offset == 60


def test_unclean_shutdown_recovers_from_the_recovery_point(
    directory: Path, clock: ManualClock
) -> None:
    log = write_log(directory, clock)
    expected = snapshot(log)
    recovery_point = log.recovery_point
    assert 0 < recovery_point < log.log_end_offset
    crash(log)
    from storagecore.loader import load_log

    loaded = load_log(
        directory,
        log.tp,
        CONFIG,
        clock,
        recovery_point=recovery_point,
        log_start_offset=0,
        had_clean_shutdown=False,
    )
    assert loaded.recovered_segments == 1  # only the active segment was past the recovery point
    for segment in loaded.segments:
        segment.close()
    reloaded = reopen(directory, clock, clean=False, recovery_point=recovery_point)
    assert snapshot(reloaded) == expected
    assert reloaded.recovery_point == recovery_point


def test_recovery_rebuilds_the_preallocated_active_index(
    directory: Path, clock: ManualClock
) -> None:
    log = write_log(directory, clock)
    active = log.active_segment.offset_index.path
    crash(log)
    assert active.stat().st_size == CONFIG.segment_index_bytes  # still preallocated: the trap
    reloaded = reopen(directory, clock, clean=False)
    assert [r.offset for r in reloaded.records()] == list(range(60))
    reloaded.close()
    assert active.stat().st_size % 8 == 0 and active.stat().st_size < CONFIG.segment_index_bytes


# -- damaged tails -----------------------------------------------------------------------------


def _active_log_file(log: Log) -> Path:
    return log.active_segment.log.path


@pytest.mark.parametrize("clean", [False, True])
def test_torn_final_batch_is_truncated(directory: Path, clock: ManualClock, clean: bool) -> None:
    log = write_log(directory, clock)
    expected = snapshot(log)
    path = _active_log_file(log)
    size = path.stat().st_size
    log.flush()
    crash(log)
    torn = batch(5, value_size=50)
    with path.open("ab") as handle:
        handle.write(torn[: len(torn) - 7])
    reloaded = reopen(directory, clock, clean=clean, recovery_point=0)
    assert path.stat().st_size == size
    assert snapshot(reloaded) == expected
    assert reloaded.append(batch(1)).first_offset == 60


def test_zero_filled_tail_is_truncated(directory: Path, clock: ManualClock) -> None:
    log = write_log(directory, clock)
    expected = snapshot(log)
    path = _active_log_file(log)
    size = path.stat().st_size
    crash(log)
    with path.open("ab") as handle:
        handle.write(b"\x00" * 4096)
    reloaded = reopen(directory, clock, clean=False)
    assert path.stat().st_size == size and snapshot(reloaded) == expected


def test_random_garbage_in_log_and_index_tail(directory: Path, clock: ManualClock) -> None:
    """Kafka testCorruptLog: garbage appended to the active .log and .index."""
    log = write_log(directory, clock)
    expected = snapshot(log)
    log_path = _active_log_file(log)
    index_path = log.active_segment.offset_index.path
    crash(log)
    with log_path.open("ab") as handle:
        handle.write(os.urandom(333))
    with index_path.open("r+b") as handle:
        handle.write(os.urandom(64))
    reloaded = reopen(directory, clock, clean=False)
    assert snapshot(reloaded) == expected


def test_flipped_crc_byte_mid_log_truncates_there_and_drops_later_segments(
    directory: Path, clock: ManualClock
) -> None:
    log = write_log(directory, clock)
    segments = log.segments
    assert len(segments) >= 4
    victim = segments[1]
    victim_path = victim.log.path
    later = [s.base_offset for s in segments[2:]]
    crash(log)
    data = bytearray(victim_path.read_bytes())
    headers = list(
        LogSegment.open(
            directory,
            victim.base_offset,
            index_interval_bytes=64,
            max_index_size_bytes=4096,
            now_ms=0,
            writable_indexes=False,
        ).log.batch_headers()
    )
    third = headers[2]
    data[third.position + 40] ^= 0xFF  # under the CRC of the third batch
    victim_path.write_bytes(bytes(data))
    reloaded = reopen(directory, clock, clean=False, recovery_point=0)
    assert reloaded.log_end_offset == third.base_offset
    assert [s.base_offset for s in reloaded.segments] == [
        segments[0].base_offset,
        victim.base_offset,
    ]
    for base in later:
        assert not files.log_file(directory, base).exists()
    assert [r.offset for r in reloaded.records()] == list(range(third.base_offset))
    assert reloaded.append(batch(1)).first_offset == third.base_offset


def test_corruption_below_the_recovery_point_is_found_after_a_clean_shutdown(
    directory: Path, clock: ManualClock
) -> None:
    log = write_log(directory, clock)
    first = log.segments[0].log.path
    log.flush()
    log.close()
    with first.open("ab") as handle:
        handle.write(b"\x00\x00\x00")  # an extra tail Kafka would keep: we cut it
    reloaded = reopen(directory, clock, clean=True)
    assert [r.offset for r in reloaded.records()] == list(range(60))
    assert first.stat().st_size % 1 == 0 and not first.read_bytes().endswith(b"\x00\x00\x00")


# -- indexes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX])
def test_missing_indexes_are_rebuilt(directory: Path, clock: ManualClock, suffix: str) -> None:
    log = write_log(directory, clock)
    expected = snapshot(log)
    lookups = {ts: log.offset_for_timestamp(ts) for ts in (START_MS, START_MS + 55, START_MS + 200)}
    log.flush()
    log.close()
    for path in directory.glob(f"*{suffix}"):
        path.unlink()
    reloaded = reopen(directory, clock, clean=True)
    assert snapshot(reloaded) == expected
    assert {ts: reloaded.offset_for_timestamp(ts) for ts in lookups} == lookups
    assert all(s.time_index.entries > 0 for s in reloaded.segments[:-1])
    assert all(p.exists() for p in directory.glob("*.log") for p in [p.with_suffix(suffix)])


def test_garbage_indexes_below_the_recovery_point_are_rebuilt(
    directory: Path, clock: ManualClock
) -> None:
    log = write_log(directory, clock)
    expected = snapshot(log)
    log.flush()
    log.close()
    for path in list(directory.glob("*.index")) + list(directory.glob("*.timeindex")):
        path.write_bytes(os.urandom(120))
    reloaded = reopen(directory, clock, clean=True)
    assert snapshot(reloaded) == expected
    for segment in reloaded.segments:
        sanity_check_segment(segment)


def test_orphan_index_files_are_removed(directory: Path, clock: ManualClock) -> None:
    log = write_log(directory, clock, batches=3)
    log.close()
    for suffix in (".index", ".timeindex", ".txnindex"):
        (directory / f"{files.filename_prefix(5000)}{suffix}").write_bytes(b"")
    reopen(directory, clock, clean=True).close()
    assert not any(name.startswith(files.filename_prefix(5000)) for name in names(directory))


def test_obsolete_deleted_files_are_removed(directory: Path, clock: ManualClock) -> None:
    log = write_log(directory, clock)
    log.flush()
    first = log.segments[0]
    log.close()
    for path in directory.glob(f"{files.filename_prefix(first.base_offset)}.*"):
        path.rename(path.with_name(path.name + ".deleted"))
    (directory / "leader-epoch-checkpoint.checkpoint.deleted").write_text("keep")
    reloaded = reopen(directory, clock, clean=True)
    assert not any(
        n.endswith(".log.deleted") or n.endswith(".index.deleted") for n in names(directory)
    )
    assert "leader-epoch-checkpoint.checkpoint.deleted" in names(directory)
    assert reloaded.log_start_offset == reloaded.segments[0].base_offset > 0


# -- log start offset --------------------------------------------------------------------------


def test_log_end_below_log_start_deletes_everything(directory: Path, clock: ManualClock) -> None:
    """Kafka testLogEndLessThanStartAfterReopen."""
    log = write_log(directory, clock)
    log.flush()
    log.close()
    reloaded = reopen(directory, clock, clean=True, log_start_offset=1000)
    assert [s.base_offset for s in reloaded.segments] == [1000]
    assert reloaded.log_start_offset == reloaded.log_end_offset == 1000
    assert reloaded.size_bytes == 0


def test_checkpointed_log_start_offset_is_kept(directory: Path, clock: ManualClock) -> None:
    log = write_log(directory, clock)
    log.flush()
    log.close()
    reloaded = reopen(directory, clock, clean=True, log_start_offset=7)
    assert reloaded.log_start_offset == 7
    assert next(r.offset for r in reloaded.records()) == 7


def test_empty_directory_gets_one_segment(directory: Path, clock: ManualClock) -> None:
    log = reopen(directory, clock, clean=False, log_start_offset=42)
    assert [s.base_offset for s in log.segments] == [42]
    assert log.append(batch(1)).first_offset == 42


# -- clean-and-swap crash states (LocalLog.replaceSegments) ------------------------------------


def _cleaned_copy(directory: Path, log: Log, olds: list[LogSegment], suffix: str) -> list[int]:
    return [s.base_offset for s in cleaned_copy(directory, olds, suffix)]


SwapSetup = tuple[Log, list[LogSegment], list[int], list[int]]


@pytest.fixture
def swap_setup(directory: Path, clock: ManualClock) -> SwapSetup:
    log = write_log(directory, clock)
    log.flush()
    olds = log.segments[:2]
    original = [r.offset for r in log.records()]
    expected = offsets_after_swap(log, olds)
    assert expected != original
    return log, olds, original, expected


def _rename(directory: Path, base: int, old_suffix: str, new_suffix: str) -> None:
    for kind in (".log", ".index", ".timeindex"):
        source = directory / f"{files.filename_prefix(base)}{kind}{old_suffix}"
        source.rename(directory / f"{files.filename_prefix(base)}{kind}{new_suffix}")


def _offsets_after_reload(directory: Path, clock: ManualClock) -> list[int]:
    reloaded = reopen(directory, clock, clean=True)
    offsets = [r.offset for r in reloaded.records()]
    leftovers = [n for n in names(directory) if n.endswith((".cleaned", ".swap", ".deleted"))]
    assert leftovers == []
    for segment in reloaded.segments:
        sanity_check_segment(segment)
    reloaded.close()
    return offsets


# Each state of the table in docs/crash-protocols.md, built by renaming files the way the
# protocol does up to the crash: (which segments, which of them, old suffix, new suffix).
# "new" are the cleaned replacements, "old" the segments they replace; "desc" renames in
# descending offset order, as the protocol does.
CLEANED, SWAP, DELETED = files.CLEANED_SUFFIX, files.SWAP_SUFFIX, files.DELETED_SUFFIX
ALL_SWAPPED = ("new", "desc", CLEANED, SWAP)
SWAP_STATES = {
    "phase 1: only .cleaned files": ([], "old"),
    "phase 2: renaming to .swap half done": ([("new", "last", CLEANED, SWAP)], "old"),
    "phase 3: all .swap, old segments present": ([ALL_SWAPPED], "new"),
    "phase 4: old segments partly .deleted": ([ALL_SWAPPED, ("old", "last", "", DELETED)], "new"),
    "phase 5: .swap partly stripped": (
        [ALL_SWAPPED, ("old", "all", "", DELETED), ("new", "first", SWAP, "")],
        "new",
    ),
    "phase 6: done, .deleted files left": (
        [("old", "all", "", DELETED), ("new", "all", CLEANED, "")],
        "new",
    ),
}


@pytest.mark.parametrize("state", list(SWAP_STATES))
def test_every_swap_crash_state_resolves_to_old_or_new(
    directory: Path, clock: ManualClock, swap_setup: SwapSetup, state: str
) -> None:
    log, olds, original, expected = swap_setup
    new_bases = _cleaned_copy(directory, log, olds, CLEANED)
    log.close()
    steps, outcome = SWAP_STATES[state]
    for group, which, old_suffix, new_suffix in steps:
        bases = new_bases if group == "new" else [s.base_offset for s in olds]
        chosen = {
            "first": bases[:1],
            "last": bases[-1:],
            "all": bases,
            "desc": sorted(bases, reverse=True),
        }[which]
        for base in chosen:
            _rename(directory, base, old_suffix, new_suffix)
    assert _offsets_after_reload(directory, clock) == (original if outcome == "old" else expected)


def test_loaded_log_accepts_appends_after_recovery(directory: Path, clock: ManualClock) -> None:
    log = write_log(directory, clock)
    crash(log)
    reloaded = reopen(directory, clock, clean=False)
    info = reloaded.append(build_batch([NewRecord(key=b"k", value=b"after", timestamp=START_MS)]))
    assert info.first_offset == 60
    assert next(iter(reloaded.records(60))).value == b"after"


def test_recover_with_empty_active_segment(directory: Path, clock: ManualClock) -> None:
    """Kafka testRecoverWithEmptyActiveSegment: a crash right after a roll."""
    log = write_log(directory, clock)
    log.roll()
    end = log.log_end_offset
    assert log.active_segment.size_bytes == 0
    crash(log)
    reloaded = reopen(directory, clock, clean=False)
    assert reloaded.log_end_offset == end
    assert reloaded.active_segment.base_offset == end
    assert [r.offset for r in reloaded.records()] == list(range(end))
    assert reloaded.append(batch(1)).first_offset == end


def test_log_recovers_to_correct_offset_and_index_entries(
    directory: Path, clock: ManualClock
) -> None:
    """Kafka testLogRecoversToCorrectOffset: same end offset, same index entry counts."""
    log = write_log(directory, clock, config=CONFIG)
    end = log.log_end_offset
    entries = [s.offset_index.entries for s in log.segments[:-1]]
    last_time_entries = [s.time_index.last_entry for s in log.segments[:-1]]
    log.flush()
    log.close()
    reloaded = reopen(directory, clock, clean=False, recovery_point=0)
    assert reloaded.log_end_offset == end
    assert [s.offset_index.entries for s in reloaded.segments[:-1]] == entries
    assert [s.time_index.last_entry for s in reloaded.segments[:-1]] == last_time_entries


def test_over_compacted_offsets_roll_and_load(directory: Path, clock: ManualClock) -> None:
    """Kafka testOverCompactedLogRecovery: offsets that jump past Int.MAX within what would be
    one segment (as compaction can leave them) go to a new segment and load again."""
    from storagecore import AppendOrigin

    log = Log.open(directory, CONFIG, clock)
    log.append(
        build_batch([NewRecord(key=b"a", value=b"1", timestamp=START_MS)]),
        origin=AppendOrigin.REPLICATION,
    )
    jump = 2**31 + 5
    log.append(
        build_batch([NewRecord(key=b"b", value=b"2", timestamp=START_MS)], base_offset=jump),
        origin=AppendOrigin.REPLICATION,
    )
    assert [s.base_offset for s in log.segments] == [0, jump]
    log.flush()
    log.close()
    reloaded = reopen(directory, clock, clean=False)
    assert [r.offset for r in reloaded.records()] == [0, jump]
    assert reloaded.log_end_offset == jump + 1


def test_a_swap_log_without_its_indexes_completes_and_leaves_nothing_behind(
    directory: Path, clock: ManualClock, swap_setup: SwapSetup
) -> None:
    """Not a state the protocol produces (indexes are renamed with their log), but a loader
    must not create files while it looks: the swap completes and the indexes are rebuilt."""
    log, olds, _, expected = swap_setup
    new_bases = _cleaned_copy(directory, log, olds, CLEANED)
    log.close()
    for base in new_bases:
        _rename(directory, base, CLEANED, SWAP)
        for kind in (".index", ".timeindex"):
            (directory / f"{files.filename_prefix(base)}{kind}{SWAP}").unlink()
    assert _offsets_after_reload(directory, clock) == expected
