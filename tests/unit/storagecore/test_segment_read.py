"""LogSegment.read by offset: the native read (storagecore.records.fetch, _fetch.c) against the
Python reference (storagecore.segment_read) and both against a model of the segment's batches,
on generated segments: batch sizes around the native walk's window and hop sizes, several
batches per append (index entries carrying the last of them), offset gaps, legacy entries, a
cut trailing batch, damaged headers; every limit of a read.
"""

from __future__ import annotations

import array
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storagecore import NewRecord, build_batch
from storagecore.errors import CorruptRecordError
from storagecore.file_cache import FileCache
from storagecore.log_info import FetchData
from storagecore.records import fetch, layout
from storagecore.records.fetch import ReadByOffset
from storagecore.segment import LogSegment
from storagecore.segment_read import SegmentReads

BASE = 1_000
needs_native = pytest.mark.skipif(fetch.read_by_offset is None, reason="native read not built")


def test_expected_implementation_is_loaded() -> None:
    forced_python = os.environ.get("STORAGECORE_NO_EXTENSIONS", "") not in ("", "0")
    assert ("python" if forced_python else "c") == fetch.IMPLEMENTATION


class Batch(NamedTuple):
    """A complete batch as the model sees it (a legacy entry's base is its last offset)."""

    position: int
    base_offset: int
    last_offset: int
    size: int


def _legacy_entry(offset: int, size: int) -> bytes:
    """A magic-1 entry of ``size`` bytes (only its framing is read on this path)."""
    body = bytearray(size - layout.LOG_OVERHEAD)
    body[layout.MAGIC_OFFSET - layout.LOG_OVERHEAD] = 1
    return offset.to_bytes(8, "big", signed=True) + len(body).to_bytes(4, "big") + bytes(body)


def _v2_batch(offset: int, count: int, value_bytes: int, gap: int) -> bytes:
    records = [NewRecord(key=None, value=bytes(value_bytes), timestamp=i) for i in range(count)]
    # A compacted batch keeps its last offset delta past its records (gap > 0).
    return build_batch(records, base_offset=offset, last_offset_delta=count - 1 + gap)


#: One append: batches of (records, value bytes, offsets removed by compaction) or a legacy
#: entry (count 0, value bytes = its size); the offset gap before it.
appends = st.lists(
    st.tuples(
        st.lists(
            st.tuples(
                st.integers(0, 4),
                st.sampled_from([1, 40, 300, 3_000, 5_000, 9_000]),
                st.sampled_from([0, 0, 0, 2]),
            ),
            min_size=1,
            max_size=3,
        ),
        st.sampled_from([0, 0, 0, 1, 7]),
    ),
    min_size=0,
    max_size=14,
)


class Segment(NamedTuple):
    segment: LogSegment
    batches: list[Batch]
    v2_only: bool


def build_segment(
    directory: Path,
    parts: list[tuple[list[tuple[int, int, int]], int]],
    index_interval_bytes: int,
    tail_cut: int,
    cache: bool,
) -> Segment:
    """A segment of ``parts`` (each one append), then ``tail_cut`` bytes of one more batch."""
    segment = LogSegment.open(
        directory,
        BASE,
        index_interval_bytes=index_interval_bytes,
        max_index_size_bytes=100_000,
        now_ms=0,
        file_cache=FileCache(64) if cache else None,
    )
    batches: list[Batch] = []
    offset, position, v2_only = BASE, 0, True
    for batch_specs, gap in parts:
        offset += gap
        chunk = b""
        for count, value_bytes, removed in batch_specs:
            if count == 0:
                data = _legacy_entry(offset, max(26, value_bytes))
                batches.append(Batch(position, offset, offset, len(data)))
                v2_only = False
                offset += 1
            else:
                data = _v2_batch(offset, count, value_bytes, removed)
                last = offset + count - 1 + removed
                batches.append(Batch(position, offset, last, len(data)))
                offset = last + 1
            chunk += data
            position += len(data)
        segment.append(offset - 1, 0, offset - 1, chunk)
    if tail_cut:
        whole = _v2_batch(offset, 2, 3_000, 0)
        segment.log.append(whole[: min(tail_cut, len(whole) - 1)])
    return Segment(segment, batches, v2_only)


