"""Which log the cleaner works on next, and the states that keep it out of the way
(Kafka's ``LogCleanerManager``).

The range arithmetic is pure and lives in :mod:`.log_to_clean`; nothing here writes a log.
:class:`LogCleanerManager` holds the shared state of the cleaner threads and of whoever must keep
them away from a log (retention, truncation, partition deletion, a pause annotation):

============================  =====================================================================
state                         meaning
============================  =====================================================================
(none)                        idle and eligible
``IN_PROGRESS``               a cleaner thread owns the log
``ABORTED``                   asked to stop; the thread notices at its next check, throws
                              :class:`CleaningAbortedError`, removes its ``.cleaned`` files
``PAUSED(n)``                 no cleaning and no cleaner-driven retention; pauses nest
============================  =====================================================================

Transitions (Kafka's, including its IllegalStateException cases as AssertionError):
``abort_and_pause``: none → PAUSED(1); IN_PROGRESS → ABORTED, then wait until the thread has
moved it to PAUSED(1); PAUSED(n) → PAUSED(n+1). ``resume``: PAUSED(1) → none; PAUSED(n) →
PAUSED(n-1). ``done_cleaning``: IN_PROGRESS → none and checkpoint written; ABORTED → PAUSED(1).

Retention's holds (``deletable_logs``: IN_PROGRESS while the cleaner thread runs retention
over the compacted logs; ``pause_cleaning_for_non_compacted``: PAUSED(1) while the retention
task runs over the others) are Kafka's mutual exclusion, not work on the log: they are counted
apart (``_Entry.retention_holds``) and :meth:`LogCleanerManager.reported_state` leaves them out,
so that a status read in the middle of a retention pass shows an idle log as idle. (It showed
LogCleaningInProgress for whichever compacted logs the pass had not reached yet: thousands of
empty compacted partitions flipped between idle and in progress from one read to the next.)

Unlike Kafka, an uncleanable partition keeps the reason it was marked with and is retried with
backoff, or at once on request, without a restart (:mod:`.uncleanable`, KAFKA-19895); and every
compact-now request ends in an outcome that status shows (:mod:`.compaction_request`).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from storagecore import files
from storagecore.checkpoints import OffsetCheckpointFile
from storagecore.cleaner.compaction_request import CompactionRequest, Outcome
from storagecore.cleaner.log_to_clean import (
    LogToClean,
    cleanable_offsets,
    log_to_clean,
    max_compaction_delay_ms,
    nothing_to_clean,
)
from storagecore.cleaner.uncleanable import UncleanableMark
from storagecore.config import LONG_MAX, TopicPartition
from storagecore.errors import CorruptCheckpointError, StorageError
from storagecore.log import Log

logger = logging.getLogger(__name__)


class CleaningAbortedError(StorageError):
    """Internal control flow: the cleaning of a log was aborted (Kafka's
    LogCleaningAbortedException); the cleaner removes its half-built files first."""


class CleaningState(enum.Enum):
    IN_PROGRESS = "LogCleaningInProgress"
    ABORTED = "LogCleaningAborted"
    PAUSED = "LogCleaningPaused"


@dataclasses.dataclass(slots=True)
class _Entry:
    state: CleaningState
    paused: int = 0
    # Invariant: 0 <= retention_holds <= 1; with IN_PROGRESS it means retention, not a clean,
    # holds the log; with PAUSED it is one of the ``paused`` pauses (retention's own).
    retention_holds: int = 0


def _reported(entry: _Entry) -> tuple[CleaningState | None, int]:
    """A state as status and metrics show it: retention's holds left out (a log that retention
    holds and nobody cleans or paused is idle, ``(None, 0)``), the pause count without
    retention's own pause."""
    if entry.state is CleaningState.IN_PROGRESS and entry.retention_holds:
        return None, 0
    if entry.state is CleaningState.PAUSED:
        paused = entry.paused - entry.retention_holds
        return (CleaningState.PAUSED, paused) if paused > 0 else (None, 0)
    return entry.state, entry.paused


