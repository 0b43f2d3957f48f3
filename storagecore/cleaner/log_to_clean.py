"""What the cleaner would clean of a log, as pure arithmetic (Kafka's ``LogToClean`` and the
offset rules of ``LogCleanerManager``'s companion object).

:func:`cleanable_offsets` gives ``[first dirty, first uncleanable)``, where cleaning starts and
where it must stop; :func:`log_to_clean` accounts the bytes on each side and whether
``max.compaction.lag.ms`` is breached (:func:`max_compaction_delay_ms`). Nothing here writes
a log or holds state.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
from collections.abc import Sequence

from storagecore.config import TopicPartition
from storagecore.log import Log
from storagecore.segment import LogSegment

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class CleanableOffsets:
    first_dirty_offset: int
    first_uncleanable_offset: int
    force_update_checkpoint: bool
    """The checkpoint was out of range and was reset to the log start offset: rewrite it."""


@dataclasses.dataclass(frozen=True, slots=True)
class LogToClean:
    """A candidate for cleaning and its byte accounting (Kafka's ``LogToClean``)."""

    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    """Rounded down to a segment base: the cleaner works on whole segments."""
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool
    max_compaction_delay_ms: int

    @property
    def tp(self) -> TopicPartition:
        return self.log.tp

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        """The dirty ratio: cleanable / (clean + cleanable); excludes the active segment."""
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def _floor_index(segments: Sequence[LogSegment], offset: int) -> int:
    """Index of the segment with the greatest base <= ``offset`` (0 when there is none)."""
    return max(bisect.bisect_right([s.base_offset for s in segments], offset) - 1, 0)


def _segments_from(log: Log, offset: int, *, non_active: bool) -> list[LogSegment]:
    """Segments from the floor segment of ``offset`` on (Kafka ``nonActiveLogSegmentsFrom``)."""
    segments = log.segments
    selected = segments[_floor_index(segments, offset) :]
    # The floor is taken over every segment: an offset in the active segment selects nothing.
    return [s for s in selected if s is not segments[-1]] if non_active else selected


def cleanable_offsets(log: Log, checkpoint: int | None, now_ms: int) -> CleanableOffsets:
    """``[first dirty, first uncleanable)``: where cleaning starts and where it must stop."""
    log_start = log.log_start_offset
    force = False
    if checkpoint is None:
        first_dirty = log_start
    elif checkpoint < log_start:
        if not log.config.delete:
            logger.warning(
                "%s: cleaner checkpoint %d is below the log start offset %d; resetting it",
                log.tp,
                checkpoint,
                log_start,
            )
        first_dirty, force = log_start, True
    elif checkpoint > log.log_end_offset:
        logger.warning(
            "%s: cleaner checkpoint %d is past the log end offset %d; resetting it to %d",
            log.tp,
            checkpoint,
            log.log_end_offset,
            log_start,
        )
        first_dirty, force = log_start, True
    else:
        first_dirty = checkpoint
    # One replica: the last stable offset is the high watermark unless a transaction is open.
    candidates = [log.last_stable_offset, log.active_segment.base_offset]
    lag_ms = log.config.min_compaction_lag_ms
    if lag_ms > 0:
        for segment in _segments_from(log, first_dirty, non_active=True):
            if segment.largest_timestamp > now_ms - lag_ms:
                candidates.append(segment.base_offset)
                break
    return CleanableOffsets(first_dirty, max(first_dirty, min(candidates)), force)


def max_compaction_delay_ms(log: Log, first_dirty_offset: int, now_ms: int) -> int:
    """How far past ``max.compaction.lag.ms`` the oldest dirty record is (0 when it is not)."""
    clean_until = now_ms - max(log.config.max_compaction_lag_ms, 0)
    if clean_until <= 0:
        # No record timestamp (> 0) can be older: Kafka's default max.compaction.lag.ms
        # (Long.MAX_VALUE). Its answer is 0 without reading each dirty segment's first batch
        # (a log of many segments would open every one of them, per selection and per scrape).
        return 0
    timestamps = [
        ts
        for ts in (
            s.first_batch_timestamp()
            for s in _segments_from(log, first_dirty_offset, non_active=True)
        )
        if ts > 0
    ]
    if not timestamps:
        return 0
    return max(clean_until - min(timestamps), 0)


def log_to_clean(log: Log, offsets: CleanableOffsets, now_ms: int) -> LogToClean:
    segments = log.segments
    active = segments[-1]
    first_uncleanable_segment = next(
        (s for s in _segments_from(log, offsets.first_uncleanable_offset, non_active=True)),
        active,
    )
    first_uncleanable = first_uncleanable_segment.base_offset
    first_dirty = offsets.first_dirty_offset
    # Kafka's logSegments(from, to): the floor segment of `from` up to bases below `to`. A
    # segment holding first_dirty mid-way counts as clean and as cleanable.
    clean_bytes = sum(s.size_bytes for s in segments if s.base_offset < first_dirty)
    low = min(first_dirty, first_uncleanable)
    cleanable_bytes = sum(
        s.size_bytes
        for s in segments[_floor_index(segments, low) :]
        if s.base_offset < first_uncleanable
    )
    delay = max_compaction_delay_ms(log, first_dirty, now_ms)
    return LogToClean(
        log=log,
        first_dirty_offset=first_dirty,
        first_uncleanable_offset=first_uncleanable,
        clean_bytes=clean_bytes,
        cleanable_bytes=cleanable_bytes,
        needs_compaction_now=delay > 0,
        max_compaction_delay_ms=delay,
    )


def nothing_to_clean(candidate: LogToClean) -> str:
    return (
        f"nothing to clean: no dirty bytes in [{candidate.first_dirty_offset}, "
        f"{candidate.first_uncleanable_offset}) (the active segment is never cleaned)"
    )
