"""Producer-state snapshots across crashes: every intermediate on-disk state built by hand.

The crash protocol (docs/crash-protocols.md, "Producer-state snapshots"): a snapshot is
written to ``<offset>.snapshot.tmp``, fsynced and renamed; the loader deletes ``.tmp`` files,
stray snapshots, snapshots beyond the log end or at or below the log start, loads the newest
valid one (reporting and deleting a corrupt one) and replays the log after it. The loads are
clean (a clean-shutdown marker whose snapshot at the log end is missing): after an unclean
shutdown the recovery of each unflushed segment snapshots its end, as Kafka's, and the load
reads that snapshot, which holds each producer's last batch only (see the torn-tail test).
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from storagecore import Log, LogConfig, ManualClock, NewRecord, build_batch
from storagecore.errors import OutOfOrderSequenceError
from storagecore.records.crc import crc32c
from tests.conftest import START_MS

pytestmark = pytest.mark.integration

CONFIG = LogConfig(segment_bytes=1 << 20)
PID = 41


def idempotent(sequence: int, count: int = 2) -> bytes:
    return build_batch(
        [NewRecord(b"k", b"v-%d" % sequence, START_MS + sequence) for _ in range(count)],
        producer_id=PID,
        producer_epoch=0,
        base_sequence=sequence,
    )


def open_log(directory: Path, clock: ManualClock, *, clean: bool, start: int = 0) -> Log:
    return Log.open(
        directory, CONFIG, clock, had_clean_shutdown=clean, recovery_point=0,
        log_start_offset=start,
    )  # fmt: skip


def snapshot_names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".snapshot" in p.name)


def known_first_offsets(log: Log) -> list[int]:
    entry = log.producer_state.last_entry(PID)
    return [] if entry is None else [b.first_offset for b in entry.batches]


def hand_made_snapshot(
    pid: int, last_sequence: int, last_offset: int, delta: int, timestamp: int
) -> bytes:
    """Kafka's ProducerSnapshot v1 with one entry, field by field."""
    body = struct.pack(">i", 1) + struct.pack(
        ">qhiqiqiq", pid, 0, last_sequence, last_offset, delta, timestamp, -1, -1
    )
    return struct.pack(">hI", 1, crc32c(body)) + body


@pytest.fixture
def layout(tmp_path: Path, clock: ManualClock) -> Path:
    """Three segments [0, 4), [4, 8), [8, 12) of two-record batches (sequences = offsets),
    snapshots at 4 and 8 from the rolls; closed without the clean shutdown's snapshot."""
    directory = tmp_path / "t-0"
    log = open_log(directory, clock, clean=True)
    for sequence in range(0, 12, 2):
        log.append(idempotent(sequence))
        if sequence in (2, 6):
            log.roll()
    log.flush()
    log.close_handles()
    assert snapshot_names(directory) == [f"{o:020d}.snapshot" for o in (4, 8)]
    return directory


def test_a_half_written_tmp_snapshot_is_deleted(
    layout: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    # A crash during the write at 12 (step 1 of the protocol): part of the bytes, no rename.
    full = hand_made_snapshot(PID, 11, 11, 1, START_MS + 10)
    (layout / f"{12:020d}.snapshot.tmp").write_bytes(full[:17])
    with caplog.at_level(logging.WARNING):
        log = open_log(layout, clock, clean=True)
    assert f"{12:020d}.snapshot.tmp" in caplog.text
    # The snapshot at 8 (batch 6-7) plus the replayed batch 8-11; the load snapshots the end.
    assert known_first_offsets(log) == [6, 8, 10]
    assert snapshot_names(layout) == [f"{o:020d}.snapshot" for o in (4, 8, 12)]
    log.close()


@pytest.mark.parametrize(
    ("damage", "reported"),
    [
        (lambda b: b[:-1], "does not match the file's"),
        (lambda b: b[:3], "shorter than the 10-byte header"),
        (lambda b: b"\x00\x02" + b[2:], "unknown snapshot version 2 at offset 0"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 0x40]), "CRC at offset 2"),
    ],
)
def test_a_corrupt_newest_snapshot_falls_back_to_the_older_one(
    layout: Path,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
    damage: object,
    reported: str,
) -> None:
    newest = layout / f"{8:020d}.snapshot"
    assert callable(damage)
    newest.write_bytes(damage(newest.read_bytes()))
    with caplog.at_level(logging.WARNING):
        log = open_log(layout, clock, clean=True)
    assert str(newest) in caplog.text and reported in caplog.text
    # From the snapshot at 4 (batch 2-3) and the replay of [4, 12): retries of any of them
    # are duplicates at their original offsets.
    assert known_first_offsets(log) == [2, 4, 6, 8, 10]
    for sequence in (2, 6, 10):
        again = log.append(idempotent(sequence))
        assert (again.duplicate, again.first_offset) == (True, sequence)
    assert f"{8:020d}.snapshot" in snapshot_names(layout), "rewritten while replaying"
    log.close()


