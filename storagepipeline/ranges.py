"""Offset ranges into read tasks, with the rules of Spark's Kafka source, and the per-trigger
rate limit of its streaming reader.

Pure functions (no Spark, no files) called on the driver by :mod:`.plan` and :mod:`.stream`:

* one task per topic-partition by default;
* ``maxRecordsPerPartition`` cuts every range into the fewest equal pieces of at most that many
  offsets;
* ``minPartitions``, when the ranges are still fewer than it, cuts the large ranges into pieces
  in proportion to their share of all offsets (a range whose share rounds to one piece stays
  whole, and its offsets do not count towards the others' shares), so there are about
  ``minPartitions`` tasks;
* a range with an unresolved bound (``-2`` earliest or ``-1`` latest: the offset is known only
  when the task reads) is never cut, and an empty range is dropped.

Offsets, not bytes, are what is divided (as Spark does: a compacted range has fewer records
than offsets). Each piece's task finds its first batch through the segment's offset index.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from storagecore import TopicPartition


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one topic-partition; ``-2``/``-1`` bounds are unresolved."""

    tp: TopicPartition
    start: int
    end: int

    @property
    def resolved(self) -> bool:
        return self.start >= 0 and self.end >= 0

    @property
    def size(self) -> int:
        """Offsets in the range (records, before compaction); 0 when unresolved."""
        return self.end - self.start if self.resolved else 0


def _divide(item: OffsetRange, parts: int) -> list[OffsetRange]:
    """``item`` in ``parts`` consecutive pieces whose sizes differ by at most one."""
    pieces = []
    start = item.start
    remaining = item.size
    for left in range(parts, 0, -1):
        size = remaining // left
        pieces.append(OffsetRange(item.tp, start, start + size))
        start += size
        remaining -= size
    return [piece for piece in pieces if piece.size > 0]


def _share(size: int, total: int, parts: int) -> int:
    """Pieces for a range holding ``size`` of ``total`` offsets: its share of ``parts``,
    rounded half up (not Python's half-to-even, so 2.5 pieces are 3), at least one."""
    return max(math.floor(size / total * parts + 0.5), 1)


def split(
    ranges: Sequence[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """The read tasks of ``ranges`` (see the module docstring)."""
    assert min_partitions is None or min_partitions >= 1, min_partitions
    assert max_records_per_partition is None or max_records_per_partition >= 1
    kept = [item for item in ranges if not item.resolved or item.size > 0]
    if max_records_per_partition is not None:
        kept = [
            piece
            for item in kept
            for piece in (
                _divide(item, math.ceil(item.size / max_records_per_partition))
                if item.resolved
                else [item]
            )
        ]
    if min_partitions is None or len(kept) >= min_partitions:
        return kept
    splittable = [item for item in kept if item.resolved]
    total = sum(item.size for item in splittable)
    if total == 0:
        return kept
    whole = {id(item) for item in splittable if _share(item.size, total, min_partitions) == 1} | {
        id(item) for item in kept if not item.resolved
    }
    rest_total = sum(item.size for item in kept if id(item) not in whole)
    rest_parts = max(min_partitions - len(whole), 1)
    out: list[OffsetRange] = []
    for item in kept:
        if id(item) in whole:
            out.append(item)
        else:
            out.extend(_divide(item, _share(item.size, rest_total, rest_parts)))
    return out


def rate_limit(
    starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int], max_offsets: int
) -> dict[TopicPartition, int]:
    """Ends that admit at most about ``max_offsets`` offsets in all (``maxOffsetsPerTrigger``),
    shared among the partitions in proportion to how far behind each is; a partition whose
    share is below one offset still gets one, so none starves."""
    assert max_offsets >= 1, max_offsets
    missing = set(ends) - set(starts)
    assert not missing, f"no start offset for {missing}: resolve new partitions first"
    lags = {tp: max(end - starts[tp], 0) for tp, end in ends.items()}
    total = sum(lags.values())
    if total <= max_offsets:
        return dict(ends)
    limited: dict[TopicPartition, int] = {}
    for tp, end in ends.items():
        start = starts[tp]
        share = max_offsets * lags[tp] / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        limited[tp] = min(end, start + step)
    return limited