def model_read(
    data: bytes,
    batches: list[Batch],
    start: int,
    max_size: int,
    max_position: int,
    min_one: bool,
) -> FetchData | None:
    """LogSegment.read by the book: the first batch ending at or after ``start``, the limits,
    and the offset after the last batch that the bytes read hold whole."""
    first = next((b for b in batches if b.last_offset >= start), None)
    if first is None:
        return None
    adjusted = max(max_size, first.size) if min_one else max_size
    if adjusted == 0 or first.position >= max_position:
        return FetchData(start, BASE, first.position, b"", False, start)
    if not min_one and first.size > max_size:
        return FetchData(start, BASE, first.position, b"", True, start)
    records = data[first.position : first.position + min(max_position - first.position, adjusted)]
    end = first.position + len(records)
    complete = [b for b in batches if first.position <= b.position and b.position + b.size <= end]
    next_offset = complete[-1].last_offset + 1 if complete else first.base_offset
    return FetchData(start, BASE, first.position, records, False, next_offset)


def outcome(read: Callable[[], FetchData | None]) -> Any:
    """What a read returned, or the error it raised (both paths must raise the same)."""
    try:
        return read()
    except CorruptRecordError as exc:
        return ("CorruptRecordError", str(exc))


reads = st.lists(
    st.tuples(
        st.integers(BASE - 3, BASE + 120),
        st.sampled_from([0, 1, 70, 500, 3_000, 9_000, 40_000, 1 << 20]),
        st.one_of(st.none(), st.integers(0, 90_000)),
        st.booleans(),
    ),
    min_size=1,
    max_size=12,
)


def native_result(segment: LogSegment, reader: ReadByOffset, args: tuple[Any, ...]) -> Any:
    start, max_size, max_position, min_one = args
    size = segment.log.size_bytes
    offsets, positions = segment.offset_index.columns()
    with segment.log.pinned() as fd:
        return reader(
            fd, offsets, positions, BASE, start, max_size,
            size if max_position is None else max_position, size, min_one,
        )  # fmt: skip


@given(
    parts=appends,
    index_interval_bytes=st.sampled_from([1, 100, 4_096, 1 << 20]),
    tail_cut=st.sampled_from([0, 0, 5, 40, 70, 2_000]),
    cache=st.booleans(),
    cases=reads,
)
@settings(max_examples=300, deadline=None)
def test_read_matches_the_reference_and_the_model(
    tmp_path_factory: pytest.TempPathFactory,
    parts: list[tuple[list[tuple[int, int, int]], int]],
    index_interval_bytes: int,
    tail_cut: int,
    cache: bool,
    cases: list[tuple[int, int, int | None, bool]],
) -> None:
    built = build_segment(
        tmp_path_factory.mktemp("seg"), parts, index_interval_bytes, tail_cut, cache
    )
    segment = built.segment
    data = segment.log.read(0, segment.log.size_bytes)
    for start, max_size, max_position, min_one in cases:
        bound = segment.log.size_bytes if max_position is None else max_position
        read = segment.read(start, max_size, max_position, min_one)
        reference = segment._read_python(start, max_size, bound, min_one, None)
        assert read == reference, (start, max_size, max_position, min_one)
        assert read == model_read(data, built.batches, start, max_size, bound, min_one)
        if fetch.read_by_offset is not None and built.v2_only and not 0 < tail_cut < 61:
            # The native call answered itself: no legacy entry or short tail to hand back.
            args = (start, max_size, max_position, min_one)
            assert native_result(segment, fetch.read_by_offset, args) is not None
    segment.close()


