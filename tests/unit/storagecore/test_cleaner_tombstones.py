"""Tombstones and emptied batches (Kafka LogCleanerTest, kafka-log-layer.md §10 items 30, 39 and
KIP-534): the last batch of a round survives empty, a tombstone's delete horizon starts at the
first clean and is readable by kafka-python."""

from __future__ import annotations

from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch

from storagecore import ManualClock
from storagecore.records import layout
from tests.conftest import START_MS
from tests.unit.storagecore.helpers.cleaning import (
    COMPACT,
    batches,
    contents,
    open_log,
    put,
    put_many,
    run_round,
)


# -- 30: the last batch of the round --------------------------------------------------------------
def test_last_batch_of_the_round_survives_as_an_empty_batch(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock)
    put_many(log, [(b"a", b"1"), (b"b", b"2")])
    put_many(log, [(b"a", None), (b"b", None)])
    log.roll()
    run_round(log)  # stamps the horizon on the tombstones
    clock.advance(COMPACT.delete_retention_ms + 1)
    run_round(log, first_dirty=4)
    assert contents(log) == []
    remaining = batches(log)
    assert len(remaining) == 1 and remaining[0].records_count == 0
    assert remaining[0].last_offset == 3 and log.log_end_offset == 4
    assert remaining[0].size_bytes == layout.RECORD_BATCH_OVERHEAD
    assert not remaining[0].has_delete_horizon and remaining[0].base_timestamp == -1


# -- 39 and KIP-534: tombstone lifetime -----------------------------------------------------------
def test_tombstone_horizon_starts_at_the_first_clean(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put(log, b"k", b"v", ts=0)
    put(log, b"k", None, ts=0)  # an ancient tombstone
    put(log, b"other", b"x")
    log.roll()
    first = run_round(log)
    assert contents(log) == [(1, b"k", None), (2, b"other", b"x")], "kept after the first clean"
    stamped = next(b for b in batches(log) if b.base_offset == 1)
    assert stamped.has_delete_horizon
    assert stamped.delete_horizon_ms == clock.milliseconds() + COMPACT.delete_retention_ms
    assert first.next_delete_horizon_ms == stamped.delete_horizon_ms
    # the record still reads with its original timestamp (deltas re-based on the horizon)
    assert next(iter(stamped)).timestamp == 0
    clock.advance(COMPACT.delete_retention_ms - 1)
    run_round(log, first_dirty=3)
    assert (1, b"k", None) in contents(log), "still inside the horizon"
    clock.advance(1)
    second = run_round(log, first_dirty=3)
    assert contents(log) == [(2, b"other", b"x")]
    assert second.next_delete_horizon_ms is None


def test_tombstone_horizon_is_readable_by_kafka_python(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    put(log, b"k", b"v", ts=START_MS - 50)
    put(log, b"k", None, ts=START_MS - 40)
    put(log, b"j", b"w", ts=START_MS - 30)
    log.roll()
    run_round(log)
    stamped = next(b for b in batches(log) if b.has_delete_horizon)
    theirs = DefaultRecordBatch(bytes(stamped.buffer))
    assert theirs.validate_crc()
    (record,) = list(theirs)
    assert (record.offset, record.key, record.value, record.timestamp) == (
        1,
        b"k",
        None,
        START_MS - 40,
    )
