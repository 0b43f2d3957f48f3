"""How the cleaner writes batches (Kafka LogCleanerTest, kafka-log-layer.md §10 items 16, 17):
batches with nothing removed copied byte for byte, the rest recompressed with their codec,
LogAppendTime batches keeping their time, and batches larger than the I/O buffer and
max.message.bytes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from storagecore import Compression, LogConfig, ManualClock, NewRecord, build_batch
from tests.conftest import START_MS
from tests.unit.storagecore.helpers.cleaning import (
    batches,
    contents,
    open_log,
    put,
    put_many,
    run_round,
)


# -- verbatim copies and recompression ------------------------------------------------------------
@pytest.mark.parametrize("codec", list(Compression))
def test_batches_with_nothing_removed_are_copied_byte_for_byte(
    tmp_path: Path, clock: ManualClock, codec: Compression
) -> None:
    log = open_log(tmp_path, clock, LogConfig(cleanup_policy=("compact",), segment_bytes=4096))
    keep = build_batch(
        [NewRecord(key=b"u%d" % i, value=b"x" * 20, timestamp=START_MS + i) for i in range(5)],
        compression=codec,
    )
    log.append(keep)
    mixed = build_batch(
        [NewRecord(key=k, value=b"y" * 20, timestamp=START_MS) for k in (b"a", b"b", b"c")],
        compression=codec,
    )
    log.append(mixed)
    put(log, b"b", b"newer")
    log.roll()
    originals = batches(log)
    run_round(log)
    cleaned = batches(log)
    assert bytes(cleaned[0].buffer) == bytes(originals[0].buffer), "unchanged batch, same bytes"
    rebuilt = cleaned[1]
    assert rebuilt.compression is codec, "recompressed with the same codec"
    assert (rebuilt.base_offset, rebuilt.last_offset) == (5, 7), "base and last offset kept"
    assert [(r.offset, r.key) for r in rebuilt] == [(5, b"a"), (7, b"c")]
    theirs = DefaultRecordBatch(bytes(rebuilt.buffer))
    assert theirs.validate_crc() and [r.offset for r in theirs] == [5, 7]


def test_log_append_time_batches_keep_their_time(tmp_path: Path, clock: ManualClock) -> None:
    config = LogConfig(
        cleanup_policy=("compact",), segment_bytes=4096, message_timestamp_type="LogAppendTime"
    )
    log = open_log(tmp_path, clock, config)
    put_many(log, [(b"a", b"1"), (b"b", b"2")])
    clock.advance(10)
    log.append(build_batch([NewRecord(key=b"a", value=b"3"), NewRecord(key=b"c", value=b"4")]))
    clock.advance(10)
    put(log, b"c", b"5")
    log.roll()
    run_round(log)
    rebuilt = next(b for b in batches(log) if b.base_offset == 2)
    assert rebuilt.max_timestamp == START_MS + 10
    assert [r.timestamp for r in rebuilt] == [START_MS + 10]


# -- 16, 17: large batches ------------------------------------------------------------------------
def test_batch_larger_than_the_io_buffer_and_max_message_bytes(
    tmp_path: Path, clock: ManualClock
) -> None:
    config = LogConfig(
        cleanup_policy=("compact",), segment_bytes=8 << 20, max_message_bytes=4 << 20
    )
    log = open_log(tmp_path, clock, config)
    big = os.urandom(3 << 20)
    put(log, b"big", big)
    put(log, b"big2", b"small")
    put(log, b"big2", b"smaller")
    log.roll()
    log.update_config(LogConfig(cleanup_policy=("compact",), max_message_bytes=1000))
    run_round(log)
    assert contents(log) == [(0, b"big", big), (2, b"big2", b"smaller")]
