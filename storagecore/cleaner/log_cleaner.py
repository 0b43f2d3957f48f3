"""The cleaner threads of a LogManager (Kafka's ``LogCleaner``).

``log.cleaner.threads`` threads, each with its own offset map (the dedupe buffer split between
them) and one throttler shared by all. One iteration of a thread (Kafka's ``doWork``):

1. pick the filthiest compacted log (:meth:`LogCleanerManager.grab_filthiest_log`) and clean it
   for one round; 2. run retention for the compacted logs (``compact,delete`` and log start
   offset breaches); 3. forget partitions that no longer exist; 4. sleep
   ``log.cleaner.backoff.ms`` if nothing was cleaned.

A cleaner never dies silently (KAFKA-7215, KAFKA-8725): an exception while cleaning one log
marks that partition uncleanable, with the exception as its visible reason, and the thread goes
on with the others; an ``OSError`` takes the log's directory offline instead; an abort (pause,
partition deletion, shutdown) is the normal way out of a clean. Anything that still escapes an
iteration is logged and counted in :attr:`LogCleaner.thread_errors`, and the thread continues.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from storagecore.cleaner.cleaner import Cleaner, CleanRequest
from storagecore.cleaner.compaction_request import Outcome
from storagecore.cleaner.log_to_clean import LogToClean, cleanable_offsets, log_to_clean
from storagecore.cleaner.manager import CleaningAbortedError, LogCleanerManager
from storagecore.cleaner.stats import CleanerStats
from storagecore.cleaner.throttler import Throttler
from storagecore.clock import Clock
from storagecore.config import CleanerConfig, TopicPartition
from storagecore.disk_space import is_disk_full
from storagecore.errors import LogDirOfflineError
from storagecore.log import Log
from storagecore.log_manager import LogManager
from storagecore.retention import RetentionPlan

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class CleanerGauges:
    """Kafka's LogCleaner/LogCleanerManager gauges, as data for the worker's metrics."""

    max_dirty_percent: float
    time_since_last_run_ms: int
    max_compaction_delay_ms: int
    max_buffer_utilization_percent: float
    cleaner_recopy_percent: float
    max_clean_time_seconds: float
    dead_thread_count: int
    uncleanable_partitions: dict[str, int]
    """Per log directory."""
    uncleanable_bytes: dict[str, int]


@dataclasses.dataclass(slots=True)
class CleanerTotals:
    """Monotonic counters since start, for the worker's metrics."""

    rounds: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0
    duration_s: float = 0.0
    aborted: int = 0
    failed: int = 0


#: ``may_start_new_work(now_ms)``: False outside the volume's compaction windows.
StartGate = Callable[[int], bool]


@dataclasses.dataclass(slots=True)
class _ThreadState:
    cleaner: Cleaner
    thread: threading.Thread | None = None
    busy_with: TopicPartition | None = None
    last_stats: CleanerStats | None = None


class _NoSpaceForCleanError(Exception):
    """Internal: the clean of a log must wait for disk space (nothing was written)."""


