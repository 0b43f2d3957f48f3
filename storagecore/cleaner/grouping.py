"""Kafka's ``groupSegmentsBySize``: consecutive segments grouped so that each group can be
rewritten into one segment.

Pure: segments (anything with the :class:`GroupableSegment` fields) in, groups out. Used by
:class:`storagecore.cleaner.cleaner.Cleaner` and the Spark ``compact`` job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from storagecore.records.layout import INT32_MAX


class GroupableSegment(Protocol):
    """What grouping needs to know about a segment (LogSegment provides it)."""

    @property
    def base_offset(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def offset_index_size_bytes(self) -> int: ...

    @property
    def time_index_size_bytes(self) -> int: ...


S = TypeVar("S", bound=GroupableSegment)


def group_segments_by_size(
    segments: Sequence[S],
    max_size_bytes: int,
    max_index_size_bytes: int,
    first_uncleanable_offset: int,
) -> list[list[S]]:
    """Consecutive segments grouped so that each group can be rewritten into one segment.

    A group takes the next segment while its log bytes stay within ``segment.bytes``, its offset
    and time index bytes each within ``segment.index.bytes``, and the group's offsets stay
    addressable from its base (int32 relative offsets). The offset check uses the estimate
    "next segment's successor base - 1" (or ``first_uncleanable_offset - 1`` for the last); an
    empty segment joins without it, so that empty segments do not pile up every 2^31 offsets
    (KAFKA-12889).
    """
    groups: list[list[S]] = []
    index = 0
    while index < len(segments):
        first = segments[index]
        group = [first]
        log_bytes = first.size_bytes
        offset_index_bytes = first.offset_index_size_bytes
        time_index_bytes = first.time_index_size_bytes
        index += 1
        while index < len(segments):
            candidate = segments[index]
            estimated_last_offset = (
                segments[index + 1].base_offset - 1
                if index + 1 < len(segments)
                else first_uncleanable_offset - 1
            )
            if not (
                log_bytes + candidate.size_bytes <= max_size_bytes
                and offset_index_bytes + candidate.offset_index_size_bytes <= max_index_size_bytes
                and time_index_bytes + candidate.time_index_size_bytes <= max_index_size_bytes
                and (
                    candidate.size_bytes == 0
                    or estimated_last_offset - first.base_offset <= INT32_MAX
                )
            ):
                break
            group.append(candidate)
            log_bytes += candidate.size_bytes
            offset_index_bytes += candidate.offset_index_size_bytes
            time_index_bytes += candidate.time_index_size_bytes
            index += 1
        groups.append(group)
    return groups
