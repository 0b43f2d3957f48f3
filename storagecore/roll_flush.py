"""The flush a roll leaves for later: Kafka's "flush-log" task, which ``UnifiedLog.roll``
schedules (``flushUptoOffsetExclusive(newSegment.baseOffset)``) instead of syncing the old
segment before the append that rolled returns.

Who calls it: :meth:`storagecore.log.Log._maybe_roll`, when the log has a flush scheduler (the
worker's LogManager, built with ``background_roll_flush``: the Kafka listener appends on its
event loop, which must not wait for the fsync of up to ``segment.bytes`` of page cache). The
tools and the cleaner roll without one, and their rolls flush at once (LocalLog.roll).

What it must not do: sync through the segments' descriptors. Those belong to the log's file
cache (storagecore.file_cache), which may close an inactive segment's files at any time, and a
pin lasts one system call under the log's rules, so a job that held one across an fsync
without the log's lock could see the segment closed (deleted, replaced) under it. The job
opens each file by path instead: under the log's lock it lists the paths of what lies between
the recovery point and its offset; without the lock it opens, fsyncs and closes them one at a
time (one descriptor beyond the cache's bound at most); under the lock again it moves the
recovery point. A file gone meanwhile was deleted by retention (its offsets are below the log
start now) or replaced by a swap (whose new files were synced before the swap), so there is
nothing left to sync for it; a file found at a swapped path is the synced replacement.

Crash protocol of a scheduled roll flush (the roll itself is LocalLog.roll's):

1. the roll writes the producer snapshot at the new base offset without fsync, and schedules
   the job; the recovery point stays below the old segment;
2. the job fsyncs the snapshot, then the old segment's files (log, both indexes, transaction
   index), then the partition directory (the new segment's files and the snapshot's rename);
3. it moves the recovery point to the new base offset (never backwards, never past the log
   end), which later checkpoints record.

A crash (process or machine) before 3 leaves a checkpointed recovery point below the old
segment: the loader recovers (validates, truncates a torn tail) from there, as it recovers any
unflushed segment, and rebuilds producer state from an older snapshot or the log if the new
one is cut short (its CRC check fails). A failed fsync takes the log directory offline and
leaves the recovery point where it was; running out of descriptors fails the job only (the
next roll's job, or the shutdown's flush, covers the same files again from the recovery point).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from storagecore import durability
from storagecore.local_log import LocalLog
from storagecore.producer_state.snapshot import snapshot_file
from storagecore.segment import LogSegment

logger = logging.getLogger(__name__)

FlushScheduler = Callable[[Callable[[], None]], object]
"""Runs a job later on another thread, jobs in the order given (a :class:`RollFlushThread`'s
:meth:`~RollFlushThread.schedule`; in tests, a list's ``append``: the test runs the job when it
chooses, as Kafka's tests do with their MockScheduler)."""


def roll_and_schedule_flush(
    local: LocalLog,
    lock: threading.RLock,
    expected_next_offset: int | None,
    scheduler: FlushScheduler,
) -> LogSegment:
    """Roll ``local`` (the caller holds ``lock``, the owning Log's) without flushing, and
    schedule the :class:`RollFlush` that syncs what lies below the new segment."""
    segment = local.roll(expected_next_offset, flush=False)
    scheduler(RollFlush(local, lock, segment.base_offset))
    return segment


@dataclasses.dataclass(frozen=True)
class RollFlush:
    """Sync the producer snapshot at ``offset`` and every file holding offsets between the
    recovery point and ``offset``, then move the recovery point to ``offset``: steps 2 and 3
    of the module's protocol. Holds ``lock`` only to read the paths and to move the recovery
    point, never across an fsync (appends wait for that lock)."""

    local: LocalLog
    lock: threading.RLock
    offset: int

    def __call__(self) -> None:
        local = self.local
        with self.lock:
            if local.closed or local.offline:
                return  # deleted, shut down (its own flush ran) or failed: nothing to sync
            paths = local.unflushed_paths(self.offset)
        what = f"flush {local.tp} below offset {self.offset}"
        try:
            # Step 2. The snapshot first: once the recovery point passes the old segment, a
            # load after a crash reads the snapshot instead of replaying the segment.
            synced: list[Path] = []
            for path in (snapshot_file(local.directory, self.offset), *paths, local.directory):
                if durability.sync_path(path):
                    synced.append(path)
        except OSError as exc:
            with self.lock:
                if local.closed:
                    return  # the topic was deleted meanwhile: its files may be gone
                failure = local.io_failed(what, exc)
            logger.error("%s", failure)
            return
        # Step 3.
        with self.lock:
            local.mark_flushed(self.offset)
        logger.debug("%s: synced %d files", what, len(synced))


class RollFlushThread:
    """The one thread that runs a LogManager's roll flushes, in the order they are scheduled
    (Kafka's scheduler thread, which runs "flush-log"). The worker's manager has one; the
    tools' do not (their rolls flush at once), so the thread pool's module is imported only
    here, when one is built."""

    def __init__(self) -> None:
        import concurrent.futures  # noqa: PLC0415 - only a manager that flushes in the background

        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="roll-flush")

    def schedule(self, job: Callable[[], None]) -> None:
        """Queue ``job``; after :meth:`stop` (a roll during shutdown) run it at once instead."""
        try:
            self._executor.submit(_run, job)
        except RuntimeError:  # stopped: flush as a manager without the thread would
            job()

    def wait(self) -> None:
        """Return once every job scheduled so far is done (tests, benchmarks)."""
        self._executor.submit(lambda: None).result()

    def stop(self, *, cancel_queued: bool = False) -> None:
        """Run (or with ``cancel_queued`` drop: what a crash leaves) the queued jobs, wait for
        the running one, and end the thread."""
        self._executor.shutdown(wait=True, cancel_futures=cancel_queued)


def _run(job: Callable[[], None]) -> None:
    """A roll flush reports its own I/O errors (the log goes offline); anything else is a bug,
    logged here because nobody waits on the job's future."""
    try:
        job()
    except BaseException:
        logger.exception("a scheduled flush of a rolled segment failed")
        raise
