"""Producers and transactions in a cleaned log (Kafka LogCleanerTest, kafka-log-layer.md §10
items 5-15, 22-24): each producer's last batch kept, expired producers, aborted data removed,
markers kept and removed, undecided transactions uncleanable, and CleanedTransactionMetadata's
decisions."""

from __future__ import annotations

from pathlib import Path

from storagecore import ControlType, ManualClock, NewRecord, build_batch, build_control_batch
from storagecore.cleaner import CleanedTransactionMetadata, Cleaner
from storagecore.cleaner.log_to_clean import cleanable_offsets
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from storagecore.config import CleanerConfig
from storagecore.records import layout
from storagecore.records.batch import RecordBatch
from tests.unit.storagecore.helpers.cleaning import (
    COMPACT,
    batches,
    idempotent_append,
    keys_of,
    marker,
    open_log,
    put,
    put_many,
    run_round,
    txn_append,
)


# -- 22-24, 5-15: producers and transactions ------------------------------------------------------
def test_each_producers_last_batch_is_kept(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    idempotent_append(log, [b"a", b"b"], pid=1, seq=0)
    idempotent_append(log, [b"c"], pid=2, seq=0)
    idempotent_append(log, [b"a", b"b"], pid=1, seq=2)  # pid 1's last batch
    idempotent_append(log, [b"c"], pid=3, seq=0)  # supersedes pid 2's only batch
    put(log, b"pad", b"x")
    log.roll()
    run_round(log)
    by_pid = {b.producer_id: b for b in batches(log) if b.has_producer_id}
    assert by_pid[2].records_count == 0, "pid 2's last batch survives empty"
    assert (by_pid[2].base_sequence, by_pid[2].last_offset) == (0, 2)
    assert by_pid[1].base_offset == 3 and by_pid[1].last_sequence == 3
    assert keys_of(log) == [b"a", b"b", b"c", b"pad"]


def test_expired_producers_lose_their_last_batch(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    idempotent_append(log, [b"a"], pid=7, seq=0)
    put(log, b"a", b"newer")
    log.roll()
    cleaner = Cleaner(
        offset_map=SkimpyOffsetMap(2400), config=CleanerConfig(producer_id_expiration_ms=1000)
    )
    clock.advance(1001)
    run_round(log, cleaner)
    assert not [b for b in batches(log) if b.has_producer_id]


def test_aborted_transactions_are_removed_and_committed_ones_deduplicated(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock)
    txn_append(log, [b"a", b"b"], pid=1)
    txn_append(log, [b"c"], pid=2)
    marker(log, ControlType.COMMIT, pid=1)
    marker(log, ControlType.ABORT, pid=2)
    put(log, b"a", b"later")
    put(log, b"pad", b"x")
    log.roll()
    state = log.transaction_state()
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in state.aborted] == [(2, 2, 4)]
    run_round(log)
    keys = keys_of(log)
    assert b"c" not in keys, "aborted data goes at once"
    assert keys.count(b"a") == 1 and b"b" in keys
    remaining = batches(log)
    # pid 2's aborted batch is its last data batch: kept empty, with its abort marker
    assert any(b.producer_id == 2 and not b.is_control and b.records_count == 0 for b in remaining)
    assert any(b.producer_id == 2 and b.is_control for b in remaining)


def test_commit_marker_removed_after_its_data_and_horizon(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock)
    txn_append(log, [b"a"], pid=1)
    commit = marker(log, ControlType.COMMIT, pid=1)
    idempotent_append(log, [b"z"], pid=1, seq=1)  # pid 1 writes again: its marker is not last
    put(log, b"a", b"newer")
    put(log, b"pad", b"x")
    log.roll()
    run_round(log)  # data of the transaction goes (superseded); marker kept
    assert any(b.is_control and b.base_offset == commit for b in batches(log))
    run_round(log, first_dirty=log.active_segment.base_offset)  # marker: nothing left, stamped
    stamped = next(b for b in batches(log) if b.is_control)
    assert stamped.has_delete_horizon
    clock.advance(COMPACT.delete_retention_ms)
    run_round(log, first_dirty=log.active_segment.base_offset)
    assert not [b for b in batches(log) if b.is_control], "removed after the horizon"


def test_abort_marker_kept_while_its_empty_batch_exists(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    txn_append(log, [b"a"], pid=1)
    marker(log, ControlType.ABORT, pid=1)
    put(log, b"pad", b"x")
    log.roll()
    for _ in range(3):
        run_round(log, first_dirty=log.active_segment.base_offset)
        clock.advance(COMPACT.delete_retention_ms)
    kinds = [(b.producer_id, b.is_control, b.records_count) for b in batches(log)]
    assert (1, False, 0) in kinds, "the producer's last data batch, emptied"
    assert (1, True, 1) in kinds, "its abort marker stays while that batch exists"
    # the producer moves on: its old batch is no longer its last, both may go
    idempotent_append(log, [b"q"], pid=1, seq=1)
    log.roll()
    for _ in range(3):
        run_round(log, first_dirty=log.active_segment.base_offset)
        clock.advance(COMPACT.delete_retention_ms)
    assert [b.base_offset for b in batches(log) if b.producer_id == 1] == [3]


def test_undecided_transaction_is_not_cleanable(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"k", b"1"), (b"k", b"2")])
    open_at = txn_append(log, [b"k"], pid=9)
    put_many(log, [(b"k", b"3"), (b"k", b"4")])
    log.roll()
    assert log.last_stable_offset == open_at
    offsets = cleanable_offsets(log, None, clock.milliseconds())
    assert offsets.first_uncleanable_offset == open_at
    marker(log, ControlType.COMMIT, pid=9)
    assert log.last_stable_offset == log.log_end_offset