@needs_native
@given(
    parts=appends,
    index_interval_bytes=st.sampled_from([1, 100, 4_096]),
    damage=st.tuples(st.integers(0, 10**6), st.sampled_from([0, 1, 3, 8, 11, 16])),
    value=st.sampled_from([0, 1, 2, 3, 0x7F, 0xFF]),
    cases=reads,
)
@settings(max_examples=150, deadline=None)
def test_damaged_headers_read_as_the_reference_reads_them(
    tmp_path_factory: pytest.TempPathFactory,
    parts: list[tuple[list[tuple[int, int, int]], int]],
    index_interval_bytes: int,
    damage: tuple[int, int],
    value: int,
    cases: list[tuple[int, int, int | None, bool]],
) -> None:
    """A byte of a batch header (its length, magic or offset) overwritten: the native read
    hands back what it cannot read as the reference does, and the results (or errors) agree."""
    built = build_segment(tmp_path_factory.mktemp("seg"), parts, index_interval_bytes, 0, False)
    segment = built.segment
    if built.batches:
        batch = built.batches[damage[0] % len(built.batches)]
        with segment.log.pinned() as fd:
            os.pwrite(fd, bytes([value]), batch.position + damage[1])
    for start, max_size, max_position, min_one in cases:
        bound = segment.log.size_bytes if max_position is None else max_position
        read = outcome(lambda: segment.read(start, max_size, max_position, min_one))  # noqa: B023
        reference = outcome(
            lambda: segment._read_python(start, max_size, bound, min_one, None)  # noqa: B023
        )
        assert read == reference, (start, max_size, max_position, min_one)
    segment.close()


def _shifted(column: Any, delta: int) -> array.array[int]:
    return array.array("i", (value + delta for value in column))


#: Mutants of the native read at its interface: an off-by-one in the offset compared (the
#: translate walk's ``>=`` made ``>``), in the index lookup (an entry one offset too far) and
#: in the next-offset walk's start (one index entry later).
MUTANTS: dict[str, Callable[[ReadByOffset], ReadByOffset]] = {
    "fetch offset + 1": lambda read: (
        lambda fd, o, p, base, target, *rest: read(fd, o, p, base, target + 1, *rest)
    ),
    "index offsets - 1": lambda read: lambda fd, o, p, *rest: read(fd, _shifted(o, -1), p, *rest),
    "walk one entry later": lambda read: (
        lambda fd, o, p, *rest: read(fd, o, array.array("i", list(p)[1:] + list(p)[-1:]), *rest)
    ),
}


@needs_native
@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_comparison_catches_a_mutated_read(tmp_path: Path, mutant: str) -> None:
    """The reference comparison above fails for each mutant: one segment of 9 KB one-record
    batches (an index entry per batch) and one of small batches, two per append (an entry
    every few batches), read from every offset with a few limits."""
    assert fetch.read_by_offset is not None
    mutated = MUTANTS[mutant](fetch.read_by_offset)
    mismatches = 0
    for name, spec, interval in (
        ("large", [([(1, 9_000, 0)], 0)] * 8, 4_096),
        ("small", [([(3, 40, 0), (1, 1, 2)], 0)] * 20, 300),
    ):
        (tmp_path / name).mkdir()
        segment = build_segment(tmp_path / name, spec, interval, 0, False).segment
        for start in range(BASE, segment.next_offset()):
            for max_size in (0, 500, 20_000):
                args = (start, max_size, None, True)
                size = segment.log.size_bytes
                reference = segment._read_python(start, max_size, size, True, None)
                assert reference is not None
                got = native_result(segment, mutated, args)
                native = native_result(segment, fetch.read_by_offset, args)
                assert native is not None
                assert native[0] == reference.position and native[1] == reference.records
                if got is None or got[:2] != native[:2] or got[3] != native[3]:
                    mismatches += 1
        segment.close()
    assert mismatches > 0, f"the mutant {mutant!r} went unnoticed"


def test_sequential_reads_walk_the_segment_batch_by_batch(tmp_path: Path) -> None:
    """Batches larger than index.interval.bytes, read as bench_log.py reads them (each fetch
    from the previous one's next offset: the native read's two-pread case): every fetch starts
    at the batch the previous one cut, and the fetches cover the segment."""
    built = build_segment(tmp_path, [([(2, 9_000, 0)], 0)] * 12, 4_096, 0, False)
    segment = built.segment
    offset, starts = BASE, []
    while offset < segment.next_offset():
        read = segment.read(offset, 40_000)
        assert read is not None and read.next_offset > offset
        starts.append(read.position)
        offset = read.next_offset
    assert starts[0] == 0
    assert set(starts) <= {b.position for b in built.batches}
    assert offset == built.batches[-1].last_offset + 1
    segment.close()


def test_segment_reads_is_what_log_segment_reads_with() -> None:
    assert LogSegment.read is SegmentReads.read
