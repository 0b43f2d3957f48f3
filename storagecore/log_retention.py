"""Retention across the logs of a LogManager (Kafka's ``kafka-log-retention`` task).

:func:`delete_old_segments` runs each log's own retention (:meth:`Log.delete_old_segments`)
over a set of logs, with the cleaner's manager pausing cleaning of each meanwhile;
:class:`RetentionTotals` counts what went (the worker's metrics). Which logs take part (online,
retention not paused) is the LogManager's call; nothing here chooses or plans.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Protocol

from storagecore.config import TopicPartition
from storagecore.errors import LogDirOfflineError
from storagecore.log import Log
from storagecore.retention import RetentionPlan

logger = logging.getLogger(__name__)


class RetentionCoordinator(Protocol):
    """What retention needs from the cleaner's manager (LogCleanerManager provides it)."""

    def pause_cleaning_for_non_compacted(self, logs: Sequence[Log]) -> list[Log]: ...

    def resume_after_retention(self, tp: TopicPartition) -> None: ...


@dataclasses.dataclass(slots=True)
class RetentionTotals:
    """What retention deleted since start (monotonic counters)."""

    segments_deleted: int = 0
    bytes_deleted: int = 0

    def record(self, plans: Sequence[RetentionPlan]) -> None:
        for plan in plans:
            self.segments_deleted += len(plan.deletions)
            self.bytes_deleted += plan.deleted_bytes


def delete_old_segments(
    logs: Sequence[Log], cleaner: RetentionCoordinator | None
) -> list[RetentionPlan]:
    """Apply retention to ``logs``; the plans carried out.

    With a running cleaner (``cleaner``: its LogCleanerManager), only the non-compacted logs
    are handled here, each paused for cleaning meanwhile; the cleaner thread does the compacted
    ones between its cleans (Kafka's split). A log whose directory fails is skipped (it went
    offline); the others go on.
    """
    if cleaner is not None:
        logs = cleaner.pause_cleaning_for_non_compacted(logs)
    plans: list[RetentionPlan] = []
    try:
        for log in logs:
            try:
                plan = log.delete_old_segments()
            except LogDirOfflineError as exc:
                logger.error("Retention skipped %s: %s", log.tp, exc)
                continue
            if plan.deletions:
                plans.append(plan)
    finally:
        if cleaner is not None:
            for log in logs:
                cleaner.resume_after_retention(log.tp)
    return plans
