"""The read-task rules of Spark's Kafka source (storagepipeline.ranges), without Spark: each rule
on a hand-made case, and the pieces checked against the ranges they cut for any input."""

from __future__ import annotations

import itertools
import math

from hypothesis import given
from hypothesis import strategies as st

from storagecore import TopicPartition
from storagepipeline.ranges import OffsetRange, rate_limit, split

A, B, C = (TopicPartition("t", p) for p in range(3))


def sizes(pieces: list[OffsetRange]) -> dict[TopicPartition, list[int]]:
    out: dict[TopicPartition, list[int]] = {}
    for piece in pieces:
        out.setdefault(piece.tp, []).append(piece.size)
    return out


def test_one_task_per_partition_by_default_and_empty_ranges_dropped() -> None:
    ranges = [OffsetRange(A, 0, 1_000_000), OffsetRange(B, 5, 5), OffsetRange(C, 7, 9)]
    assert split(ranges) == [ranges[0], ranges[2]]


def test_max_records_per_partition_caps_every_task_with_the_fewest_pieces() -> None:
    pieces = split(
        [OffsetRange(A, 10, 1010), OffsetRange(B, 0, 300)], max_records_per_partition=300
    )
    assert sizes(pieces) == {A: [250, 250, 250, 250], B: [300]}
    assert pieces[0].start == 10 and pieces[3].end == 1010


def test_min_partitions_cuts_large_ranges_in_proportion_and_leaves_small_ones_whole() -> None:
    # B's share of 4 tasks rounds to one: it stays whole, and A gets the other three.
    pieces = split([OffsetRange(A, 0, 900), OffsetRange(B, 0, 100)], min_partitions=4)
    assert sizes(pieces) == {A: [300, 300, 300], B: [100]}


def test_min_partitions_below_the_partition_count_changes_nothing() -> None:
    ranges = [OffsetRange(A, 0, 900), OffsetRange(B, 0, 100), OffsetRange(C, 0, 1)]
    assert split(ranges, min_partitions=3) == ranges


def test_max_records_first_then_min_partitions() -> None:
    # Two pieces of 50, then each is half of the 5 tasks asked for: 2.5, rounded up.
    pieces = split([OffsetRange(A, 0, 100)], min_partitions=5, max_records_per_partition=50)
    assert sizes(pieces) == {A: [16, 17, 17, 16, 17, 17]}
    pieces = split([OffsetRange(A, 0, 100)], min_partitions=2, max_records_per_partition=25)
    assert sizes(pieces) == {A: [25, 25, 25, 25]}


def test_unresolved_bounds_are_never_split() -> None:
    earliest = OffsetRange(A, -2, 500)
    latest = OffsetRange(B, 100, -1)
    ranges = [earliest, latest, OffsetRange(C, 0, 1000)]
    pieces = split(ranges, min_partitions=10, max_records_per_partition=10)
    assert earliest in pieces and latest in pieces
    assert len([p for p in pieces if p.tp == A]) == 1
    assert len([p for p in pieces if p.tp == B]) == 1
    assert sizes(pieces)[C] == [10] * 100


@given(
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 5000)), min_size=1, max_size=6),
    st.one_of(st.none(), st.integers(1, 40)),
    st.one_of(st.none(), st.integers(1, 3000)),
)
def test_pieces_tile_their_ranges_in_order(
    spans: list[tuple[int, int]], min_partitions: int | None, max_records: int | None
) -> None:
    ranges = [OffsetRange(TopicPartition("t", i), s, s + n) for i, (s, n) in enumerate(spans)]
    pieces = split(ranges, min_partitions=min_partitions, max_records_per_partition=max_records)
    for item in ranges:
        mine = [p for p in pieces if p.tp == item.tp]
        if item.size == 0:
            assert mine == []
            continue
        assert mine[0].start == item.start and mine[-1].end == item.end
        assert all(a.end == b.start for a, b in itertools.pairwise(mine))
        assert all(p.size > 0 for p in mine)
        if max_records is not None:
            assert all(p.size <= max_records for p in mine)
            assert len(mine) >= math.ceil(item.size / max_records)
        if min_partitions is None and max_records is None:
            assert mine == [item]


def test_rate_limit_shares_by_lag_and_starves_no_partition() -> None:
    starts = {A: 0, B: 0, C: 50}
    ends = {A: 10_000, B: 10, C: 50}
    limited = rate_limit(starts, ends, 1000)
    # A is 999/1000 of the lag; B's share (0.99) is below one offset and still gets one.
    assert limited == {A: 999, B: 1, C: 50}
    assert rate_limit(starts, ends, 20_000) == ends
    # A start ahead of the end (the log was truncated) admits nothing from that partition.
    assert rate_limit({A: 0, B: 500}, {A: 100, B: 100}, 10) == {A: 10, B: 100}
