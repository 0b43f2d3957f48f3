"""Retention for cleanup.policy ``delete`` (Kafka's ``UnifiedLog.deleteOldSegments``).

:func:`plan_retention` is pure: given a snapshot of a log's segments it decides which segments
go and why, as data (a :class:`RetentionPlan`), so that a dry run, the CLI, the worker's status
and the actual deletion all read the same decision. :func:`apply_retention` hands the plan to
:meth:`storagecore.log.Log.delete_segments`, which owns the crash-safe deletion protocol.

The passes, in Kafka's order since KAFKA-7400, each deleting a prefix of what the previous left:

1. log start offset breach: a segment goes when the next segment's base is <= the log start
   offset (so never the last segment). Runs for every policy.
2. size breach (``retention.bytes``, policy ``delete``): with ``diff = size - retention.bytes``,
   segments go from the oldest while ``diff - segment size >= 0``: the log never drops below the
   limit (Kafka's rule; it may stay above it by up to a segment).
3. time breach (``retention.ms``, policy ``delete``): segments go from the oldest while
   ``now - largest timestamp > retention.ms`` (strictly greater). The largest timestamp falls
   back to the file's mtime for a segment without timestamps. A record with a far-future
   timestamp therefore keeps its segment and every later one (the prefix rule).

Every pass stops at the first segment it keeps, never deletes at or above the high watermark,
and never deletes an empty last segment. When every segment goes, the log rolls a new empty
segment first, so offsets never go back.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence

from storagecore.config import LogConfig, TopicPartition


class RetentionRule(enum.Enum):
    LOG_START_OFFSET = "log-start-offset"
    SIZE = "retention.bytes"
    TIME = "retention.ms"


class SegmentView:
    """What retention needs to know about one segment. ``next_offset`` and
    ``largest_timestamp`` may be given as functions, called once on first use: the passes stop
    at the first segment they keep, so a check reads only the segments it could delete (a
    segment's end and largest timestamp come from its files; Kafka reads them lazily too)."""

    __slots__ = ("_largest_timestamp", "_next_offset", "base_offset", "size_bytes")

    def __init__(
        self,
        base_offset: int,
        next_offset: int | Callable[[], int],
        size_bytes: int,
        largest_timestamp: int | Callable[[], int],
    ) -> None:
        self.base_offset = base_offset
        self.size_bytes = size_bytes
        self._next_offset = next_offset
        self._largest_timestamp = largest_timestamp

    @property
    def next_offset(self) -> int:
        value = self._next_offset
        if not isinstance(value, int):
            value = self._next_offset = value()
        return value

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's mtime when the segment has none (Kafka's
        rule)."""
        value = self._largest_timestamp
        if not isinstance(value, int):
            value = self._largest_timestamp = value()
        return value

    def _key(self) -> tuple[int, int, int, int]:
        return (self.base_offset, self.next_offset, self.size_bytes, self.largest_timestamp)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SegmentView) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"SegmentView(base_offset={self.base_offset}, next_offset={self.next_offset}, "
            f"size_bytes={self.size_bytes}, largest_timestamp={self.largest_timestamp})"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class SegmentDeletion:
    segment: SegmentView
    rule: RetentionRule
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class RetentionPlan:
    tp: TopicPartition
    deletions: tuple[SegmentDeletion, ...]
    log_start_offset_before: int
    log_start_offset_after: int
    size_bytes_before: int
    rolls_active_segment: bool
    """Every segment goes, the non-empty active one included: the log rolls first."""

    @property
    def deleted_bytes(self) -> int:
        return sum(d.segment.size_bytes for d in self.deletions)

    @property
    def size_bytes_after(self) -> int:
        return self.size_bytes_before - self.deleted_bytes

    @property
    def base_offsets(self) -> list[int]:
        return [d.segment.base_offset for d in self.deletions]

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready description (the CLI's ``--json``, the worker's status)."""
        return {
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "log_start_offset_before": self.log_start_offset_before,
            "log_start_offset_after": self.log_start_offset_after,
            "size_bytes_before": self.size_bytes_before,
            "deleted_bytes": self.deleted_bytes,
            "rolls_active_segment": self.rolls_active_segment,
            "segments": [
                {
                    "base_offset": d.segment.base_offset,
                    "next_offset": d.segment.next_offset,
                    "size_bytes": d.segment.size_bytes,
                    "largest_timestamp": d.segment.largest_timestamp,
                    "rule": d.rule.value,
                    "reason": d.reason,
                }
                for d in self.deletions
            ],
        }


