"""Retention (Kafka UnifiedLogTest retention scenarios, kafka-log-layer.md §7 and §10)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from storagecore import Log, LogConfig, ManualClock, NewRecord, TopicPartition, build_batch
from storagecore.retention import RetentionRule, SegmentView, plan_retention
from tests.conftest import START_MS

ONE = len(build_batch([NewRecord(key=b"k", value=b"v" * 20, timestamp=START_MS)]))


def record(timestamp: int) -> bytes:
    return build_batch([NewRecord(key=b"k", value=b"v" * 20, timestamp=timestamp)])


def make_log(
    tmp_path: Path, clock: ManualClock, records: int, *, timestamp: int = START_MS, **config: Any
) -> Log:
    """``records`` one-record batches, ``segment.bytes`` = 5 of them (Kafka's tests' setup)."""
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=ONE * 5, **config), clock)
    for _ in range(records):
        log.append(record(timestamp))
    return log


def test_should_delete_size_based_segments(tmp_path: Path, clock: ManualClock) -> None:
    log = make_log(tmp_path, clock, 15, retention_bytes=ONE * 10)
    assert len(log.segments) == 3
    plan = log.delete_old_segments()
    assert len(log.segments) == 2
    assert [d.rule for d in plan.deletions] == [RetentionRule.SIZE]
    assert log.size_bytes >= ONE * 10  # Kafka's rule: never below retention.bytes


def test_should_not_delete_size_based_segments_when_under_retention_size(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = make_log(tmp_path, clock, 15, retention_bytes=ONE * 15)
    assert log.delete_old_segments().deletions == ()
    assert len(log.segments) == 3


def test_should_delete_time_based_segments_ready_to_be_deleted(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = make_log(tmp_path, clock, 15, timestamp=START_MS - 20_000, retention_ms=10_000)
    end = log.log_end_offset
    plan = log.delete_old_segments()
    assert plan.rolls_active_segment and len(plan.deletions) == 3
    assert [s.base_offset for s in log.segments] == [end]  # one empty segment remains
    assert log.size_bytes == 0 and log.log_start_offset == end


def test_should_not_delete_time_based_segments_when_none_ready(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = make_log(tmp_path, clock, 15, retention_ms=10_000_000)
    assert log.delete_old_segments().deletions == ()


def test_should_not_delete_segments_when_policy_does_not_include_delete(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = make_log(
        tmp_path,
        clock,
        15,
        timestamp=START_MS - 20_000,
        retention_ms=10_000,
        cleanup_policy=("compact",),
    )
    assert log.delete_old_segments().deletions == ()
    assert len(log.segments) == 3


def test_should_delete_segments_when_policy_is_compact_and_delete(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = make_log(
        tmp_path,
        clock,
        15,
        timestamp=START_MS - 20_000,
        retention_ms=10_000,
        cleanup_policy=("compact", "delete"),
    )
    log.delete_old_segments()
    assert len(log.segments) == 1


def test_should_delete_start_offset_breached_segments_when_policy_does_not_include_delete(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = make_log(tmp_path, clock, 15, cleanup_policy=("compact",))
    log.delete_records(7)  # inside the second segment [5, 10)
    plan = log.delete_old_segments()
    assert [d.rule for d in plan.deletions] == [RetentionRule.LOG_START_OFFSET]
    bases = [s.base_offset for s in log.segments]
    assert bases[0] <= log.log_start_offset == 7 < bases[1]


def test_garbage_collecting_segments_does_not_change_offset(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = make_log(tmp_path, clock, 12, timestamp=START_MS - 20_000, retention_ms=10_000)
    end = log.log_end_offset
    log.delete_old_segments()
    assert log.log_end_offset == end
    assert log.append(record(START_MS)).first_offset == end


def test_async_delete(tmp_path: Path, clock: ManualClock) -> None:
    log = make_log(tmp_path, clock, 15, retention_bytes=ONE * 10, file_delete_delay_ms=1000)
    log.delete_old_segments()
    deleted = sorted(p.name for p in log.directory.iterdir() if p.name.endswith(".deleted"))
    assert deleted == [
        "00000000000000000000.index.deleted",
        "00000000000000000000.log.deleted",
        "00000000000000000000.timeindex.deleted",
    ]
    clock.advance(999)
    assert log.delete_expired_files() == 0
    clock.advance(1)
    assert log.delete_expired_files() == 1
    assert not any(p.name.endswith(".deleted") for p in log.directory.iterdir())


def test_log_deletion_after_delete_records(tmp_path: Path, clock: ManualClock) -> None:
    log = make_log(tmp_path, clock, 15)
    log.delete_records(12)
    plan = log.delete_old_segments()
    assert plan.base_offsets == [0, 5]
    assert plan.log_start_offset_after == 12 and log.log_start_offset == 12
    assert [r.offset for r in log.records()] == [12, 13, 14]


def test_minus_one_disables_each_limit(tmp_path: Path, clock: ManualClock) -> None:
    log = make_log(tmp_path, clock, 15, timestamp=0, retention_ms=-1, retention_bytes=-1)
    assert log.delete_old_segments().deletions == ()


def test_time_retention_is_strictly_greater(tmp_path: Path, clock: ManualClock) -> None:
    log = make_log(tmp_path, clock, 6, timestamp=START_MS - 10_000, retention_ms=10_000)
    assert log.delete_old_segments().deletions == ()  # exactly retention.ms old: kept
    clock.advance(1)
    assert len(log.delete_old_segments().deletions) == 2


def test_a_future_timestamp_pins_its_segment_and_every_later_one(
    tmp_path: Path, clock: ManualClock
) -> None:
    # A day ahead is refused by Kafka 4's default message.timestamp.after.max.ms (1 h): a
    # topic that allows it, as one from before Kafka 4 did.
    config = LogConfig(
        segment_bytes=ONE * 5, retention_ms=10_000, message_timestamp_after_max_ms=2**63 - 1
    )
    log = Log.open(tmp_path / "t-0", config, clock)
    for i in range(15):
        # One day ahead: within segment.ms (7 days), so the record stays in segment [5, 10).
        log.append(record(START_MS + 86_400_000 if i == 7 else START_MS - 20_000))
    plan = log.delete_old_segments()
    assert plan.base_offsets == [0]  # segment [5, 10) holds the future record: the prefix stops


def test_time_retention_falls_back_to_mtime_without_timestamps(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = make_log(tmp_path, clock, 10, retention_ms=10_000)
    first = log.segments[0]
    first.max_timestamp_so_far = -1  # as for a segment whose time index was lost before Kafka 3
    os.utime(first.log.path, (0, (START_MS - 20_000) / 1000))
    assert log.plan_retention().base_offsets == [0]


def test_dry_run_changes_nothing(tmp_path: Path, clock: ManualClock) -> None:
    log = make_log(tmp_path, clock, 15, retention_bytes=ONE * 10)
    before = sorted(p.name for p in log.directory.iterdir())
    plan = log.plan_retention()
    assert plan.base_offsets == [0] and plan.deleted_bytes == ONE * 5
    assert sorted(p.name for p in log.directory.iterdir()) == before
    assert log.log_start_offset == 0


def test_plan_never_deletes_at_or_above_the_high_watermark() -> None:
    segments = [SegmentView(0, 5, 100, 0), SegmentView(5, 10, 100, 0), SegmentView(10, 12, 40, 0)]
    plan = plan_retention(
        TopicPartition("t", 0),
        segments,
        LogConfig(retention_ms=1),
        log_start_offset=0,
        high_watermark=7,
        now_ms=10**12,
    )
    assert plan.base_offsets == [0]


def test_plan_never_deletes_an_empty_last_segment() -> None:
    segments = [SegmentView(0, 5, 100, 0), SegmentView(5, 5, 0, -1)]
    plan = plan_retention(
        TopicPartition("t", 0),
        segments,
        LogConfig(retention_ms=1),
        log_start_offset=0,
        high_watermark=5,
        now_ms=10**12,
    )
    assert plan.base_offsets == [0] and not plan.rolls_active_segment
    assert plan.log_start_offset_after == 5


def test_size_rule_counts_only_what_the_log_start_pass_left() -> None:
    segments = [SegmentView(b, b + 5, 100, 0) for b in range(0, 25, 5)]
    plan = plan_retention(
        TopicPartition("t", 0),
        segments,
        LogConfig(retention_bytes=250),
        log_start_offset=6,
        high_watermark=25,
        now_ms=0,
    )
    # log start pass: [0,5); then 400 bytes left, diff 150: one more segment; 300 >= 250 stays.
    assert [(d.segment.base_offset, d.rule) for d in plan.deletions] == [
        (0, RetentionRule.LOG_START_OFFSET),
        (5, RetentionRule.SIZE),
    ]
    assert plan.size_bytes_after == 300
