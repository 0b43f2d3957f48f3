"""Segment grouping (Kafka LogCleanerTest testSegmentGrouping*, kafka-log-layer.md §8.6)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from storagecore import Log, LogConfig, ManualClock, NewRecord, build_batch
from storagecore.cleaner import group_segments_by_size
from tests.conftest import START_MS

INT_MAX = 2**31 - 1


@dataclasses.dataclass
class Fake:
    base_offset: int
    size_bytes: int = 100
    offset_index_size_bytes: int = 8
    time_index_size_bytes: int = 12


def bases(groups: list[list[Fake]]) -> list[list[int]]:
    return [[s.base_offset for s in group] for group in groups]


def test_grouping_by_log_size() -> None:
    segments = [Fake(i * 10) for i in range(10)]
    assert bases(group_segments_by_size(segments, 300, 10_000, 100)) == [
        [0, 10, 20],
        [30, 40, 50],
        [60, 70, 80],
        [90],
    ]


def test_grouping_by_index_size() -> None:
    segments = [Fake(i * 10, offset_index_size_bytes=40) for i in range(6)]
    assert bases(group_segments_by_size(segments, 10**9, 80, 60)) == [[0, 10], [20, 30], [40, 50]]
    timed = [Fake(i * 10, time_index_size_bytes=60) for i in range(4)]
    assert bases(group_segments_by_size(timed, 10**9, 120, 40)) == [[0, 10], [20, 30]]


def test_tiny_limits_give_singletons() -> None:
    segments = [Fake(i * 10) for i in range(4)]
    assert bases(group_segments_by_size(segments, 1, 1, 40)) == [[0], [10], [20], [30]]


def test_groups_never_span_more_than_int_max_offsets() -> None:
    """testSegmentGroupingWithSparseOffsets: relative offsets must fit in an int32."""
    segments = [Fake(0), Fake(INT_MAX // 2), Fake(INT_MAX - 1), Fake(INT_MAX + 10)]
    groups = group_segments_by_size(segments, 10**9, 10**9, INT_MAX + 20)
    for group in groups:
        assert group[-1].base_offset - group[0].base_offset <= INT_MAX
    assert bases(groups) == [[0, INT_MAX // 2], [INT_MAX - 1, INT_MAX + 10]]


def test_empty_segments_join_across_the_span() -> None:
    """testSegmentGroupingWithSparseOffsetsAndEmptySegments (KAFKA-12889)."""
    segments = [Fake(0), Fake(INT_MAX, size_bytes=0), Fake(2 * INT_MAX, size_bytes=0)]
    groups = group_segments_by_size(segments, 10**9, 10**9, 2 * INT_MAX + 5)
    assert bases(groups) == [[0, INT_MAX, 2 * INT_MAX]]


def test_grouping_real_segments(tmp_path: Path, clock: ManualClock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=500, index_interval_bytes=1), clock)
    for i in range(40):
        log.append(build_batch([NewRecord(key=b"k", value=b"v" * 30, timestamp=START_MS + i)]))
    segments = log.segments[:-1]
    groups = group_segments_by_size(segments, 1000, 10_000, log.active_segment.base_offset)
    assert [s for group in groups for s in group] == segments
    assert all(sum(s.size_bytes for s in group) <= 1000 for group in groups)
    assert max(len(group) for group in groups) == 2