class LogCleaner:
    def __init__(
        self,
        log_manager: LogManager,
        config: CleanerConfig | None = None,
        *,
        clock: Clock | None = None,
        may_start_new_work: StartGate | None = None,
        lag_lead_ms: int = 0,
    ) -> None:
        """``may_start_new_work`` restricts when a clean may start (compaction windows): while
        it says no, only compact-now requests and logs whose ``max.compaction.lag.ms`` would be
        breached within ``lag_lead_ms`` are cleaned. A clean already running is not stopped."""
        self.log_manager = log_manager
        self.may_start_new_work = may_start_new_work
        self.lag_lead_ms = lag_lead_ms
        self.config = config or CleanerConfig()
        self.clock = clock or log_manager.clock
        self.manager = LogCleanerManager(log_manager.log_dirs)
        self.throttler = Throttler(self.config.io_max_bytes_per_second)
        self._stop = threading.Event()
        self._threads = self._thread_states(self.config)
        self._lock = threading.Lock()
        self.last_stats: dict[TopicPartition, CleanerStats] = {}
        self.last_clean_ms: dict[TopicPartition, int] = {}
        self.rounds_total = 0
        self.totals = CleanerTotals()
        self.thread_errors = 0
        self.last_error: str | None = None
        #: Partitions whose clean waits for disk space, and why; cleared by their next round.
        self.deferred: dict[TopicPartition, str] = {}

    def _thread_states(self, config: CleanerConfig) -> list[_ThreadState]:
        return [
            _ThreadState(
                Cleaner(i, config=config, throttler=self.throttler, check_done=self._check_done)
            )
            for i in range(config.threads)
        ]

    def reconfigure(self, config: CleanerConfig, timeout_s: float = 30.0) -> None:
        """Apply new settings while running. The I/O limit and the backoff apply at once; a
        new thread count or dedupe buffer stops the threads (a running clean aborts at its next
        check and leaves no files), builds new offset maps and starts them again. States,
        pauses, requests, uncleanable marks and totals are kept."""
        self.throttler.set_rate(config.io_max_bytes_per_second)
        old, self.config = self.config, config
        if (old.threads, old.dedupe_buffer_size, old.io_buffer_load_factor) == (
            config.threads,
            config.dedupe_buffer_size,
            config.io_buffer_load_factor,
        ):
            return
        running = any(state.thread is not None for state in self._threads)
        self._stop.set()
        for state in self._threads:
            if state.thread is not None:
                state.thread.join(timeout_s)
        late = [
            s.thread.name for s in self._threads if s.thread is not None and s.thread.is_alive()
        ]
        if late:
            # Safe to go on: a late thread has its own offset map, stops at its next check, and
            # the manager's IN_PROGRESS state keeps its log away from the new threads.
            logger.warning("Cleaner threads %s still stopping; starting the new ones", late)
        self._threads = self._thread_states(config)
        self._stop = threading.Event()
        if running:
            self.start()
        logger.info(
            "Cleaner reconfigured: %d threads, %d bytes of offset map each",
            config.threads,
            config.map_memory_per_thread,
        )

    # -- one iteration -------------------------------------------------------------------------
    def _online_logs(self) -> list[Log]:
        return [log for log in self.log_manager.logs.values() if not log.offline]

    def clean_filthiest(self, thread_id: int = 0) -> CleanerStats | None:
        """Select the filthiest log and clean it for one round; None when nothing qualified,
        the clean was aborted, or it failed (the log is then uncleanable, with the reason)."""
        now = self.clock.milliseconds()
        logs = self._online_logs()
        gate = self.may_start_new_work
        try:
            chosen = self.manager.grab_filthiest_log(
                logs,
                now,
                restricted=gate is not None and not gate(now),
                lag_lead_ms=self.lag_lead_ms,
            )
        except Exception as exc:
            logger.exception("Cleaner %d: selecting a log to clean failed", thread_id)
            self._record_error(f"selection failed: {type(exc).__name__}: {exc}")
            return None
        if chosen is None:
            return None
        return self._clean(self._threads[thread_id], chosen, now)

    def clean_log(self, tp: TopicPartition) -> CleanerStats | None:
        """One round over ``tp`` now, regardless of its dirty ratio (``logkeeper clean`` and
        compact-now). None when it is busy, paused, uncleanable or has nothing to clean."""
        log = self.log_manager.find_log(tp)
        if log is None or log.offline:
            return None
        now = self.clock.milliseconds()
        self.manager.request_compaction(tp, now)
        chosen = self.manager.grab_filthiest_log([log], now)
        if chosen is None:
            self.manager.cancel_compaction_request(tp)  # nothing to do: do not leave it pending
            return None
        return self._clean(self._threads[0], chosen, now)

    def _clean(self, state: _ThreadState, to_clean: LogToClean, now: int) -> CleanerStats | None:
        log, tp = to_clean.log, to_clean.tp
        cleaner = state.cleaner
        end_offset: int | None = None
        finished: CleanerStats | None = None
        state.busy_with = tp
        try:
            self._check_space(to_clean)
            stats = cleaner.clean(
                CleanRequest(log, to_clean.first_dirty_offset, to_clean.first_uncleanable_offset),
                now,
            )
            end_offset = stats.end_offset
            self.manager.record_round(
                tp,
                end_offset=stats.end_offset,
                first_uncleanable_offset=to_clean.first_uncleanable_offset,
                next_delete_horizon_ms=stats.next_delete_horizon_ms,
                now_ms=self.clock.milliseconds(),
            )
            logger.info("%s", stats.stats_line(cleaner.thread_id))
            with self._lock:
                self.deferred.pop(tp, None)
            if to_clean.needs_compaction_now:
                pre = self.manager.last_pre_clean_stats
                logger.info(
                    "\tCleanable partitions: %d, Delayed partitions: %d, max delay: %d",
                    pre.cleanable_partitions,
                    pre.delayed_partitions,
                    pre.max_compaction_delay_ms,
                )
            if stats.invalid_messages:
                logger.warning(
                    "Found %d invalid messages during compaction of %s.",
                    stats.invalid_messages,
                    tp,
                )
            # Published in ``finally``, after done_cleaning: a status read never sees this
            # round's result while the log is still LogCleaningInProgress.
            finished = stats
            return stats
        except CleaningAbortedError:
            logger.info("Cleaning of %s was aborted", tp)
            self.manager.finish_request(
                tp, Outcome.ABORTED, self.clock.milliseconds(), "the round was aborted"
            )
            with self._lock:
                self.totals.aborted += 1
            return None
        except LogDirOfflineError as exc:
            logger.error("Cleaning of %s stopped: %s", tp, exc)
            return None
        except _NoSpaceForCleanError as exc:
            self._defer(to_clean, str(exc))
            return None
        except OSError as exc:
            if is_disk_full(exc):  # the .cleaned files are gone; the log is as it was
                self.log_manager.note_disk_full(log.parent_dir, exc)
                self._defer(to_clean, f"the cleaned segments did not fit: {exc}")
                return None
            logger.error("Cleaning of %s failed with an I/O error: %s", tp, exc)
            self.log_manager.handle_io_error(log.parent_dir, exc)
            return None
        except Exception as exc:
            logger.exception("Cleaning of %s failed; marking it uncleanable", tp)
            self.manager.mark_uncleanable(
                tp, f"{type(exc).__name__}: {exc}", self.clock.milliseconds()
            )
            with self._lock:
                self.totals.failed += 1
            return None
        finally:
            state.busy_with = None
            live = [
                lg.tp for lg in self.log_manager.logs.values() if lg.parent_dir == log.parent_dir
            ]
            try:
                self.manager.done_cleaning(tp, log.parent_dir, live, end_offset)
            except OSError as exc:
                logger.error("Cannot write the cleaner checkpoint of %s: %s", log.parent_dir, exc)
                self.log_manager.handle_io_error(log.parent_dir, exc)
            if finished is not None:
                self._publish(state, tp, finished)

    def _check_space(self, to_clean: LogToClean) -> None:
        """Refuse to start a clean whose cleaned copy may not fit: groups are rewritten and
        swapped one at a time, so the copy needs at most one group, at most ``segment.bytes``
        (plus its indexes), or the whole cleanable log if that is smaller."""
        log = to_clean.log
        space = self.log_manager.disk_space.get(log.parent_dir)
        if space is None:
            return
        needed = min(log.config.segment_bytes, to_clean.total_bytes)
        free = space.reading().free_bytes
        if free < needed:
            raise _NoSpaceForCleanError(
                f"the cleaned copy of a segment group needs up to {needed} bytes and "
                f"{log.parent_dir} has {free} free; retention or more space lets it run"
            )

    def _defer(self, to_clean: LogToClean, reason: str) -> None:
        tp = to_clean.tp
        logger.warning("Cleaning of %s deferred: %s", tp, reason)
        with self._lock:
            self.deferred[tp] = reason
        self.manager.finish_request(
            tp, Outcome.ABORTED, self.clock.milliseconds(), f"deferred: {reason}"
        )

    def _publish(self, state: _ThreadState, tp: TopicPartition, stats: CleanerStats) -> None:
        """A finished round's figures, for status and metrics."""
        with self._lock:
            state.last_stats = stats
            self.last_stats[tp] = stats
            self.last_clean_ms[tp] = self.clock.milliseconds()
            self.rounds_total += 1
            totals = self.totals
            totals.rounds += 1
            totals.bytes_read += stats.bytes_read + stats.map_bytes_read
            totals.bytes_written += stats.bytes_written
            totals.records_read += stats.messages_read
            totals.records_removed += stats.messages_read - stats.messages_written
            totals.duration_s += stats.elapsed_s

    def delete_old_segments_of_compacted_logs(self) -> list[RetentionPlan]:
        """Retention for compacted logs, done by the cleaner so that it never runs under a
        clean of the same log (Kafka's cleaner thread does the same)."""
        logs = self.manager.deletable_logs(
            [log for log in self._online_logs() if not self.log_manager.is_retention_paused(log.tp)]
        )
        plans: list[RetentionPlan] = []
        try:
            for log in logs:
                try:
                    plan = log.delete_old_segments()
                except LogDirOfflineError as exc:
                    logger.error("Retention skipped %s: %s", log.tp, exc)
                    continue
                except Exception as exc:
                    logger.exception("Retention of %s failed; marking it uncleanable", log.tp)
                    self.manager.mark_uncleanable(
                        log.tp,
                        f"retention failed: {type(exc).__name__}: {exc}",
                        self.clock.milliseconds(),
                    )
                    continue
                if plan.deletions:
                    plans.append(plan)
        finally:
            self.manager.done_deleting([log.tp for log in logs])
        self.log_manager.record_retention(plans)
        return plans

    def delete_log(self, tp: TopicPartition, timeout_s: float | None = 60.0) -> Path:
        """Partition deletion that cooperates with the cleaner (Kafka: ``abortCleaning`` and
        removal from ``cleaner-offset-checkpoint``): a running clean of ``tp`` is aborted and
        waited for (its ``.cleaned`` files removed) before the directory is renamed away."""
        log = self.log_manager.get_log(tp)
        parent = log.parent_dir
        self.manager.abort_and_pause(tp, timeout_s)
        try:
            target = self.log_manager.delete_log(tp)
            live = [lg.tp for lg in self.log_manager.logs.values() if lg.parent_dir == parent]
            self.manager.update_checkpoint(parent, live, remove=tp)
        finally:
            self.manager.resume(tp)
            self.manager.forget(tp)
        return target

    def do_work(self, thread_id: int = 0) -> bool:
        """One iteration of a cleaner thread; True when a log was cleaned."""
        stats = self.clean_filthiest(thread_id)
        self.delete_old_segments_of_compacted_logs()
        self.manager.maintain(self.log_manager.logs.keys())
        return stats is not None

    def clean_until_done(self, tps: Sequence[TopicPartition] | None = None) -> list[CleanerStats]:
        """Rounds until no compacted log (of ``tps``, default all) has anything cleanable:
        every dirty range is covered whatever the dirty ratio (``logkeeper clean``)."""
        logs = [
            log
            for log in self._online_logs()
            if log.config.compact and (tps is None or log.tp in tps)
        ]
        for log in logs:
            self.manager.request_compaction(log.tp, self.clock.milliseconds())
        done: list[CleanerStats] = []
        while (stats := self.clean_filthiest()) is not None:
            done.append(stats)
        for log in logs:  # served, or nothing was cleanable: no request stays pending
            self.manager.cancel_compaction_request(log.tp)
        return done

    # -- threads -------------------------------------------------------------------------------
    def _check_done(self, tp: TopicPartition) -> None:
        if self._stop.is_set():
            raise CleaningAbortedError(f"{tp}: the cleaner is shutting down")
        self.manager.check_aborted(tp)

    def _record_error(self, message: str) -> None:
        with self._lock:
            self.thread_errors += 1
            self.last_error = message

    def _run(self, thread_id: int) -> None:
        stop = self._stop  # this thread set's own event (reconfigure makes a new one)
        while not stop.is_set():
            try:
                cleaned = self.do_work(thread_id)
            except Exception as exc:
                logger.exception("Cleaner %d: iteration failed", thread_id)
                self._record_error(f"{type(exc).__name__}: {exc}")
                cleaned = False
            if not cleaned:
                stop.wait(self.config.backoff_ms / 1000)

    def start(self) -> None:
        for thread_id, state in enumerate(self._threads):
            if state.thread is None or not state.thread.is_alive():
                state.thread = threading.Thread(
                    target=self._run,
                    args=(thread_id,),
                    name=f"logkeeper-cleaner-{thread_id}",
                    daemon=True,
                )
                state.thread.start()

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Stop the threads: a running clean aborts at its next check and leaves no files."""
        self._stop.set()
        for state in self._threads:
            if state.thread is not None:
                state.thread.join(timeout_s)

    def thread_states(self) -> list[dict[str, object]]:
        """Per thread: name, alive, and the partition it is cleaning (for status)."""
        return [
            {
                "name": f"logkeeper-cleaner-{i}",
                "alive": state.thread is not None and state.thread.is_alive(),
                "cleaning": str(state.busy_with) if state.busy_with is not None else None,
            }
            for i, state in enumerate(self._threads)
        ]

    @property
    def alive_threads(self) -> int:
        return sum(1 for s in self._threads if s.thread is not None and s.thread.is_alive())

    # -- gauges --------------------------------------------------------------------------------
    def gauges(self) -> CleanerGauges:
        now = self.clock.milliseconds()
        with self._lock:
            last = [s.last_stats for s in self._threads if s.last_stats is not None]
        pre = self.manager.last_pre_clean_stats
        uncleanable = self.manager.uncleanable
        partitions: dict[str, int] = {str(d): 0 for d in self.log_manager.log_dirs}
        nbytes: dict[str, int] = {str(d): 0 for d in self.log_manager.log_dirs}
        checkpoints = self.manager.all_checkpoints()
        for tp in uncleanable:
            log = self.log_manager.find_log(tp)
            if log is None or log.offline:
                continue
            key = str(log.parent_dir)
            partitions[key] = partitions.get(key, 0) + 1
            offsets = cleanable_offsets(log, checkpoints.get(tp), now)
            nbytes[key] = nbytes.get(key, 0) + log_to_clean(log, offsets, now).cleanable_bytes
        started = self._threads[0].thread is not None
        return CleanerGauges(
            max_dirty_percent=pre.max_dirty_percent,
            time_since_last_run_ms=(
                now - self.manager.time_of_last_run_ms if self.manager.time_of_last_run_ms else 0
            ),
            max_compaction_delay_ms=pre.max_compaction_delay_ms,
            max_buffer_utilization_percent=100
            * max((s.buffer_utilization for s in last), default=0.0),
            cleaner_recopy_percent=100
            * sum(s.bytes_written for s in last)
            / max(sum(s.bytes_read for s in last), 1),
            max_clean_time_seconds=max((s.elapsed_s for s in last), default=0.0),
            dead_thread_count=(len(self._threads) - self.alive_threads) if started else 0,
            uncleanable_partitions=partitions,
            uncleanable_bytes=nbytes,
        )
