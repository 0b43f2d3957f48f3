"""What a read_committed consumer sees of a log: records below the last stable offset, minus
the aborted transactions the log reports for the range (``Log.aborted_transactions``, Kafka's
``collectAbortedTransactions``), filtered as Kafka's consumer filters them. Before and after
cleaning: a partial clean must not let aborted data read as committed (KAFKA-13727), a
transaction may span segments, and a data key equal to a marker's key is data (KAFKA-14055).
"""

from __future__ import annotations

from pathlib import Path

from storagecore import Log, LogConfig
from storagecore.cleaner import Cleaner, CleanRequest
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from storagecore.clock import ManualClock
from storagecore.records import layout
from storagecore.records.batch import ControlType, iter_complete_batches
from tests.unit.storagecore.helpers.cleaning import (
    COMPACT,
    marker,
    open_log,
    put,
    run_round,
    txn_append,
)

SMALL = LogConfig(
    cleanup_policy=("compact",),
    segment_bytes=300,
    index_interval_bytes=128,
    file_delete_delay_ms=0,
    delete_retention_ms=1000,
)


def read_committed(log: Log, start: int | None = None) -> list[bytes]:
    """Keys a read_committed consumer gets from ``start``: Kafka's consumer rule (a data batch
    of a producer whose aborted transaction began at or before it is skipped until that
    producer's ABORT marker)."""
    offset = log.log_start_offset if start is None else start
    lso = log.last_stable_offset
    aborted = log.aborted_transactions(offset, lso)
    pending = sorted(aborted, key=lambda a: a.first_offset)
    aborting: set[int] = set()
    keys: list[bytes] = []
    while offset < lso:
        fetch = log.read(offset, 1 << 20, max_offset=lso)
        if not fetch.records:
            break
        for _position, batch in iter_complete_batches(fetch.records):
            while pending and pending[0].first_offset <= batch.last_offset:
                aborting.add(pending.pop(0).producer_id)
            if batch.is_control:
                if batch.records_count and batch.records()[0].key == layout.CONTROL_RECORD_KEY.pack(
                    0, int(ControlType.ABORT)
                ):
                    aborting.discard(batch.producer_id)
            elif not (batch.is_transactional and batch.producer_id in aborting):
                keys.extend(r.key or b"" for r in batch.records() if r.offset >= offset)
            offset = batch.next_offset
    return keys


def test_aborted_and_open_transactions_are_not_read(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put(log, b"plain", b"x")
    txn_append(log, [b"c1", b"c2"], pid=1)
    txn_append(log, [b"a1"], pid=2)
    marker(log, ControlType.COMMIT, pid=1)
    txn_append(log, [b"a2"], pid=2, seq=1)
    marker(log, ControlType.ABORT, pid=2)
    open_at = txn_append(log, [b"open"], pid=3)
    put(log, b"after", b"x")
    assert log.last_stable_offset == open_at
    assert read_committed(log) == [b"plain", b"c1", b"c2"]
    marker(log, ControlType.COMMIT, pid=3)
    assert log.last_stable_offset == log.log_end_offset
    assert read_committed(log) == [b"plain", b"c1", b"c2", b"open", b"after"]


def abort_across_segments(log: Log) -> tuple[int, int]:
    """Producer 5's transaction, interleaved with plain records over several SMALL segments,
    then aborted: its first offset and its ABORT marker's offset."""
    first = txn_append(log, [b"a0"], pid=5)
    for i in range(1, 8):
        put(log, b"k%d" % i, b"x" * 40)
        txn_append(log, [b"a%d" % i], pid=5, seq=i)
    return first, marker(log, ControlType.ABORT, pid=5)


def test_a_transaction_spanning_segments(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, SMALL)
    first, end = abort_across_segments(log)
    assert len(log.segments) >= 3, "the transaction spans segments"
    [aborted] = log.aborted_transactions(first, log.log_end_offset)
    assert (aborted.first_offset, aborted.last_offset) == (first, end)
    # read from the middle of a later segment: the aborted transaction is still reported
    middle = log.segments[1].base_offset + 1
    assert log.aborted_transactions(middle, log.log_end_offset) == [aborted]
    keys = read_committed(log, middle)
    assert keys and all(k.startswith(b"k") for k in keys)


def test_a_partial_clean_keeps_aborted_data_hidden(tmp_path: Path, clock: ManualClock) -> None:
    """KAFKA-13727: an aborted transaction whose data spans the cleaned and the uncleaned part
    of the log, its marker beyond the clean, still reads as aborted."""
    log = open_log(tmp_path, clock, SMALL)
    for i in range(8):
        txn_append(log, [b"a%d" % i], pid=6, seq=i)
        put(log, b"k%d" % (i % 3), b"v%d" % i + b"x" * 40)
    marker(log, ControlType.ABORT, pid=6)
    put(log, b"pad", b"x")
    log.roll()
    before = read_committed(log)
    assert before and not [k for k in before if k.startswith(b"a")]
    second = log.segments[1].base_offset
    cleaner = Cleaner(offset_map=SkimpyOffsetMap(24 * 1024))
    now = clock.milliseconds()
    cleaner.clean(CleanRequest(log, log.log_start_offset, second), now)  # the first segment only
    after = read_committed(log)
    assert not [k for k in after if k.startswith(b"a")], "aborted data read as committed"
    assert [k for k in after if not k.startswith(b"k")] == [b"pad"]
    run_round(log)  # then the whole log
    assert not [k for k in read_committed(log) if k.startswith(b"a")]


def test_a_data_key_equal_to_a_marker_key_is_data(tmp_path: Path, clock: ManualClock) -> None:
    """KAFKA-14055: the key of an ABORT marker's control record, used as a data key, neither
    removes the marker by compaction nor is taken for a marker by the reader."""
    log = open_log(tmp_path, clock, COMPACT)
    abort_key = layout.CONTROL_RECORD_KEY.pack(0, int(ControlType.ABORT))
    txn_append(log, [b"t"], pid=7)
    marker(log, ControlType.ABORT, pid=7)
    put(log, abort_key, b"data with a marker's key")
    txn_append(log, [abort_key], pid=8)
    marker(log, ControlType.COMMIT, pid=8)
    put(log, b"pad", b"x")
    log.roll()
    assert read_committed(log) == [abort_key, abort_key, b"pad"]
    run_round(log)
    assert read_committed(log) == [abort_key, b"pad"]
    assert any(b.is_control for _p, b in iter_complete_batches(log.read(0, 1 << 20).records))
