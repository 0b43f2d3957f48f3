"""When the active segment rolls (Kafka's ``RollParams`` and ``LogSegment.shouldRoll``): the
conditions an append is checked against.

Called by :class:`storagecore.log.Log`'s general append path. The native append
(``storagecore/records/_segment_append.c``) checks the same conditions before it writes and
leaves every append that would roll to this path. The segment keeps what the decision
reads (its size, indexes, creation time and the timestamp time-based rolling measures from);
what must not be here: rolling itself (LocalLog.roll).
"""

from __future__ import annotations

from typing import NamedTuple

from storagecore.records.layout import INT32_MAX
from storagecore.segment import LogSegment


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
