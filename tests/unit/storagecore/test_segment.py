"""Kafka LogSegmentTest scenarios (kafka-log-layer.md §3, §4, §10 items 71-76)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storagecore import NewRecord, RecordBatch, build_batch
from storagecore.errors import SegmentOffsetOverflowError
from storagecore.records.batch import iter_complete_batches
from storagecore.roll_params import RollParams, should_roll
from storagecore.segment import LogSegment
from storagecore.segment_recovery import recover_segment

BASE = 40


def make(
    tmp_path: Path, base: int = BASE, index_interval_bytes: int = 10, max_index: int = 1000
) -> LogSegment:
    return LogSegment.open(
        tmp_path,
        base,
        index_interval_bytes=index_interval_bytes,
        max_index_size_bytes=max_index,
        now_ms=0,
    )


def append(segment: LogSegment, base_offset: int, *values: bytes, timestamp: int = 0) -> bytes:
    data = build_batch(
        [NewRecord(key=None, value=v, timestamp=timestamp) for v in values], base_offset=base_offset
    )
    last = base_offset + len(values) - 1
    segment.append(last, timestamp, last, data)
    return data


def offsets(data: bytes) -> list[int]:
    return [r.offset for _, b in iter_complete_batches(data) for r in b.records()]


def test_read_on_empty_segment_is_none(tmp_path: Path) -> None:
    assert make(tmp_path).read(BASE, 300) is None


def test_read_before_first_offset(tmp_path: Path) -> None:
    segment = make(tmp_path)
    data = append(segment, 50, b"hello", b"there", b"little", b"bee")
    fetched = segment.read(41, 300)
    assert fetched is not None and fetched.records == data


def test_read_after_last_is_none(tmp_path: Path) -> None:
    segment = make(tmp_path)
    append(segment, 50, b"hello", b"there")
    assert segment.read(52, 200) is None


def test_read_from_gap(tmp_path: Path) -> None:
    segment = make(tmp_path)
    append(segment, 50, b"hello", b"there")
    second = append(segment, 60, b"alpha", b"beta")
    fetched = segment.read(55, 200)
    assert fetched is not None and fetched.records == second


def test_read_returns_the_whole_batch_holding_the_offset(tmp_path: Path) -> None:
    segment = make(tmp_path)
    first = append(segment, 50, b"a", b"b", b"c")
    fetched = segment.read(51, 10_000)
    assert fetched is not None and fetched.records.startswith(first)
    assert offsets(fetched.records) == [50, 51, 52]


def test_read_with_max_position_and_min_one_message(tmp_path: Path) -> None:
    segment = make(tmp_path)
    first = append(segment, 50, b"x" * 100)
    append(segment, 51, b"y" * 100)
    bounded = segment.read(50, 10_000, max_position=len(first))
    assert bounded is not None and bounded.records == first
    too_small = segment.read(50, 10)
    assert too_small is not None and too_small.records == b"" and too_small.first_entry_incomplete
    at_least_one = segment.read(50, 10, min_one_message=True)
    assert at_least_one is not None and at_least_one.records == first
    cut = segment.read(50, len(first) + 20)
    assert cut is not None and len(cut.records) == len(first) + 20  # last batch cut, whole first


def test_truncate(tmp_path: Path) -> None:
    segment = make(tmp_path)
    for offset in range(BASE, BASE + 30, 2):
        append(segment, offset, b"a", b"b", timestamp=offset)
    removed = segment.truncate_to(BASE + 10, 1000, now_ms=5)
    assert removed > 0
    assert segment.next_offset() == BASE + 10
    assert segment.read(BASE + 10, 1000) is None
    fetched = segment.read(BASE, 10_000)
    assert fetched is not None and offsets(fetched.records) == list(range(BASE, BASE + 10))
    assert segment.offset_index.last_offset < BASE + 10


def test_truncate_full_and_empty(tmp_path: Path) -> None:
    segment = make(tmp_path)
    assert segment.truncate_to(0, 1000, now_ms=1) == 0
    append(segment, BASE, b"a", timestamp=7)
    segment.truncate_to(0, 1000, now_ms=99)
    assert segment.size_bytes == 0 and segment.created_ms == 99
    assert segment.next_offset() == BASE
    assert segment.offset_index.entries == 0 and segment.time_index.entries == 0


def test_reload_largest_timestamp_and_next_offset_after_truncation(tmp_path: Path) -> None:
    segment = make(tmp_path, index_interval_bytes=0)
    for i in range(10):
        append(segment, BASE + i, b"v", timestamp=1000 + i)
    segment.truncate_to(BASE + 5, 1000, now_ms=0)
    # Entries are written for the *previous* appends, so the time index's last entry after the
    # truncation is at most offset 44.
    assert segment.max_timestamp_so_far <= 1004
    assert segment.next_offset() == BASE + 5


def test_find_offset_by_timestamp(tmp_path: Path) -> None:
    """Kafka's example: offsets 40..49 at timestamps i*10."""
    segment = make(tmp_path, index_interval_bytes=1)
    for i in range(10):
        offset = BASE + i
        segment.append(
            offset,
            offset * 10,
            offset,
            build_batch(
                [NewRecord(key=None, value=b"m", timestamp=offset * 10)], base_offset=offset
            ),
        )
    assert segment.find_offset_by_timestamp(420, 0) == (420, 42)
    assert segment.find_offset_by_timestamp(421, 0) == (430, 43)
    assert segment.find_offset_by_timestamp(430, 0) == (430, 43)
    assert segment.find_offset_by_timestamp(431, 0) == (440, 44)
    assert segment.find_offset_by_timestamp(491, 0) is None
    assert segment.find_offset_by_timestamp(401, 0) == (410, 41)
    assert segment.find_offset_by_timestamp(399, 0) == (400, 40)
    assert segment.find_offset_by_timestamp(399, 45) == (450, 45)  # starting offset respected