def plan_retention(
    tp: TopicPartition,
    segments: Sequence[SegmentView],
    config: LogConfig,
    *,
    log_start_offset: int,
    high_watermark: int,
    now_ms: int,
) -> RetentionPlan:
    """Which segments retention deletes now, and by which rule (the first that applies)."""
    assert segments, f"{tp}: a log has at least one segment"
    remaining = list(segments)
    deletions: list[SegmentDeletion] = []

    def deletable_prefix(predicate: object) -> list[SegmentView]:
        chosen: list[SegmentView] = []
        for index, segment in enumerate(remaining):
            is_last = index == len(remaining) - 1
            upper_bound = segment.next_offset if is_last else remaining[index + 1].base_offset
            if is_last and segment.size_bytes == 0:
                break  # the empty active segment is never deleted
            if high_watermark < upper_bound:
                break  # nothing at or above the high watermark goes
            next_segment = None if is_last else remaining[index + 1]
            if not predicate(segment, next_segment):  # type: ignore[operator]
                break
            chosen.append(segment)
        return chosen

    def take(chosen: list[SegmentView], rule: RetentionRule, reason: object) -> None:
        for segment in chosen:
            segment._key()  # resolved now, while the caller holds the log's lock
            deletions.append(SegmentDeletion(segment, rule, reason(segment)))  # type: ignore[operator]
        del remaining[: len(chosen)]

    # 1. Log start offset breach (every policy).
    take(
        deletable_prefix(lambda s, n: n is not None and n.base_offset <= log_start_offset),
        RetentionRule.LOG_START_OFFSET,
        lambda s: (
            f"offsets {s.base_offset}..{s.next_offset - 1} are below the log start offset "
            f"{log_start_offset}"
        ),
    )
    if config.delete:
        # 2. Size breach: Kafka's "diff" rule, the log never goes below retention.bytes.
        size = sum(s.size_bytes for s in remaining)
        if config.retention_bytes >= 0 and size >= config.retention_bytes:
            diff = size - config.retention_bytes
            chosen: list[SegmentView] = []
            for segment in deletable_prefix(lambda s, n: True):
                if diff - segment.size_bytes < 0:
                    break
                diff -= segment.size_bytes
                chosen.append(segment)
            take(
                chosen,
                RetentionRule.SIZE,
                lambda s: f"log is {size} bytes, retention.bytes={config.retention_bytes}",
            )
        # 3. Time breach.
        if config.retention_ms >= 0:
            take(
                deletable_prefix(lambda s, n: now_ms - s.largest_timestamp > config.retention_ms),
                RetentionRule.TIME,
                lambda s: (
                    f"largest timestamp {s.largest_timestamp} is {now_ms - s.largest_timestamp}"
                    f" ms old, retention.ms={config.retention_ms}"
                ),
            )
    rolls = not remaining
    end = segments[-1].next_offset
    after = (
        max(log_start_offset, remaining[0].base_offset) if remaining else max(log_start_offset, end)
    )
    return RetentionPlan(
        tp=tp,
        deletions=tuple(deletions),
        log_start_offset_before=log_start_offset,
        log_start_offset_after=after if deletions else log_start_offset,
        size_bytes_before=sum(s.size_bytes for s in segments),
        rolls_active_segment=rolls,
    )