def test_every_snapshot_corrupt_replays_the_whole_log(
    layout: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    for offset in (4, 8):
        (layout / f"{offset:020d}.snapshot").write_bytes(b"\x00\x01garbage")
    with caplog.at_level(logging.WARNING):
        log = open_log(layout, clock, clean=True)
    assert caplog.text.count("Failed to load producer snapshot") == 2
    assert known_first_offsets(log) == [2, 4, 6, 8, 10]
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idempotent(0))  # the sixth last: out of order, as on the broker
    log.close()


def test_a_snapshot_beyond_the_log_end_after_truncation_is_deleted(
    layout: Path, clock: ManualClock
) -> None:
    # A clean shutdown's snapshot at 12, then the last batch torn: recovery truncates to 10.
    (layout / f"{12:020d}.snapshot").write_bytes(hand_made_snapshot(PID, 11, 11, 1, START_MS))
    segment = layout / f"{8:020d}.log"
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) - 5])
    log = open_log(layout, clock, clean=False)
    assert log.log_end_offset == 10
    assert snapshot_names(layout) == [f"{o:020d}.snapshot" for o in (4, 8, 10)]
    # The recovery of segment 8 snapshots its end, 10, with batch 8-9 alone (as Kafka's).
    assert known_first_offsets(log) == [8]
    # The lost batch is not a duplicate: its retry is appended, in sequence.
    again = log.append(idempotent(10))
    assert (again.duplicate, again.first_offset) == (False, 10)
    log.close()


def test_missing_snapshots_replay_the_log_from_its_start(layout: Path, clock: ManualClock) -> None:
    for path in layout.glob("*.snapshot"):
        path.unlink()
    # Even after a clean shutdown (Kafka would skip the replay: see docs/on-disk-format.md).
    log = open_log(layout, clock, clean=True)
    assert known_first_offsets(log) == [2, 4, 6, 8, 10]
    assert snapshot_names(layout) == [f"{o:020d}.snapshot" for o in (4, 8, 12)]
    log.close()


def test_stray_snapshots_and_those_at_or_below_the_log_start_are_deleted(
    layout: Path, clock: ManualClock
) -> None:
    stray = hand_made_snapshot(PID, 5, 5, 1, START_MS)
    (layout / f"{6:020d}.snapshot").write_bytes(stray)  # at no segment's base
    (layout / f"{40:020d}.snapshot").write_bytes(stray)  # newest stray, beyond the log end
    log = open_log(layout, clock, clean=True, start=4)
    assert log.log_start_offset == 4
    # 6 (stray below the last base) and 4 (at the log start) and 40 (beyond the end) go.
    assert snapshot_names(layout) == [f"{o:020d}.snapshot" for o in (8, 12)]
    assert known_first_offsets(log) == [6, 8, 10]
    log.close()


def test_the_clean_shutdown_snapshot_is_loaded_alone(layout: Path, clock: ManualClock) -> None:
    log = open_log(layout, clock, clean=False)
    log.close()  # a snapshot at 12 holding batch 10-11 only
    log = open_log(layout, clock, clean=True)
    assert known_first_offsets(log) == [10]
    with pytest.raises(OutOfOrderSequenceError, match="expected 12"):
        log.append(idempotent(8))
    log.close()
