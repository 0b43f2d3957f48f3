"""A log's ``.txnindex`` files: written when an ABORT marker is appended (in the marker's
segment, with the LSO Kafka records), read by read_committed fetches instead of a walk of the
log, checked and rebuilt when corrupt, rebuilt by recovery, kept by the cleaner for the markers
it keeps, and removed with their segments."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from storagecore import Log, LogManager, TopicPartition, files
from storagecore.cleaner import Cleaner, CleanRequest
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from storagecore.clock import ManualClock
from storagecore.index.transaction_index import ENTRY, AbortedTxn, TransactionIndex
from storagecore.records.batch import ControlType, iter_complete_batches
from tests.unit.storagecore.helpers.cleaning import (
    COMPACT,
    idempotent_append,
    marker,
    open_log,
    put,
    run_round,
    txn_append,
)
from tests.unit.storagecore.test_read_committed import SMALL, abort_across_segments


def index_files(log: Log) -> dict[int, list[AbortedTxn]]:
    """The entries of every ``.txnindex`` file in the log's directory, by base offset."""
    return {
        files.offset_from_file_name(path.name): TransactionIndex(
            path, files.offset_from_file_name(path.name)
        ).entries()
        for path in sorted(log.directory.glob("*.txnindex"))
    }


def reopen(log: Log, clock: ManualClock, *, clean: bool = True) -> Log:
    directory, config = log.directory, log.config
    if clean:
        log.close()
    else:
        log.close_handles()
    return Log.open(directory, config, clock, had_clean_shutdown=clean)


