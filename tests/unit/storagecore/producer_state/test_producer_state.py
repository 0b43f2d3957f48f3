"""Producer state through the Log (real files, a ManualClock): Kafka's sequence and epoch
rules, duplicates of the last five batches, and when snapshots are written and deleted."""

from __future__ import annotations

from pathlib import Path

import pytest

from storagecore import (
    AppendOrigin,
    ControlType,
    Log,
    LogConfig,
    ManualClock,
    NewRecord,
    build_batch,
    build_control_batch,
)
from storagecore.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from storagecore.producer_state import BatchMetadata
from storagecore.producer_state.snapshot import read_snapshot
from tests.conftest import START_MS

PID = 7


def idempotent(
    sequence: int,
    *,
    epoch: int = 0,
    count: int = 2,
    pid: int = PID,
    txn: bool = False,
    timestamp: int | None = None,
) -> bytes:
    stamp = START_MS + sequence if timestamp is None else timestamp
    return build_batch(
        [NewRecord(b"k%d" % i, b"v", stamp) for i in range(count)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=txn,
    )


def open_log(tmp_path: Path, clock: ManualClock, *, clean: bool = True, **config: int) -> Log:
    return Log.open(tmp_path / "t-0", LogConfig(**config), clock, had_clean_shutdown=clean)


def snapshots(log: Log) -> list[str]:
    return sorted(p.name for p in log.directory.iterdir() if "snapshot" in p.name)


def test_kafka_sequence_rules(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(build_batch([NewRecord(b"plain", b"v", START_MS)]))  # offset 0, no producer
    first = log.append(idempotent(5))  # an unknown producer may start anywhere
    assert (first.first_offset, first.duplicate) == (1, False)
    retry = log.append(idempotent(5))
    assert (retry.first_offset, retry.last_offset, retry.duplicate) == (1, 2, True)
    assert log.log_end_offset == 3, "a duplicate is not appended"
    with pytest.raises(
        OutOfOrderSequenceError, match=r"t-0: producer 7 epoch 0 sent sequence 9 .*expected 7"
    ):
        log.append(idempotent(9))
    with pytest.raises(OutOfOrderSequenceError, match="starts epoch 1 at sequence 3"):
        log.append(idempotent(3, epoch=1))
    assert log.append(idempotent(0, epoch=1)).first_offset == 3
    with pytest.raises(
        InvalidProducerEpochError, match="epoch 0 at offset 5 is older than its current epoch 1"
    ):
        log.append(idempotent(2, epoch=0))
    assert log.log_end_offset == 5
    # The last five batches of the epoch are duplicates; the sixth oldest is not any more.
    for n in range(1, 7):
        assert log.append(idempotent(2 * n, epoch=1)).first_offset == 3 + 2 * n
    entry = log.producer_state.last_entry(PID)
    assert entry is not None
    assert [b.first_sequence for b in entry.batches] == [4, 6, 8, 10, 12]
    for sequence in (4, 12):
        again = log.append(idempotent(sequence, epoch=1))
        assert (again.duplicate, again.first_offset) == (True, 3 + sequence)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idempotent(2, epoch=1))
    log.close()


def test_sequences_wrap_at_2_to_the_31(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    # sequences 2^31-2 and 2^31-1, stamped now (message.timestamp.after.max.ms is an hour)
    log.append(idempotent((1 << 31) - 2, timestamp=START_MS))
    assert log.append(idempotent(0)).first_offset == 2
    log.close()


def test_transactions_and_markers(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(idempotent(0, txn=True))
    with pytest.raises(InvalidTxnStateError, match="non-transactional batch at offset 2"):
        log.append(idempotent(2))
    log.append(
        build_control_batch(
            ControlType.COMMIT, producer_id=PID, producer_epoch=0, coordinator_epoch=3,
            timestamp=START_MS,
        ),
        origin=AppendOrigin.COORDINATOR,
    )  # fmt: skip
    entry = log.producer_state.last_entry(PID)
    assert entry is not None
    assert (entry.current_txn_first_offset, entry.coordinator_epoch) == (None, 3)
    assert log.append(idempotent(2)).first_offset == 3
    log.close()


def test_a_snapshot_at_every_roll_and_at_close(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(idempotent(0))
    log.append(idempotent(2, pid=8))
    log.roll()
    assert snapshots(log) == ["00000000000000000004.snapshot"]
    rolled = read_snapshot(log.directory / "00000000000000000004.snapshot")
    assert {e.producer_id: list(e.batches) for e in rolled} == {
        PID: [BatchMetadata(1, 1, 1, START_MS)],
        8: [BatchMetadata(3, 3, 1, START_MS + 2)],
    }
    log.append(idempotent(2))
    log.close()
    assert snapshots(log) == [
        "00000000000000000004.snapshot",
        "00000000000000000006.snapshot",
    ]


def test_after_a_clean_shutdown_only_the_last_batch_is_known(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock)
    for sequence in range(0, 10, 2):
        log.append(idempotent(sequence))
    log.close()
    log = open_log(tmp_path, clock)
    # Kafka's snapshot holds one batch per producer: an older retry is out of order.
    with pytest.raises(OutOfOrderSequenceError, match="expected 10"):
        log.append(idempotent(6))
    assert log.append(idempotent(8)).duplicate
    assert log.append(idempotent(10)).first_offset == 10
    log.close()


def test_after_a_crash_the_recovery_replays_the_log_and_snapshots_its_end(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock)
    log.append(idempotent(0))
    log.roll()  # snapshot at 2: batch 0-1 known as the last one
    for sequence in range(2, 14, 2):
        log.append(idempotent(sequence))
    log.flush()
    log.close_handles()  # no snapshot at the log end
    log = open_log(tmp_path, clock, clean=False)
    # The recovery of the last segment (the one holding the recovery point, as in Kafka)
    # replays it after the snapshot at 2 and snapshots its end, 14; the load reads that one,
    # which holds the last batch only (Kafka's LogLoader.recoverSegment: the broker answers
    # the same, tests/integration/peer/test_restart.py).
    assert snapshots(log)[-1] == "00000000000000000014.snapshot", "the recovery's snapshot"
    again = log.append(idempotent(12))
    assert (again.duplicate, again.first_offset) == (True, 12)
    for sequence in (10, 4, 2):
        with pytest.raises(OutOfOrderSequenceError):
            log.append(idempotent(sequence))
    assert log.append(idempotent(14)).first_offset == 14, "the replayed state goes on"
    log.close()


def test_snapshots_go_with_their_segments(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, file_delete_delay_ms=0)
    for sequence in range(0, 8, 2):
        log.append(idempotent(sequence))
        log.roll()
    assert snapshots(log) == [f"{o:020d}.snapshot" for o in (2, 4, 6, 8)]
    doomed = log.segments[:2]  # bases 0 and 2
    log.delete_segments(doomed, "test")
    assert snapshots(log) == [f"{o:020d}.snapshot" for o in (4, 6, 8)]
    assert log.producer_state.last_entry(PID) is not None, "the memory keeps the producer"
    log.close()


def test_expired_producers_are_not_loaded_from_a_snapshot(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock)
    log.append(idempotent(0))
    log.append(idempotent(0, pid=9, txn=True))  # an open transaction never expires
    log.close()
    clock.advance(86_400_000)
    log = open_log(tmp_path, clock)
    assert log.producer_state.last_entry(PID) is None
    assert log.producer_state.last_entry(9) is not None
    assert log.append(idempotent(40)).first_offset == 4, "unknown again: any sequence"
    log.close()


def test_a_roll_forgets_producers_idle_for_the_expiration(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock)
    log.append(idempotent(0))
    clock.advance(86_400_000 - 1)
    log.roll()
    assert log.producer_state.last_entry(PID) is not None, "one millisecond short"
    clock.advance(1)
    log.append(idempotent(0, pid=9, timestamp=clock.milliseconds()))
    log.roll()
    assert log.producer_state.last_entry(PID) is None
    assert read_snapshot(log.directory / f"{4:020d}.snapshot")[0].producer_id == 9
    log.close()


def test_a_bulk_append_is_caught_up_at_its_final_roll(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(idempotent(0))
    log.bulk_append([idempotent(2), idempotent(4), idempotent(0, pid=8)])
    entry = log.producer_state.last_entry(PID)
    assert entry is not None and [b.first_offset for b in entry.batches] == [0, 2, 4]
    assert log.producer_state.map_end_offset == log.log_end_offset == 8
    rolled = read_snapshot(log.directory / f"{8:020d}.snapshot")
    assert {e.producer_id: e.last_data_offset for e in rolled} == {PID: 5, 8: 7}
    assert log.append(idempotent(4)).duplicate
    log.close()
