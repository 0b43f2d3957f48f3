"""When the active segment rolls (Kafka's ``RollParams`` and ``LogSegment.shouldRoll``): the
conditions an append is checked against, and what they leave open to the native append.

Called by :class:`storagecore.log.Log` (the Python append path) and
:class:`storagecore.local_log.LocalLog` (the native one). The segment keeps what the decision
reads (its size, indexes, creation time and the timestamp time-based rolling measures from);
what must not be here: rolling itself (LocalLog.roll).
"""

from __future__ import annotations

from typing import NamedTuple

from storagecore.index import OffsetIndex, TimeIndex
from storagecore.records.layout import INT32_MAX, INT64_MAX
from storagecore.segment import LogSegment

_INT64_MIN = -INT64_MAX - 1


class RollParams(NamedTuple):
    """What :func:`should_roll` needs to know about the incoming append."""

    max_segment_ms: int
    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now_ms: int


def time_waited_for_roll(segment: LogSegment, now_ms: int, message_timestamp: int) -> int:
    segment.load_first_batch_timestamp()
    rolling_based = segment.rolling_based_timestamp
    if rolling_based is not None and rolling_based >= 0:
        return message_timestamp - rolling_based
    return now_ms - segment.created_ms


def should_roll(segment: LogSegment, params: RollParams) -> bool:
    """Kafka's roll conditions: the append would pass ``segment.bytes``; the segment is older
    than ``segment.ms`` minus jitter (by record time); an index is full; or the incoming
    offsets are not addressable from this base. Checked cheapest first."""
    size = segment.log.size_bytes
    if size > params.max_segment_bytes - params.messages_size:
        return True
    offset_index, time_index = segment.offset_index, segment.time_index
    if offset_index.entries >= offset_index.max_entries:
        return True
    if time_index.entries >= time_index.max_entries - 1:
        return True
    if not 0 <= params.max_offset_in_messages - segment.base_offset <= INT32_MAX:
        return True
    return size > 0 and (
        time_waited_for_roll(segment, params.now_ms, params.max_timestamp_in_messages)
        > params.max_segment_ms - segment.rolling_jitter_ms
    )


def roll_free_append_limits(  # noqa: PLR0917 - the hot path, positional
    segment: LogSegment,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    size_bytes: int,
    max_segment_ms: int,
    now_ms: int,
) -> int | None:
    """What :func:`should_roll` leaves open to an append, for the native append to check
    without a roll decision of its own: the largest max timestamp an append may carry without
    rolling by time (INT64_MAX when time cannot roll this segment). None when the segment rolls
    whatever comes (an index is full, or its time is up by the clock). ``offset_index``,
    ``time_index`` and ``size_bytes`` are the segment's (the caller has them at hand: the hot
    path).

    The size and offset conditions are the caller's and the native append's, and so is the
    reservation of the index entries' blocks (:meth:`storagecore.index.base.IndexBase.
    native_target`)."""
    if (
        offset_index.entries >= offset_index.max_entries
        or time_index.entries >= time_index.max_entries - 1
    ):
        return None
    if size_bytes == 0:
        return INT64_MAX
    allowed_ms = max_segment_ms - segment.rolling_jitter_ms
    rolling_based = segment.rolling_based_timestamp
    if rolling_based is None:
        segment.load_first_batch_timestamp()
        rolling_based = segment.rolling_based_timestamp
    if rolling_based is not None and rolling_based >= 0:
        limit = rolling_based + allowed_ms
        if limit > INT64_MAX:
            return INT64_MAX
        return limit if limit >= _INT64_MIN else _INT64_MIN
    return INT64_MAX if now_ms - segment.created_ms <= allowed_ms else None