def test_append_offset_overflow(tmp_path: Path) -> None:
    segment = make(tmp_path, base=0)
    with pytest.raises(SegmentOffsetOverflowError, match="2147483648"):
        append(segment, 2**31, b"x")
    assert segment.size_bytes == 0


def test_next_offset_calculation(tmp_path: Path) -> None:
    segment = make(tmp_path)
    assert segment.next_offset() == BASE
    append(segment, 50, b"a", b"b", b"c")
    assert segment.next_offset() == 53
    segment.close()
    assert make(tmp_path).next_offset() == 53


def test_recovery_fixes_corrupt_index(tmp_path: Path) -> None:
    segment = make(tmp_path, index_interval_bytes=1, max_index=12_000)
    for i in range(100):
        append(segment, BASE + i, str(i).encode(), timestamp=i)
    # garbage in both indexes
    segment.offset_index._write_entry((0, 0))
    recover_segment(segment, 12_000)
    for i in range(100):
        fetched = segment.read(BASE + i, 1024)
        assert fetched is not None and offsets(fetched.records)[0] == BASE + i


def test_recovery_with_corrupt_message_truncates_at_it(tmp_path: Path) -> None:
    segment = make(tmp_path)
    positions = []
    for i in range(20):
        positions.append(segment.size_bytes)
        append(segment, BASE + i, b"value-%d" % i, timestamp=i)
    os.pwrite(segment.log.fd, b"\xff", positions[12] + 70)  # inside batch 12, under the CRC
    truncated = recover_segment(segment, 1000)
    assert segment.size_bytes == positions[12]
    assert truncated > 0
    assert segment.next_offset() == BASE + 12


def test_recovery_with_a_smaller_index_keeps_a_sparser_index(tmp_path: Path) -> None:
    segment = make(tmp_path, index_interval_bytes=1, max_index=12_000)
    for i in range(50):
        append(segment, BASE + i, b"v", timestamp=i)
    recover_segment(segment, 48)  # room for 4 offset entries and 3 time entries only
    assert segment.offset_index.entries <= 4
    for i in range(50):
        fetched = segment.read(BASE + i, 1024)
        assert fetched is not None and offsets(fetched.records)[0] == BASE + i


def test_change_file_suffixes(tmp_path: Path) -> None:
    segment = make(tmp_path)
    append(segment, BASE, b"x")
    segment.change_file_suffixes("", ".cleaned")
    assert segment.log.path.name == "00000000000000000040.log.cleaned"
    assert segment.offset_index.path.name == "00000000000000000040.index.cleaned"
    assert segment.time_index.path.name == "00000000000000000040.timeindex.cleaned"
    segment.change_file_suffixes(".cleaned", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000040.index",
        "00000000000000000040.log",
        "00000000000000000040.timeindex",
    ]
    fetched = segment.read(BASE, 100)
    assert fetched is not None and RecordBatch(fetched.records).records()[0].value == b"x"