def test_marker_keys_do_not_collide_with_data_keys(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    txn_append(log, [b"a"], pid=1)
    marker(log, ControlType.COMMIT, pid=1)
    # a data record whose key equals the marker's control-record key bytes
    put(log, layout.CONTROL_RECORD_KEY.pack(0, int(ControlType.COMMIT)), b"data")
    put(log, b"pad", b"x")
    log.roll()
    run_round(log)
    assert any(b.is_control for b in batches(log)), "the marker is not deduplicated by key"


def test_cleaned_transaction_metadata_decisions() -> None:
    from storagecore.transactions import AbortedTxn

    def data(offset: int, pid: int, transactional: bool = True) -> RecordBatch:
        return RecordBatch(
            build_batch(
                [NewRecord(key=b"k", value=b"v")],
                base_offset=offset,
                producer_id=pid,
                producer_epoch=0,
                base_sequence=0,
                is_transactional=transactional,
            )
        )

    def ctrl(offset: int, pid: int, kind: ControlType) -> RecordBatch:
        return RecordBatch(
            build_control_batch(
                kind,
                producer_id=pid,
                producer_epoch=0,
                coordinator_epoch=0,
                timestamp=0,
                base_offset=offset,
            )
        )

    meta = CleanedTransactionMetadata([AbortedTxn(0, 2, 1, 3)])
    assert meta.on_data_batch(data(0, 1)) is True  # aborted
    assert meta.on_data_batch(data(1, 2)) is False  # pid 2 committed later
    assert meta.on_control_batch(ctrl(2, 1, ControlType.ABORT), ControlType.ABORT) is False
    assert meta.retained_aborted == [AbortedTxn(0, 2, 1, 3)]
    assert meta.on_control_batch(ctrl(3, 2, ControlType.COMMIT), ControlType.COMMIT) is False
    assert meta.on_control_batch(ctrl(4, 2, ControlType.COMMIT), ControlType.COMMIT) is True
    assert meta.on_control_batch(ctrl(5, 3, ControlType.ABORT), None) is True
