"""The Log: leader-path append, read, roll, timestamps, log start offset, deletion."""

from __future__ import annotations

import errno
import struct
from pathlib import Path
from typing import Any

import pytest

from storagecore import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Compression,
    ControlType,
    InvalidRecordError,
    Log,
    LogConfig,
    LogDirOfflineError,
    ManualClock,
    NewRecord,
    OffsetOutOfRangeError,
    RecordBatch,
    RecordTooLargeError,
    StorageError,
    build_batch,
    build_control_batch,
    native_append,
)
from storagecore.errors import CorruptRecordError
from storagecore.records import layout
from storagecore.records.batch import TimestampType, iter_complete_batches
from tests.conftest import START_MS, batch, break_disk, records


def open_log(tmp_path: Path, clock: ManualClock, **config: Any) -> Log:
    return Log.open(tmp_path / "topic-0", LogConfig(**config), clock)


def files_of(log: Log) -> list[str]:
    return sorted(p.name for p in log.directory.iterdir())


def test_offsets_are_assigned_from_the_log_end(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    first = log.append(batch(3))
    second = log.append(batch(2) + batch(4))
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset, second.record_count) == (3, 8, 6)
    assert log.log_end_offset == 9
    stored = [
        (b.base_offset, b.last_offset, b.partition_leader_epoch)
        for _, b in iter_complete_batches(log.read(0, 1 << 20).records)
    ]
    assert stored == [(0, 2, 0), (3, 4, 0), (5, 8, 0)]