@dataclasses.dataclass(frozen=True, slots=True)
class PreCleanStats:
    """What the last selection saw (feeds the worker's gauges)."""

    max_dirty_percent: float
    cleanable_partitions: int
    delayed_partitions: int
    max_compaction_delay_ms: int


class LogCleanerManager:
    """Shared state of the cleaner threads: states, checkpoints, uncleanable partitions."""

    def __init__(self, log_dirs: Iterable[Path]) -> None:
        self._lock = threading.Condition()
        self._states: dict[TopicPartition, _Entry] = {}
        self._uncleanable: dict[TopicPartition, UncleanableMark] = {}
        self._checkpoints = {
            Path(d): OffsetCheckpointFile(Path(d) / files.CLEANER_OFFSET_CHECKPOINT)
            for d in log_dirs
        }
        self.time_of_last_run_ms = 0
        self.last_pre_clean_stats = PreCleanStats(0.0, 0, 0, 0)
        # compact-now requests: cleaned regardless of the dirty ratio until a round reaches the
        # first uncleanable offset (the pending ones); the latest request of each partition with
        # its outcome, for status.
        self._forced: set[TopicPartition] = set()
        self._requests: dict[TopicPartition, CompactionRequest] = {}
        # Earliest delete horizon of the tombstones/markers a log still holds (as its last
        # clean saw them): once passed, the log is cleaned even with nothing new dirty.
        self._horizons: dict[TopicPartition, int] = {}
        #: Each compacted log's dirty ratio as the last selection planned it (the worker's
        #: per-log gauge, so that a scrape plans no log); replaced as a whole, read unlocked.
        self.dirty_ratios: dict[TopicPartition, float] = {}

    # -- checkpoints ---------------------------------------------------------------------------
    def all_checkpoints(self) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = {}
        for path, checkpoint in self._checkpoints.items():
            try:
                result.update(checkpoint.read())
            except CorruptCheckpointError as exc:
                logger.warning("Ignoring unreadable cleaner checkpoint in %s: %s", path, exc)
        return result

    def update_checkpoint(
        self,
        log_dir: Path,
        live: Sequence[TopicPartition],
        *,
        update: tuple[TopicPartition, int] | None = None,
        remove: TopicPartition | None = None,
        updates: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        """Rewrite ``log_dir``'s checkpoint: one entry set or removed (or every entry of
        ``updates`` set: one atomic write for many rounds, as the Spark ``compact`` job ends
        them), entries of partitions no longer in ``live`` pruned (Kafka
        ``updateCheckpoints``)."""
        with self._lock:
            checkpoint = self._checkpoints[log_dir]
            try:
                offsets = checkpoint.read()
            except CorruptCheckpointError as exc:
                logger.warning(
                    "Rewriting unreadable cleaner checkpoint %s: %s", checkpoint.path, exc
                )
                offsets = {}
            if update is not None:
                offsets[update[0]] = update[1]
            offsets.update(updates or {})
            if remove is not None:
                offsets.pop(remove, None)
            keep = set(live)
            checkpoint.write({tp: o for tp, o in offsets.items() if tp in keep})

    # -- selection -----------------------------------------------------------------------------
    def grab_filthiest_log(
        self,
        logs: Sequence[Log],
        now_ms: int,
        *,
        restricted: bool = False,
        lag_lead_ms: int = 0,
    ) -> LogToClean | None:
        """The compacted log with the highest dirty ratio above ``min.cleanable.dirty.ratio``
        (or past ``max.compaction.lag.ms`` with something to clean), now IN_PROGRESS.

        ``restricted`` (outside the volume's compaction windows): only a compact-now request or
        a log whose ``max.compaction.lag.ms`` is breached within ``lag_lead_ms`` qualifies."""
        with self._lock:
            self.time_of_last_run_ms = now_ms
            checkpoints = self.all_checkpoints()
            candidates: list[LogToClean] = []
            planned: list[LogToClean] = []
            for log in logs:
                mark = self._uncleanable.get(log.tp)
                if (
                    not log.config.compact
                    or log.offline
                    or log.tp in self._states
                    or (mark is not None and now_ms < mark.retry_at_ms)
                ):
                    continue
                offsets = cleanable_offsets(log, checkpoints.get(log.tp), now_ms)
                if offsets.force_update_checkpoint:
                    self.update_checkpoint(
                        log.parent_dir,
                        [lg.tp for lg in logs if lg.parent_dir == log.parent_dir],
                        update=(log.tp, offsets.first_dirty_offset),
                    )
                candidate = log_to_clean(log, offsets, now_ms)
                planned.append(candidate)
                if candidate.total_bytes > 0:
                    candidates.append(candidate)
                if log.tp in self._forced and candidate.cleanable_bytes == 0:
                    self._finish_request(
                        log.tp, Outcome.NOTHING_TO_CLEAN, now_ms, nothing_to_clean(candidate)
                    )
            ratios = dict(self.dirty_ratios)
            ratios.update((c.tp, c.cleanable_ratio) for c in planned)
            self.dirty_ratios = ratios
            delayed = [c for c in candidates if c.needs_compaction_now]
            self.last_pre_clean_stats = PreCleanStats(
                max_dirty_percent=100 * max((c.cleanable_ratio for c in candidates), default=0.0),
                cleanable_partitions=len(candidates),
                delayed_partitions=len(delayed),
                max_compaction_delay_ms=max(
                    (c.max_compaction_delay_ms for c in candidates), default=0
                ),
            )
            if restricted:
                eligible = [
                    c
                    for c in candidates
                    if c.cleanable_bytes > 0
                    and (
                        c.tp in self._forced
                        or max_compaction_delay_ms(
                            c.log, c.first_dirty_offset, now_ms + lag_lead_ms
                        )
                        > 0
                    )
                ]
            else:
                eligible = [
                    c
                    for c in candidates
                    if (c.needs_compaction_now and c.cleanable_bytes > 0)
                    or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio
                    or (c.tp in self._forced and c.cleanable_bytes > 0)
                    or self._horizons.get(c.tp, LONG_MAX) <= now_ms
                ]
            if not eligible:
                return None
            # A compact-now request goes first; otherwise the dirtiest (Kafka's rule).
            chosen = max(eligible, key=lambda c: (c.tp in self._forced, c.cleanable_ratio))
            self._states[chosen.tp] = _Entry(CleaningState.IN_PROGRESS)
            return chosen

    def request_compaction(self, tp: TopicPartition, now_ms: int = 0) -> None:
        """compact-now: clean ``tp`` at the next selection whatever its dirty ratio."""
        with self._lock:
            self._forced.add(tp)
            self._requests[tp] = CompactionRequest(now_ms)

    def ask_compaction(self, log: Log, now_ms: int) -> CompactionRequest:
        """compact-now for the admin verb and the annotation: decided at once where it can be
        (refused, or nothing to clean), otherwise pending until a round ends it."""
        tp = log.tp
        with self._lock:
            entry, mark = self._states.get(tp), self._uncleanable.get(tp)
            refusal = (
                "the topic is not compacted"
                if not log.config.compact
                else "its log directory is offline"
                if log.offline
                else "cleaning is paused"
                if entry is not None and entry.state is not CleaningState.IN_PROGRESS
                else f"it is uncleanable ({mark.reason}); retry-uncleanable asks for a retry"
                if mark is not None
                else None
            )
            request = CompactionRequest(now_ms)
            if refusal is not None:
                request = request.finish(Outcome.REFUSED, now_ms, refusal)
            elif entry is None:
                offsets = cleanable_offsets(log, self.all_checkpoints().get(tp), now_ms)
                candidate = log_to_clean(log, offsets, now_ms)
                if candidate.cleanable_bytes == 0:
                    request = request.finish(
                        Outcome.NOTHING_TO_CLEAN, now_ms, nothing_to_clean(candidate)
                    )
            self._requests[tp] = request
            if request.outcome is Outcome.PENDING:
                self._forced.add(tp)
            else:
                self._forced.discard(tp)
            return request

    def cancel_compaction_request(self, tp: TopicPartition) -> None:
        """Forget a request still pending (``logkeeper clean``'s own requests)."""
        with self._lock:
            self._forced.discard(tp)
            request = self._requests.get(tp)
            if request is not None and not request.outcome.terminal:
                del self._requests[tp]

    def finish_request(
        self, tp: TopicPartition, outcome: Outcome, now_ms: int, detail: str
    ) -> None:
        """End ``tp``'s pending request (a round was aborted or failed)."""
        with self._lock:
            self._finish_request(tp, outcome, now_ms, detail)

    def _finish_request(
        self, tp: TopicPartition, outcome: Outcome, now_ms: int, detail: str
    ) -> None:
        self._forced.discard(tp)
        request = self._requests.get(tp)
        if request is not None and not request.outcome.terminal:
            self._requests[tp] = request.finish(outcome, now_ms, detail)

    @property
    def compaction_requests(self) -> set[TopicPartition]:
        """The partitions with a pending request."""
        with self._lock:
            return set(self._forced)

    @property
    def compaction_outcomes(self) -> dict[TopicPartition, CompactionRequest]:
        """The latest request of each partition and what became of it."""
        with self._lock:
            return dict(self._requests)

    def record_round(
        self,
        tp: TopicPartition,
        *,
        end_offset: int,
        first_uncleanable_offset: int,
        next_delete_horizon_ms: int | None,
        now_ms: int = 0,
    ) -> None:
        """What a finished round means for later selections: a compact-now request is served
        once the dirty range was covered; the earliest horizon still pending is remembered; an
        uncleanable mark is cleared, as the retry succeeded."""
        with self._lock:
            if self._uncleanable.pop(tp, None) is not None:
                logger.info("%s is cleanable again: a retry succeeded", tp)
            if end_offset >= first_uncleanable_offset:
                self._finish_request(tp, Outcome.DONE, now_ms, f"cleaned up to offset {end_offset}")
            if next_delete_horizon_ms is None:
                self._horizons.pop(tp, None)
            else:
                self._horizons[tp] = next_delete_horizon_ms

    def pending_delete_horizon(self, tp: TopicPartition) -> int | None:
        with self._lock:
            return self._horizons.get(tp)

    # -- cleaner-driven retention --------------------------------------------------------------
    def deletable_logs(self, logs: Sequence[Log]) -> list[Log]:
        """Kafka ``deletableLogs``: compacted logs that are idle and cleanable, now IN_PROGRESS
        so that no clean starts while their old segments are deleted. Pair with
        :meth:`done_deleting`."""
        with self._lock:
            chosen = [
                log
                for log in logs
                if log.config.compact
                and not log.offline
                and log.tp not in self._states
                and log.tp not in self._uncleanable
            ]
            for log in chosen:
                self._states[log.tp] = _Entry(CleaningState.IN_PROGRESS, retention_holds=1)
            return chosen

    def pause_cleaning_for_non_compacted(self, logs: Sequence[Log]) -> list[Log]:
        """Kafka ``pauseCleaningForNonCompactedPartitions``: the retention thread's logs,
        PAUSED so that a policy flip to compact cannot start a clean under it. Release each with
        :meth:`resume_after_retention`."""
        with self._lock:
            chosen = [
                log
                for log in logs
                if not log.config.compact and not log.offline and log.tp not in self._states
            ]
            for log in chosen:
                self._states[log.tp] = _Entry(CleaningState.PAUSED, 1, retention_holds=1)
            return chosen

    def resume_after_retention(self, tp: TopicPartition) -> None:
        """Release the pause :meth:`pause_cleaning_for_non_compacted` took (the log may stay
        paused by others who paused it meanwhile)."""
        with self._lock:
            entry = self._states.get(tp)
            if entry is None or entry.retention_holds != 1:
                raise AssertionError(f"{tp}: retention's pause released twice ({entry})")
            entry.retention_holds = 0
        self.resume(tp)

    def done_deleting(self, tps: Iterable[TopicPartition]) -> None:
        """End of cleaner-driven retention: IN_PROGRESS → none; ABORTED → PAUSED(1)."""
        with self._lock:
            for tp in tps:
                entry = self._states.get(tp)
                if entry is None:
                    raise AssertionError(f"{tp}: done_deleting without a deletion in progress")
                if entry.state is CleaningState.IN_PROGRESS:
                    del self._states[tp]
                elif entry.state is CleaningState.ABORTED:
                    # The pause that aborted it stays: its own, not retention's.
                    entry.state, entry.paused, entry.retention_holds = CleaningState.PAUSED, 1, 0
                    self._lock.notify_all()
                else:
                    raise AssertionError(f"{tp}: done_deleting in state {entry.state}")

    def forget(self, tp: TopicPartition) -> None:
        """A partition was deleted: drop its uncleanable mark, requests and horizon (its state
        entry is balanced by whoever paused it)."""
        with self._lock:
            self._uncleanable.pop(tp, None)
            self._forced.discard(tp)
            self._requests.pop(tp, None)
            self._horizons.pop(tp, None)
        self.dirty_ratios = {k: v for k, v in self.dirty_ratios.items() if k != tp}

    def maintain(self, live: Iterable[TopicPartition]) -> None:
        """Kafka ``maintainUncleanablePartitions``: forget partitions that no longer exist."""
        keep = set(live)
        with self._lock:
            for tp in [tp for tp in self._uncleanable if tp not in keep]:
                del self._uncleanable[tp]
            self._forced &= keep
            for tp in [tp for tp in self._requests if tp not in keep]:
                del self._requests[tp]
            for tp in [tp for tp in self._horizons if tp not in keep]:
                del self._horizons[tp]

    # -- states --------------------------------------------------------------------------------
    def states(self) -> dict[TopicPartition, tuple[CleaningState | None, int]]:
        """:meth:`reported_state` of every partition that has a state (others are idle), under
        one acquisition of the lock (status and metrics of thousands of partitions)."""
        with self._lock:
            return {tp: _reported(entry) for tp, entry in self._states.items()}

    def state(self, tp: TopicPartition) -> tuple[CleaningState | None, int]:
        with self._lock:
            entry = self._states.get(tp)
            return (None, 0) if entry is None else (entry.state, entry.paused)

    def reported_state(self, tp: TopicPartition) -> tuple[CleaningState | None, int]:
        """:meth:`state` as status and metrics show it: retention's holds left out (a log that
        retention holds and nobody cleans or paused is idle, ``(None, 0)``), the pause count
        without retention's own pause."""
        with self._lock:
            entry = self._states.get(tp)
            return (None, 0) if entry is None else _reported(entry)

    def abort_and_pause(
        self, tp: TopicPartition, timeout_s: float | None = None, now_ms: int = 0
    ) -> None:
        with self._lock:
            self._finish_request(tp, Outcome.ABORTED, now_ms, "cleaning was paused")
            entry = self._states.get(tp)
            if entry is None:
                self._states[tp] = _Entry(CleaningState.PAUSED, 1)
            elif entry.state is CleaningState.IN_PROGRESS:
                entry.state = CleaningState.ABORTED
                ok = self._lock.wait_for(
                    lambda: self._states[tp].state is CleaningState.PAUSED, timeout=timeout_s
                )
                if not ok:
                    raise TimeoutError(f"{tp}: the cleaner did not stop within {timeout_s} s")
            elif entry.state is CleaningState.PAUSED:
                entry.paused += 1
            else:
                raise AssertionError(f"{tp}: abort requested while already aborting")

    def pause(self, tp: TopicPartition) -> None:
        """Alias of :meth:`abort_and_pause`: a pause always stops a running clean first."""
        self.abort_and_pause(tp)

    def resume(self, tp: TopicPartition) -> None:
        with self._lock:
            entry = self._states.get(tp)
            if entry is None or entry.state is not CleaningState.PAUSED:
                raise AssertionError(f"{tp}: resume of cleaning that is not paused ({entry})")
            if entry.paused <= entry.retention_holds:
                raise AssertionError(f"{tp}: resume of retention's own pause ({entry})")
            entry.paused -= 1
            if entry.paused == 0:
                del self._states[tp]

    def abort(self, tp: TopicPartition) -> None:
        self.abort_and_pause(tp)
        self.resume(tp)

    def check_aborted(self, tp: TopicPartition) -> None:
        """Called by a cleaning thread between steps: raise if it was asked to stop."""
        with self._lock:
            entry = self._states.get(tp)
            if entry is not None and entry.state is CleaningState.ABORTED:
                raise CleaningAbortedError(f"{tp}: cleaning aborted")

    def done_cleaning(
        self,
        tp: TopicPartition,
        log_dir: Path,
        live: Sequence[TopicPartition],
        end_offset: int | None,
    ) -> None:
        """End of a clean: IN_PROGRESS → none (checkpoint written to ``end_offset`` when
        given); ABORTED → PAUSED(1), waking whoever waits in :meth:`abort_and_pause`."""
        with self._lock:
            entry = self._states.get(tp)
            if entry is None:
                raise AssertionError(f"{tp}: done_cleaning without a clean in progress")
            if entry.state is CleaningState.IN_PROGRESS:
                if end_offset is not None:
                    self.update_checkpoint(log_dir, live, update=(tp, end_offset))
                del self._states[tp]
            elif entry.state is CleaningState.ABORTED:
                entry.state, entry.paused = CleaningState.PAUSED, 1
                self._lock.notify_all()
            else:
                raise AssertionError(f"{tp}: done_cleaning in state {entry.state}")

    # -- uncleanable partitions ----------------------------------------------------------------
    def mark_uncleanable(self, tp: TopicPartition, reason: str, now_ms: int) -> None:
        """A clean (or the cleaner's retention) of ``tp`` failed: mark it, or move its next
        retry further out; a pending compact-now request fails with the reason."""
        with self._lock:
            mark = self._uncleanable.get(tp)
            mark = (
                UncleanableMark.first(reason, now_ms)
                if mark is None
                else mark.failed_again(reason, now_ms)
            )
            self._uncleanable[tp] = mark
            logger.error(
                "%s is uncleanable (attempt %d, next retry at %d ms): %s",
                tp,
                mark.attempts,
                mark.retry_at_ms,
                reason,
            )
            self._finish_request(tp, Outcome.FAILED, now_ms, reason)

    def retry_uncleanable(self, tp: TopicPartition, now_ms: int) -> bool:
        """Retry an uncleanable partition at the next selection, whatever its dirty ratio; the
        mark and its reason stay until that retry succeeds. False when ``tp`` is not marked."""
        with self._lock:
            mark = self._uncleanable.get(tp)
            if mark is None:
                return False
            self._uncleanable[tp] = mark.retry_now(now_ms)
            self._forced.add(tp)
            self._requests[tp] = CompactionRequest(now_ms)
            return True

    def clear_uncleanable(self, tp: TopicPartition) -> bool:
        """Drop the mark without a retry (``logkeeper clean`` and tests)."""
        with self._lock:
            return self._uncleanable.pop(tp, None) is not None

    @property
    def uncleanable(self) -> dict[TopicPartition, str]:
        """Uncleanable partitions and why."""
        with self._lock:
            return {tp: mark.reason for tp, mark in self._uncleanable.items()}

    @property
    def uncleanable_marks(self) -> dict[TopicPartition, UncleanableMark]:
        with self._lock:
            return dict(self._uncleanable)
