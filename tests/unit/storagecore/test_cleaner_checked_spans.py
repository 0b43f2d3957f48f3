"""The filter pass does not check again what the map pass checked (regions.CheckedSpans): the
bytes of a segment that this round's map_region calls took are filtered without their CRC and
record checks, with the same decisions and bytes as with them; everything else is checked as
before, so a corrupt batch that the map pass did not read still fails the round."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storagecore import (
    Compression,
    CorruptRecordError,
    ManualClock,
    NewRecord,
    TimestampType,
    build_batch,
)
from storagecore.cleaner import Cleaner, CleanerStats
from storagecore.cleaner.offset_map import OutputChunk, SkimpyOffsetMap
from storagecore.cleaner.regions import CheckedSpans
from storagecore.records import layout
from storagecore.records.file_records import FileRecords
from tests.unit.storagecore.helpers.cleaning import COMPACT, open_log, put_many, run_round
from tests.unit.storagecore.helpers.native_cleaner import SECRET, START_MS, needs_native

records = st.builds(
    NewRecord,
    key=st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d", b"key-" + b"x" * 130])),
    # 9000 bytes: three-byte varints (the value's length and the record's)
    value=st.one_of(st.none(), st.binary(max_size=200), st.just(b"v" * 9000)),
    timestamp=st.integers(min_value=START_MS - 10**6, max_value=START_MS + 10**6),
    headers=st.sampled_from([(), (("h", b"v"), ("n", None)), (("n", None), ("k", b"x" * 150))]),
)
batches = st.lists(
    st.tuples(
        st.lists(records, min_size=1, max_size=20),
        st.sampled_from([Compression.NONE, Compression.LZ4, Compression.GZIP]),
        st.integers(min_value=0, max_value=3),  # offsets skipped before the batch
        st.booleans(),  # LogAppendTime
    ),
    min_size=1,
    max_size=8,
)


@needs_native
@given(plan=batches, latest_cut=st.integers(min_value=0, max_value=40))
def test_filtering_checked_bytes_gives_what_checking_them_gives(
    plan: list[tuple[list[NewRecord], Compression, int, bool]], latest_cut: int
) -> None:
    """Batches of keyed, keyless and tombstone records with headers and spread timestamps
    (create time or log append time), uncompressed and compressed, with gaps between offsets:
    the filter over bytes the map pass took (checked_bytes the whole region) answers what the
    filter that checks them answers, output, chunks and counters."""
    region = bytearray()
    offset = 0
    for batch_records, codec, gap, log_append in plan:
        offset += gap
        region += build_batch(
            batch_records,
            base_offset=offset,
            compression=codec,
            timestamp_type=(
                TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
            ),
            log_append_time=START_MS + 5 if log_append else None,
        )
        offset += len(batch_records)
    offset_map = SkimpyOffsetMap(24 * 4096, secret=SECRET)
    offset_map.clear(max_keys=offset, first_offset=0)
    mapped = offset_map.map_region(region, 0)
    assert mapped is not None and mapped.consumed_bytes == len(region)
    # Records above latest_offset are kept as unmapped ones.
    offset_map.update_latest_offset(max(offset_map.latest_offset - latest_cut, -1))
    answers = []
    for checked in (0, len(region)):
        lookups_before = offset_map.lookups
        filtered = offset_map.filter_region(
            region,
            START_MS,
            START_MS + 1000,
            offset + 10,
            b"",
            chunk=OutputChunk(4096, 0, -1, layout.NO_TIMESTAMP, -1),
            checked_bytes=checked,
        )
        answers.append((filtered, offset_map.lookups - lookups_before))
    assert answers[0] == answers[1]
    assert answers[0][0] is not None and answers[0][0].consumed_bytes == len(region)


@needs_native
def test_a_corrupt_batch_the_map_pass_did_not_read_fails_the_round(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A batch of the already clean part (below the first dirty offset, so not read by the map
    pass) whose CRC no longer matches: the filter pass checks it and the round fails, naming
    the file and the position."""
    log = open_log(tmp_path, clock)
    put_many(log, [(b"k%d" % (i % 3), b"value") for i in range(10)])
    log.roll()
    put_many(log, [(b"k%d" % (i % 3), b"value") for i in range(10)])
    log.roll()
    first = log.segments[0]
    with open(first.log.path, "r+b") as handle:
        handle.seek(first.size_bytes - 1)  # the last value byte of the last batch
        handle.write(b"?")
    last_position = max(position for position, _batch in first.log.batches())
    with pytest.raises(
        CorruptRecordError, match=rf"t-0: .*00000000000000000000\.log at position {last_position}"
    ):
        run_round(log, first_dirty=log.segments[1].base_offset)
    log.close()


@needs_native
def test_only_walks_from_a_segments_start_are_checked_spans(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A map pass that starts inside a segment (at the index entry before the first dirty
    offset) steps on boundaries the filter pass's walk from the start is not known to share
    (an index entry is not checked to be a batch's start): that segment gets no span, and the
    filter checks all of it; the next segment, walked from its start, does."""
    log = open_log(tmp_path, clock, dataclasses.replace(COMPACT, segment_bytes=1 << 20))
    for _ in range(2):
        put_many(log, [(b"k%d" % (i % 7), b"v" * 100) for i in range(40)])
        log.roll()
    first, second = log.segments[0], log.segments[1]
    assert (first.base_offset, second.base_offset) == (0, 40)
    start = 30
    assert first.offset_index.lookup(start).position > 0  # the walk starts inside the file
    cleaner = Cleaner(offset_map=SkimpyOffsetMap(24 * 4096))
    stats = CleanerStats(topic_partition=str(log.tp), first_dirty_offset=start)
    cleaner.build_offset_map(log, start, log.active_segment.base_offset, [], stats)
    spans = cleaner._checked
    assert all(spans.checked_from(first.log, p) == 0 for p, _ in first.log.batches())
    assert spans.checked_from(second.log, 0) == second.size_bytes
    log.close()


def test_checked_spans_merge_and_answer_per_file(tmp_path: Path) -> None:
    files = [FileRecords(tmp_path / f"{i}.log") for i in range(2)]
    spans = CheckedSpans()
    spans.add(files[0], 100, 50)
    spans.add(files[0], 150, 30)  # continues the span: one span 100..180
    spans.add(files[0], 300, 0)  # nothing taken
    spans.add(files[0], 400, 10)
    assert [spans.checked_from(files[0], p) for p in (99, 100, 170, 179, 180, 300, 405)] == [
        0,
        80,
        10,
        1,
        0,
        0,
        5,
    ]
    assert spans.checked_from(files[1], 120) == 0  # another file, even at the same position
    spans.clear()
    assert spans.checked_from(files[0], 120) == 0
    for file in files:
        file.close()