def test_append_rewrites_only_the_base_offset(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(batch(1))
    produced = batch(5, compression=Compression.LZ4)
    log.append(produced)
    stored = log.read(1, 1 << 20).records
    assert stored[8:12] == produced[8:12] and stored[16:] == produced[16:]  # CRC and body untouched
    assert RecordBatch(stored).base_offset == 1


def test_read_semantics(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    for _ in range(10):
        log.append(batch(10))
    assert log.read(100, 1000).records == b""  # at the log end: empty
    with pytest.raises(OffsetOutOfRangeError, match=r"offset 101 is outside \[0, 100\]"):
        log.read(101, 1000)
    whole = log.read(35, 1)  # min one message: the whole batch holding 35 despite max 1 byte
    assert [b.base_offset for _, b in iter_complete_batches(whole.records)] == [30]
    strict = log.read(35, 1, min_one_message=False)
    assert strict.records == b"" and strict.first_entry_incomplete
    bounded = log.read(0, 1 << 20, max_offset=50)
    assert [b.base_offset for _, b in iter_complete_batches(bounded.records)] == [0, 10, 20, 30, 40]
    assert [r.offset for r in log.records(95)] == list(range(95, 100))
    assert [r.offset for r in log.records(7, 12)] == list(range(7, 12))


def test_fetch_reports_where_the_next_fetch_starts(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, index_interval_bytes=100)
    for _ in range(20):
        log.append(batch(5, value_size=40))
    size = len(batch(5, value_size=40))
    offset = 0
    while offset < log.log_end_offset:
        fetched = log.read(offset, size * 3 + 10)  # three whole batches and a cut fourth
        complete = [b for _, b in iter_complete_batches(fetched.records)]
        assert fetched.next_offset == complete[-1].next_offset
        offset = fetched.next_offset
    assert offset == 100
    cut = log.read(0, 10, min_one_message=False)
    assert cut.records == b"" and cut.next_offset == 0
    bounded = log.read(0, 1 << 20, max_offset=50)
    assert bounded.next_offset == 50


def test_reads_cross_segments_and_gaps(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=300)
    for _ in range(20):
        log.append(batch(2, value_size=30))
    assert len(log.segments) > 3
    assert [r.offset for r in log.records()] == list(range(40))
    for segment in log.segments:
        assert segment.base_offset == log.read(segment.base_offset, 10).fetch_offset


def test_size_based_roll(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=1000)
    one = len(batch(1, value_size=100))
    for _ in range(20):
        log.append(batch(1, value_size=100))
    per_segment = 1000 // one
    assert [s.base_offset for s in log.segments] == list(range(0, 20, per_segment))
    assert all(s.size_bytes <= 1000 for s in log.segments)


def test_append_larger_than_segment_bytes_is_rejected(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=200)
    with pytest.raises(RecordTooLargeError, match="segment.bytes=200"):
        log.append(batch(1, value_size=300))
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_time_based_roll_uses_record_timestamps(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, segment_ms=1000)
    log.append(batch(1, start_ms=START_MS))
    log.append(batch(1, start_ms=START_MS + 1000))
    assert len(log.segments) == 1
    log.append(batch(1, start_ms=START_MS + 1001))
    assert [s.base_offset for s in log.segments] == [0, 2]
    clock.advance(10_000)  # wall-clock time alone never rolls
    assert len(log.segments) == 2


def test_time_based_roll_jitter(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, segment_ms=1000, segment_jitter_ms=500)
    jitter = log.active_segment.rolling_jitter_ms
    log.append(batch(1, start_ms=START_MS))
    jitter = log.active_segment.rolling_jitter_ms
    assert 0 <= jitter < 500
    log.append(batch(1, start_ms=START_MS + 1000 - jitter))
    assert len(log.segments) == 1
    log.append(batch(1, start_ms=START_MS + 1001 - jitter))
    assert len(log.segments) == 2


def test_compacted_topic_rolls_by_max_compaction_lag(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, cleanup_policy=("compact",), max_compaction_lag_ms=100)
    log.append(batch(1, start_ms=START_MS))
    log.append(batch(1, start_ms=START_MS + 101))
    assert len(log.segments) == 2


def test_roll_when_offset_index_is_full(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, index_interval_bytes=1, segment_index_bytes=8 * 3)
    for _ in range(12):
        log.append(batch(1))
    assert len(log.segments) >= 3
    assert [r.offset for r in log.records()] == list(range(12))


def test_roll_flushes_the_old_segment_and_moves_the_recovery_point(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock, segment_bytes=300)
    while len(log.segments) < 3:
        log.append(batch(2, value_size=40))
    assert log.recovery_point == log.active_segment.base_offset


def test_flush_messages(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, flush_messages=5)
    log.append(batch(3))
    assert log.recovery_point == 0
    log.append(batch(2))
    assert log.recovery_point == 5


@pytest.mark.parametrize("way", ["native", "general"])
def test_a_failed_flush_after_a_written_append_is_not_retried(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    """flush.messages reached, the flush fails after the write: the records are there once and
    the append fails; out of descriptors (a kind the append retries) it is still not retried,
    which would write the records twice."""
    if way == "general":  # the general steps, also where the extension is built
        monkeypatch.setattr(native_append, "append_active", None)
        monkeypatch.setattr(native_append, "append_to_segment", None)
    log = open_log(tmp_path, clock, flush_messages=2)
    log.append(batch(1))

    def failing_flush(offset: int) -> None:
        raise OSError(errno.EMFILE, "Too many open files")  # a retriable kind, even so

    monkeypatch.setattr(log._local, "flush", failing_flush)
    with pytest.raises(StorageError, match="after an append"):
        log.append(batch(1))
    assert log.log_end_offset == 2 and log.size_bytes == 2 * len(batch(1))


def test_nothing_is_written_when_any_batch_is_bad(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    bad = bytearray(batch(2))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="batch 1 .*CRC mismatch"):
        log.append(batch(1) + bytes(bad) + batch(1))
    assert log.log_end_offset == 0 and log.size_bytes == 0


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: struct.pack_into(">q", b, 0, 5), "base offset 0"),
        (
            lambda b: struct.pack_into(">i", b, layout.LAST_OFFSET_DELTA_OFFSET, 7),
            "last offset delta",
        ),
        (
            lambda b: struct.pack_into(">qhi", b, layout.PRODUCER_ID_OFFSET, 9, 0, -1),
            "invalid base sequence",
        ),
    ],
)
def test_client_batch_shape_checks(
    tmp_path: Path, clock: ManualClock, mutate: Any, message: str
) -> None:
    log = open_log(tmp_path, clock)
    data = bytearray(batch(2))
    mutate(data)
    struct.pack_into(
        ">I",
        data,
        layout.CRC_OFFSET,
        __import__("storagecore.records.crc", fromlist=["crc32c"]).crc32c(bytes(data[21:])),
    )
    with pytest.raises(InvalidRecordError, match=message):
        log.append(bytes(data))