def test_an_abort_marker_indexes_its_transaction_with_kafkas_lso(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Two overlapping transactions: the first one aborted records the other's first offset
    as its LSO; the last one, nothing open, the offset after its marker."""
    log = open_log(tmp_path, clock)
    a = txn_append(log, [b"a"], pid=1)
    b = txn_append(log, [b"b"], pid=2)
    committed = txn_append(log, [b"c"], pid=3)
    abort_a = marker(log, ControlType.ABORT, pid=1)
    marker(log, ControlType.COMMIT, pid=3)  # a commit is not indexed
    abort_b = marker(log, ControlType.ABORT, pid=2)
    assert committed == 2
    expected = [AbortedTxn(a, abort_a, 1, b), AbortedTxn(b, abort_b, 2, abort_b + 1)]
    assert index_files(log) == {0: expected}
    assert (tmp_path / "t-0" / "00000000000000000000.txnindex").stat().st_size == 2 * ENTRY.size
    assert log.aborted_transactions(0, log.log_end_offset) == expected
    assert log.aborted_transactions(abort_a + 1, log.log_end_offset) == expected[1:]


def test_no_file_without_an_aborted_transaction(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    txn_append(log, [b"a"], pid=1)
    marker(log, ControlType.COMMIT, pid=1)
    marker(log, ControlType.ABORT, pid=2)  # an abort of no data: nothing to filter
    assert index_files(log) == {}


def test_the_marker_segment_holds_the_entry(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, SMALL)
    first, end = abort_across_segments(log)
    marker_segment = max(s.base_offset for s in log.segments if s.base_offset <= end)
    assert marker_segment > 0, "the transaction spans segments"
    assert index_files(log) == {marker_segment: [AbortedTxn(first, end, 5, end + 1)]}
    # A fetch from inside the first segment finds it in a later segment's index.
    assert log.aborted_transactions(1, log.log_end_offset) == [AbortedTxn(first, end, 5, end + 1)]


def test_fetches_read_the_index_files_not_the_log(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    txn_append(log, [b"a"], pid=1)
    abort = marker(log, ControlType.ABORT, pid=1)
    log = reopen(log, clock)
    assert log.aborted_transactions(0, log.log_end_offset) == [AbortedTxn(0, abort, 1, abort + 1)]
    assert not log._txns.walked, "a read_committed fetch walked the log"
    # What the file says is what a fetch reports: an entry written by hand is reported.
    extra = AbortedTxn(abort + 1, abort + 1, 9, abort + 2)
    log.active_segment.txn_index.append(extra)
    log = reopen(log, clock)
    assert log.aborted_transactions(0, abort + 3) == [AbortedTxn(0, abort, 1, abort + 1), extra]


def test_a_torn_index_is_rebuilt_naming_the_file(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(tmp_path, clock)
    txn_append(log, [b"a"], pid=1)
    txn_append(log, [b"b"], pid=2)
    marker(log, ControlType.ABORT, pid=1)
    marker(log, ControlType.ABORT, pid=2)
    expected = index_files(log)[0]
    path = log.active_segment.txn_index.path
    log = reopen(log, clock)
    with path.open("r+b") as f:
        f.truncate(ENTRY.size + 7)
    with caplog.at_level(logging.WARNING):
        assert log.aborted_transactions(0, log.log_end_offset) == expected
    assert f"{path}: size {ENTRY.size + 7} is not a multiple" in caplog.text
    assert index_files(log) == {0: expected}


def test_the_append_path_rebuilds_a_corrupt_index_before_adding(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock)
    txn_append(log, [b"a"], pid=1)
    first = marker(log, ControlType.ABORT, pid=1)
    log = reopen(log, clock)
    log.active_segment.txn_index.path.write_bytes(ENTRY.pack(3, 1, 0, first, first + 1))
    txn_append(log, [b"b"], pid=1, seq=1)
    second = marker(log, ControlType.ABORT, pid=1)
    assert index_files(log) == {
        0: [AbortedTxn(0, first, 1, first + 1), AbortedTxn(first + 1, second, 1, second + 1)]
    }


@pytest.mark.parametrize("damage", ["deleted", "extra entry"])
def test_recovery_rebuilds_the_index_of_unflushed_segments(
    tmp_path: Path, clock: ManualClock, damage: str
) -> None:
    log = open_log(tmp_path, clock, SMALL)
    for i in range(6):
        txn_append(log, [b"a%d" % i], pid=1, seq=i)
        txn_append(log, [b"b%d" % i], pid=2, seq=i)
        put(log, b"k%d" % i, b"x" * 40)
    marker(log, ControlType.ABORT, pid=2)
    marker(log, ControlType.ABORT, pid=1)
    put(log, b"after", b"x" * 40)
    expected = index_files(log)
    assert sum(len(v) for v in expected.values()) == 2
    for path in log.directory.glob("*.txnindex"):
        if damage == "deleted":
            path.unlink()
        else:
            path.write_bytes(path.read_bytes() + ENTRY.pack(0, 7, 0, 10**6, 10**6 + 1))
    log = reopen(log, clock, clean=False)  # unclean: recovery from recovery point 0
    assert index_files(log) == expected
    assert log.aborted_transactions(0, log.log_end_offset) == sorted(
        t for entries in expected.values() for t in entries
    )


def test_the_cleaned_segment_keeps_the_entries_of_the_markers_it_keeps(
    tmp_path: Path, clock: ManualClock
) -> None:
    """KAFKA-13727: a clean of part of an aborted transaction keeps its marker and its index
    entry (the rest of its data, beyond the clean, must still read as aborted)."""
    log = open_log(tmp_path, clock, SMALL)
    for i in range(8):
        txn_append(log, [b"a%d" % i], pid=6, seq=i)
        put(log, b"k%d" % (i % 3), b"v%d" % i + b"x" * 40)
    end = marker(log, ControlType.ABORT, pid=6)
    put(log, b"pad", b"x")
    log.roll()
    entry = AbortedTxn(0, end, 6, end + 1)
    marker_base = max(s.base_offset for s in log.segments if s.base_offset <= end)
    assert index_files(log) == {marker_base: [entry]}
    second = log.segments[1].base_offset
    cleaner = Cleaner(offset_map=SkimpyOffsetMap(24 * 1024))
    cleaner.clean(CleanRequest(log, 0, second), clock.milliseconds())  # the first segment
    assert log.aborted_transactions(0, log.log_end_offset) == [entry]
    # A whole clean: the marker's segment is rewritten; the marker stays (its data was seen
    # in this pass), so its entry is in the cleaned segment's index.
    cleaner.clean(CleanRequest(log, 0, log.active_segment.base_offset), clock.milliseconds())
    found = index_files(log)
    assert list(found.values()) == [[entry]]
    [base] = found
    assert base in {s.base_offset for s in log.segments}
    assert not list(log.directory.glob("*.txnindex.*")), "a .cleaned/.swap/.deleted file left"
    # Read back after a restart: the same.
    log = reopen(log, clock)
    assert log.aborted_transactions(0, log.log_end_offset) == [entry]


def test_deleted_segments_take_their_index_along(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, SMALL)
    txn_append(log, [b"a"], pid=1)
    marker(log, ControlType.ABORT, pid=1)
    for i in range(10):
        put(log, b"k%d" % i, b"x" * 40)
    assert index_files(log)
    log.delete_segments(log.segments[:1], "test")
    log.delete_expired_files(force=True)
    assert index_files(log) == {}
    assert not list(log.directory.glob("*.txnindex*"))


def test_a_bulk_append_of_abort_markers_is_indexed(tmp_path: Path, clock: ManualClock) -> None:
    source = open_log(tmp_path / "source", clock, COMPACT)
    txn_append(source, [b"a"], pid=1)
    put(source, b"k", b"v")
    marker(source, ControlType.ABORT, pid=1)
    batches = [bytes(b.buffer) for _, b in iter_complete_batches(source.read(0, 1 << 20).records)]
    target = open_log(tmp_path / "target", clock, COMPACT)
    put(target, b"before", b"v")
    target.bulk_append(batches)
    assert target.aborted_transactions(0, target.log_end_offset) == [AbortedTxn(1, 3, 1, 4)]


def test_a_log_dir_written_without_txn_indexes_gets_them_once(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A Logkeeper before the transaction indexes left none: the first LogManager start writes
    them (one walk per log) and the marker file; later starts trust the files."""
    root = tmp_path / "data"
    tp = TopicPartition("t", 0)
    with LogManager([root], default_config=SMALL, clock=clock) as manager:
        log = manager.get_or_create_log(tp)
        txn_append(log, [b"a"], pid=1)
        for i in range(8):
            put(log, b"k%d" % i, b"x" * 40)
        txn_append(log, [b"b"], pid=2)
        marker(log, ControlType.ABORT, pid=1)
        marker(log, ControlType.ABORT, pid=2)
        expected = index_files(log)
        aborted = log.aborted_transactions(0, log.log_end_offset)
    assert len(aborted) == 2 and (root / files.TXN_INDEX_MARKER_FILE).is_file()
    # What an older Logkeeper left: no .txnindex, no marker.
    for path in (root / "t-0").glob("*.txnindex"):
        path.unlink()
    (root / files.TXN_INDEX_MARKER_FILE).unlink()
    with (
        caplog.at_level(logging.INFO, logger="storagecore"),
        LogManager([root], default_config=SMALL, clock=clock) as manager,
    ):
        log = manager.get_log(tp)
        assert index_files(log) == expected
        assert log.aborted_transactions(0, log.log_end_offset) == aborted
    assert "Transaction indexes of" in caplog.text and "1 written for 1 logs" in caplog.text
    # Once: with the marker there, a missing file means no aborted transaction.
    for path in (root / "t-0").glob("*.txnindex"):
        path.unlink()
    with LogManager([root], default_config=SMALL, clock=clock) as manager:
        assert manager.get_log(tp).aborted_transactions(0, 100) == []


def test_the_cleaner_takes_producers_from_the_producer_state_not_a_walk(
    tmp_path: Path, clock: ManualClock
) -> None:
    """What the cleaner keeps of each producer (Kafka's lastRecordsOfActiveProducers) comes
    from the producer state, and equals what the header walk finds (the reference); a round
    walks nothing, before or after a restart."""
    log = open_log(tmp_path, clock, SMALL)
    for i in range(6):
        idempotent_append(log, [b"i%d" % i], pid=11, seq=i)
        txn_append(log, [b"t%d" % i], pid=12, seq=i)
        put(log, b"k%d" % (i % 2), b"x" * 40)
        marker(log, ControlType.ABORT if i % 2 else ControlType.COMMIT, pid=12)
    marker(log, ControlType.ABORT, pid=13)  # a producer of markers only
    txn_append(log, [b"open"], pid=14)  # an open transaction
    now, expiration = clock.milliseconds(), 86_400_000
    ours = log.last_records_of_active_producers(now, expiration)
    assert set(ours) == {11, 12, 13, 14} and ours[13].last_data_offset is None
    assert not log._txns.walked
    assert ours == log.transaction_state().active_producers(now, expiration)
    log = reopen(log, clock)
    assert log.last_records_of_active_producers(now, expiration) == ours
    log.roll()
    run_round(log)
    assert not log._txns.walked, "a cleaner round walked the log"
