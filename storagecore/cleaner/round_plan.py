"""One cleaning round of one log, planned for another process to run (the Spark ``compact``
job's executors): what :meth:`storagecore.cleaner.Cleaner.clean` decides before it reads a
record, as plain data.

The owner of the log (the ``compact`` driver holding the dir's lock, or a worker through its
admin API) calls :func:`plan_round`; the plan goes to JSON and back (:meth:`RoundPlan.to_json`,
:meth:`RoundPlan.from_json`) unchanged. The ranges are the cleaner's: ``[first dirty, first
uncleanable)`` from :func:`~storagecore.cleaner.log_to_clean.cleanable_offsets` and
:func:`~storagecore.cleaner.log_to_clean.log_to_clean`, the groups from
:func:`~storagecore.cleaner.grouping.group_segments_by_size` over the segments below the round's
end, assuming the map holds every dirty key (the executor checks that it did).

:func:`plan_round` reads the log's state only. :func:`swap_planned` is the other end: it checks
that the planned segments are still the log's, unchanged, and swaps each group's ``.cleaned``
copy in with :meth:`storagecore.log.Log.replace_segments`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from storagecore import files
from storagecore.cleaner.cleaner import dirty_segments
from storagecore.cleaner.grouping import group_segments_by_size
from storagecore.cleaner.log_to_clean import cleanable_offsets, log_to_clean
from storagecore.config import CleanerConfig, LogConfig, TopicPartition
from storagecore.errors import CorruptRecordError
from storagecore.log import Log
from storagecore.segment import LogSegment
from storagecore.transactions import AbortedTxn, ProducerLastBatch


@dataclasses.dataclass(frozen=True, slots=True)
class PlannedSegment:
    """One segment of the log as planned: its file, base offset and size."""

    path: str
    base_offset: int
    size_bytes: int
    #: The file's inode: a segment replaced by one of the same name and size is told apart.
    inode: int


@dataclasses.dataclass(frozen=True, slots=True)
class RoundPlan:
    """A round over one log (see the module docstring)."""

    topic: str
    partition: int
    directory: str
    #: The log's config as Kafka topic config keys (:meth:`LogConfig.to_topic_config`).
    topic_config: dict[str, str]
    first_dirty_offset: int
    first_uncleanable_offset: int
    #: The round's end (the checkpoint value after it): ``first_uncleanable_offset`` when the
    #: dirty range holds a segment, else ``first_dirty_offset``.
    end_offset: int
    #: Every segment of the log, the active one last.
    segments: tuple[PlannedSegment, ...]
    #: The cleaner's groups, as indexes into ``segments``.
    groups: tuple[tuple[int, ...], ...]
    now_ms: int
    aborted: tuple[AbortedTxn, ...]
    producers: tuple[tuple[int, ProducerLastBatch], ...]

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def config(self) -> LogConfig:
        return LogConfig.from_topic_config(self.topic_config)

    @property
    def dirty_span_offsets(self) -> int:
        """Offsets the map pass may put: a bound on the round's distinct keys (the first
        uncleanable offset is a segment base, where the map pass stops)."""
        return max(self.end_offset - self.first_dirty_offset, 0)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RoundPlan:
        return cls(
            topic=str(data["topic"]),
            partition=int(data["partition"]),
            directory=str(data["directory"]),
            topic_config={str(k): str(v) for k, v in data["topic_config"].items()},
            first_dirty_offset=int(data["first_dirty_offset"]),
            first_uncleanable_offset=int(data["first_uncleanable_offset"]),
            end_offset=int(data["end_offset"]),
            segments=tuple(PlannedSegment(**s) for s in data["segments"]),
            groups=tuple(tuple(int(i) for i in g) for g in data["groups"]),
            now_ms=int(data["now_ms"]),
            aborted=tuple(AbortedTxn(**t) for t in data["aborted"]),
            producers=tuple(
                (int(pid), ProducerLastBatch(**last)) for pid, last in data["producers"]
            ),
        )


def plan_round(
    log: Log, checkpoint: int | None, now_ms: int, config: CleanerConfig | None = None
) -> RoundPlan:
    """The round the cleaner would run over ``log`` now, given its cleaner checkpoint."""
    config = config or CleanerConfig()
    to_clean = log_to_clean(log, cleanable_offsets(log, checkpoint, now_ms), now_ms)
    first_dirty, upper = to_clean.first_dirty_offset, to_clean.first_uncleanable_offset
    segments = log.segments
    end_offset = upper if dirty_segments(segments, first_dirty, upper) else first_dirty
    position = {id(s): i for i, s in enumerate(segments)}
    groups = group_segments_by_size(
        [s for s in segments[:-1] if s.base_offset < end_offset],
        log.config.segment_bytes,
        log.config.segment_index_bytes,
        upper,
    )
    producers = log.last_records_of_active_producers(now_ms, config.producer_id_expiration_ms)
    return RoundPlan(
        topic=log.tp.topic,
        partition=log.tp.partition,
        directory=str(log.directory),
        topic_config=log.config.to_topic_config(),
        first_dirty_offset=first_dirty,
        first_uncleanable_offset=upper,
        end_offset=end_offset,
        segments=tuple(
            PlannedSegment(str(s.log.path), s.base_offset, s.size_bytes, s.log.inode())
            for s in segments
        ),
        groups=tuple(tuple(position[id(s)] for s in group) for group in groups),
        now_ms=now_ms,
        aborted=tuple(log.aborted_transactions(segments[0].base_offset, upper)),
        producers=tuple(sorted(producers.items())),
    )


def unchanged_groups(log: Log, plan: RoundPlan) -> list[list[LogSegment]] | None:
    """The log's segments of each planned group, or None when any of them changed since the
    plan (gone, replaced by another clean, or of another size: the cleaned copy would not be
    of these bytes)."""
    by_base = {s.base_offset: s for s in log.segments[:-1]}
    groups: list[list[LogSegment]] = []
    for group in plan.groups:
        current: list[LogSegment] = []
        for i in group:
            planned = plan.segments[i]
            segment = by_base.get(planned.base_offset)
            if (
                segment is None
                or str(segment.log.path) != planned.path
                or segment.size_bytes != planned.size_bytes
                or segment.log.inode() != planned.inode
            ):
                return None
            current.append(segment)
        groups.append(current)
    return groups


def swap_planned(log: Log, plan: RoundPlan, cleaned_sizes: Sequence[int]) -> bool:
    """Swap the ``.cleaned`` segments of the planned groups in for the groups: all of them in
    one run of the log's crash-safe protocol (so a crash leaves the partition's round exactly
    undone or exactly done, and the directory is fsynced twice per partition, not per group).
    ``cleaned_sizes`` are the bytes the cleaning wrote per group: a copy of another size (or
    none: a loader that ran meanwhile deleted it) is refused with :class:`CorruptRecordError`
    before any swap.

    False, swapping nothing, when the segments changed since the plan; the ``.cleaned``
    files are then the caller's to remove. When the log refuses the swap (a segment left it
    between the check and the swap), each group is swapped alone, as the cleaner does, and a
    group it refuses has its copy deleted."""
    groups = unchanged_groups(log, plan)
    if groups is None:
        return False
    assert len(cleaned_sizes) == len(groups), (plan.tp, cleaned_sizes, len(groups))
    for group, size in zip(groups, cleaned_sizes, strict=True):
        path = files.log_file(log.directory, group[0].base_offset, files.CLEANED_SUFFIX)
        try:
            found = path.stat().st_size
        except FileNotFoundError:
            found = -1
        if found != size:
            raise CorruptRecordError(
                f"{plan.tp}: cleaned copy {path} has {found} bytes, {size} were written "
                "(-1: missing); nothing swapped"
            )
    if not groups:
        return True
    cleaned = [
        LogSegment.open(
            log.directory,
            group[0].base_offset,
            index_interval_bytes=log.config.index_interval_bytes,
            max_index_size_bytes=log.config.segment_index_bytes,
            now_ms=plan.now_ms,
            suffix=files.CLEANED_SUFFIX,
            writable_indexes=False,
        )
        for group in groups
    ]
    if log.replace_segments(cleaned, [segment for group in groups for segment in group]):
        return True
    for copy, group in zip(cleaned, groups, strict=True):
        if not log.replace_segments([copy], group):
            copy.delete_files()
    return True