def test_clients_may_not_write_control_batches(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    marker = build_control_batch(
        ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=START_MS
    )
    with pytest.raises(InvalidRecordError, match="control batches"):
        log.append(marker)
    from storagecore import AppendOrigin

    info = log.append(marker, origin=AppendOrigin.COORDINATOR)
    assert (info.first_offset, info.last_offset) == (0, 0)


def test_compacted_topic_rejects_null_keys(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, cleanup_policy=("compact",))
    with pytest.raises(
        InvalidRecordError, match="compacted topic cannot accept a record without a key"
    ):
        log.append(
            build_batch(
                [
                    NewRecord(key=b"k", value=b"v", timestamp=START_MS),
                    NewRecord(key=None, value=b"v", timestamp=START_MS),
                ]
            )
        )
    assert log.log_end_offset == 0
    log.append(build_batch([NewRecord(key=b"k", value=None, timestamp=START_MS)]))  # tombstones ok


def test_max_message_bytes(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, max_message_bytes=500)
    with pytest.raises(RecordTooLargeError, match="max.message.bytes=500"):
        log.append(batch(1, value_size=600))


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_highly_compressible_batches_are_accepted(
    tmp_path: Path, clock: ManualClock, codec: Compression
) -> None:
    """8 MiB of records (more than 5x max.message.bytes) in a batch below max.message.bytes."""
    log = open_log(tmp_path, clock)
    data = build_batch(
        [NewRecord(key=b"k", value=bytes(2 << 20), timestamp=START_MS) for _ in range(4)],
        compression=codec,
    )
    assert len(data) < log.config.max_message_bytes
    assert log.append(data).record_count == 4


def test_timestamp_bounds(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(
        tmp_path, clock, message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=10
    )
    with pytest.raises(InvalidRecordError, match="message.timestamp.before.max.ms=1000"):
        log.append(batch(1, start_ms=START_MS - 1001))
    with pytest.raises(InvalidRecordError, match="message.timestamp.after.max.ms=10"):
        log.append(batch(1, start_ms=START_MS + 11))
    log.append(batch(1, start_ms=START_MS + 10))


def test_log_append_time(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    clock.advance(5)
    info = log.append(batch(3, start_ms=1))
    assert info.log_append_time == START_MS + 5
    stored = RecordBatch(log.read(0, 1 << 20).records)
    stored.validate()
    assert stored.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert {r.timestamp for r in stored.records()} == {START_MS + 5}


def test_create_time_max_timestamp_is_corrected(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    wrong = build_batch(records(3), max_timestamp=1)
    log.append(wrong)
    stored = RecordBatch(log.read(0, 1 << 20).records)
    stored.validate()
    assert stored.max_timestamp == START_MS + 2


@pytest.mark.parametrize("target", ["gzip", "zstd", "uncompressed"])
def test_compression_type_rewrites_batches(tmp_path: Path, clock: ManualClock, target: str) -> None:
    log = open_log(tmp_path, clock, compression_type=target)
    log.append(
        build_batch(
            records(20),
            compression=Compression.SNAPPY,
            producer_id=4,
            producer_epoch=1,
            base_sequence=0,
        )
    )
    stored = RecordBatch(log.read(0, 1 << 20).records)
    stored.validate()
    assert stored.compression is Compression.from_name(target)
    assert (stored.producer_id, stored.base_sequence) == (4, 0)
    assert [r.key for r in stored.records()] == [r.key for r in records(20)]


def test_offset_for_timestamp(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=400, index_interval_bytes=1)
    for i in range(30):
        log.append(build_batch([NewRecord(key=b"k", value=b"v" * 20, timestamp=START_MS + i * 10)]))
    assert len(log.segments) > 2
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (-1, 0)
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (-1, 30)
    assert log.offset_for_timestamp(START_MS + 55) == (START_MS + 60, 6)
    assert log.offset_for_timestamp(START_MS + 290) == (START_MS + 290, 29)
    assert log.offset_for_timestamp(START_MS + 291) is None
    assert log.offset_for_timestamp(0) == (START_MS, 0)
    log.append(
        build_batch(
            [
                NewRecord(key=b"a", value=b"", timestamp=START_MS + 5000),
                NewRecord(key=b"b", value=b"", timestamp=START_MS + 10),
            ]
        )
    )
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (START_MS + 5000, 30)


def test_delete_records_moves_the_log_start(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(batch(10))
    assert log.delete_records(4) == 4
    with pytest.raises(OffsetOutOfRangeError, match="offset 3 is outside"):
        log.read(3, 100)
    assert [r.offset for r in log.records()] == list(range(4, 10))
    assert log.delete_records(2) == 4  # never lowered
    with pytest.raises(OffsetOutOfRangeError, match="past the high watermark 10"):
        log.delete_records(11)
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (-1, 4)
    assert log.offset_for_timestamp(0) == (START_MS + 4, 4)


def test_delete_segments_is_asynchronous(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=300, file_delete_delay_ms=1000)
    while len(log.segments) < 4:
        log.append(batch(2, value_size=40))
    first, second = log.segments[:2]
    end = log.log_end_offset
    assert log.delete_segments([first, second], "test") == 2
    assert log.log_start_offset == log.segments[0].base_offset
    assert any(name.endswith(".log.deleted") for name in files_of(log))
    assert log.delete_expired_files() == 0
    clock.advance(1000)
    assert log.delete_expired_files() == 2
    assert not any(name.endswith(".deleted") for name in files_of(log))
    assert log.log_end_offset == end


def test_deleting_every_segment_rolls_first(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=300, file_delete_delay_ms=0)
    while len(log.segments) < 3:
        log.append(batch(2, value_size=40))
    end = log.log_end_offset
    log.delete_segments(log.segments, "everything expired")
    assert [s.base_offset for s in log.segments] == [end]
    assert log.log_start_offset == end == log.log_end_offset
    assert log.append(batch(1)).first_offset == end  # offsets never go back


def test_io_error_takes_the_log_offline(tmp_path: Path, clock: ManualClock) -> None:
    failures: list[tuple[Path, OSError]] = []
    log = Log.open(
        tmp_path / "topic-0", LogConfig(), clock, on_io_error=lambda d, e: failures.append((d, e))
    )
    log.append(batch(1))
    break_disk(log)  # the disk goes away under the log
    with pytest.raises(LogDirOfflineError, match="is now offline"):
        log.append(batch(1))
    assert failures and failures[0][0] == tmp_path
    with pytest.raises(LogDirOfflineError, match="offline after an I/O error"):
        log.read(0, 100)


def test_roll_deletes_stale_files_at_the_new_base(tmp_path: Path, clock: ManualClock) -> None:
    """Kafka testRollSegmentThatAlreadyExists: leftover files named like the new segment."""
    log = open_log(tmp_path, clock)
    log.append(batch(3))
    stale = log.directory / "00000000000000000003.log"
    stale.write_bytes(b"garbage from an earlier life")
    (log.directory / "00000000000000000003.index").write_bytes(b"\x00" * 16)
    log.roll()
    assert log.active_segment.base_offset == 3 and stale.stat().st_size == 0
    assert log.append(batch(1)).first_offset == 3
    assert [r.offset for r in log.records()] == [0, 1, 2, 3]


def test_deleted_segment_files_stay_readable_until_unlinked(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Kafka testFileReferencesAfterAsyncDelete: a reader holding the segment keeps working."""
    log = open_log(tmp_path, clock, segment_bytes=300, file_delete_delay_ms=1000)
    while len(log.segments) < 3:
        log.append(batch(2, value_size=40))
    first = log.segments[0]
    log.delete_segments([first], "test")
    assert first.log.path.name.endswith(".log.deleted")
    fetched = first.read(first.base_offset, 10_000)
    assert fetched is not None and fetched.records
    clock.advance(1000)
    log.delete_expired_files()
    assert not first.log.path.exists()