def test_first_batch_timestamp_drives_time_based_roll(tmp_path: Path) -> None:
    segment = make(tmp_path)
    append(segment, BASE, b"x", timestamp=1_000)

    def params(ts: int, now: int = 0) -> RollParams:
        return RollParams(
            max_segment_ms=100,
            max_segment_bytes=10**6,
            max_timestamp_in_messages=ts,
            max_offset_in_messages=BASE + 1,
            messages_size=10,
            now_ms=now,
        )

    assert not should_roll(segment, params(1_100))
    assert should_roll(segment, params(1_101))
    segment.close()
    reopened = make(tmp_path)  # on reload the first batch's max timestamp is used
    assert should_roll(reopened, params(1_101)) and not should_roll(reopened, params(1_050))


def test_roll_on_size_index_full_and_overflow(tmp_path: Path) -> None:
    # 36 bytes: 4 offset-index entries, 3 time-index entries (one kept for the final entry).
    segment = make(tmp_path, index_interval_bytes=0, max_index=36)
    append(segment, BASE, b"x" * 50)
    base_params = dict(max_segment_ms=10**9, max_timestamp_in_messages=0, now_ms=0)
    assert should_roll(
        segment,
        RollParams(
            max_segment_bytes=120, max_offset_in_messages=BASE + 1, messages_size=60, **base_params
        ),
    )
    assert not should_roll(
        segment,
        RollParams(
            max_segment_bytes=10**6,
            max_offset_in_messages=BASE + 1,
            messages_size=60,
            **base_params,
        ),
    )
    assert should_roll(
        segment,
        RollParams(
            max_segment_bytes=10**6,
            max_offset_in_messages=BASE + 2**31,
            messages_size=60,
            **base_params,
        ),
    )
    append(segment, BASE + 1, b"y", timestamp=1)
    append(segment, BASE + 2, b"z", timestamp=2)
    assert segment.time_index.is_full() and not segment.offset_index.is_full()
    assert should_roll(
        segment,
        RollParams(
            max_segment_bytes=10**6,
            max_offset_in_messages=BASE + 3,
            messages_size=60,
            **base_params,
        ),
    )


def test_close_writes_final_time_entry_and_trims(tmp_path: Path) -> None:
    segment = make(tmp_path, index_interval_bytes=10**6)
    append(segment, BASE, b"a", timestamp=500)
    append(segment, BASE + 1, b"b", timestamp=700)
    assert segment.time_index.entries == 0
    segment.close()
    assert (tmp_path / "00000000000000000040.index").stat().st_size == 0
    assert (tmp_path / "00000000000000000040.timeindex").stat().st_size == 12
    reopened = make(tmp_path)
    assert reopened.time_index.last_entry == (700, BASE + 1)


@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    start=st.integers(0, 200),
    max_size=st.integers(0, 2_000),
    index_interval_bytes=st.sampled_from([1, 100, 4096]),
)
@settings(max_examples=150, deadline=None)
def test_read_next_offset_from_the_bytes_read_matches_the_file_walk(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    start: int,
    max_size: int,
    index_interval_bytes: int,
) -> None:
    """A bytes read finds the offset after its last complete batch in the bytes it read (no
    header reads); it is the offset the file's own header walk gives, and within the data."""
    segment = make(tmp_path_factory.mktemp("seg"), index_interval_bytes=index_interval_bytes)
    offset = BASE
    for count in sizes:
        append(segment, offset, *(b"v%03d" % i * (1 + i % 7) for i in range(count)))
        offset += count
    start_offset = BASE + start % (offset - BASE)
    data = segment.read(start_offset, max_size, min_one_message=start % 2 == 0)
    assert data is not None
    header = segment.translate_offset(start_offset)
    assert header is not None
    if not data.records:  # nothing to walk: a zero limit, or a first batch above it
        assert data.next_offset == start_offset
        segment.close()
        return
    end = data.position + len(data.records)
    assert data.next_offset == segment._next_offset_before(header, end)
    complete = offsets(data.records)
    assert data.next_offset == (complete[-1] + 1 if complete else header.base_offset)
    segment.close()
