"""The logs of one worker across its log directories (Kafka's LogManager).

Per log dir (a :class:`storagecore.log_dir.LogDir`): a ``.lock`` (flock; a second process fails
with :class:`LogDirLockedError`), its own checkpoints (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``) and its own ``.kafka_cleanshutdown`` marker. The marker is
deleted as soon as loading starts, so a crash while loading counts as unclean (KAFKA-10471), and
written again only by :meth:`shutdown` after every log of the dir was flushed and checkpointed.

An ``OSError`` in a dir takes that dir offline (its logs raise :class:`LogDirOfflineError`,
checkpoints stop being written for it); the other dirs keep working.

Nothing outside the log dirs is ever written or deleted: partition directories are named from
validated topic names, and physical deletion only removes ``<topic>-<p>.<uuid>-delete`` children
of a log dir (DESIGN invariant 5).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from storagecore import durability, files, log_retention
from storagecore.clock import Clock, SystemClock
from storagecore.config import LogConfig, TopicPartition
from storagecore.disk_space import DiskSpace, is_disk_full
from storagecore.errors import (
    ConfigError,
    LogDirFullError,
    LogDirOfflineError,
    ResourceExhaustedError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from storagecore.file_cache import FileCache, default_max_open_files, is_resource_exhausted
from storagecore.log import Log
from storagecore.log_dir import LogDir
from storagecore.log_retention import RetentionCoordinator, RetentionTotals
from storagecore.logs_to_delete import LogsToDelete
from storagecore.retention import RetentionPlan
from storagecore.roll_flush import RollFlushThread

logger = logging.getLogger(__name__)

ConfigLookup = Callable[[str], LogConfig]


class LogManager:
    def __init__(
        self,
        log_dirs: Iterable[Path | str],
        *,
        config_for: ConfigLookup | Mapping[str, LogConfig] | None = None,
        default_config: LogConfig | None = None,
        clock: Clock | None = None,
        recovery_threads_per_dir: int = 1,
        broker_epoch: int = 0,
        min_free_bytes: int | None = None,
        max_open_files: int | None = None,
        background_roll_flush: bool = False,
    ) -> None:
        self.clock = clock or SystemClock()
        #: With ``background_roll_flush`` (the worker) an append that rolls leaves the old
        #: segment's fsync to this thread (storagecore.roll_flush); else the roll flushes.
        self.roll_flusher = RollFlushThread() if background_roll_flush else None
        self._roll_flush_scheduler = self.roll_flusher.schedule if self.roll_flusher else None
        #: The segment files of every log open through this bounded cache (None: half the
        #: process's soft RLIMIT_NOFILE, at most 16,384; storagecore.file_cache).
        self.file_cache = FileCache(
            default_max_open_files() if max_open_files is None else max_open_files
        )
        self.default_config = default_config or LogConfig()
        if config_for is None:
            self._config_for: ConfigLookup = lambda _topic: self.default_config
        elif isinstance(config_for, Mapping):
            mapping = dict(config_for)
            self._config_for = lambda topic: mapping.get(topic, self.default_config)
        else:
            self._config_for = config_for
        self.recovery_threads_per_dir = max(1, recovery_threads_per_dir)
        self.broker_epoch = broker_epoch
        self._lock = threading.RLock()
        self._dirs: dict[Path, LogDir] = {}
        self._logs: dict[TopicPartition, Log] = {}
        # Invariant: the number of logs in _logs per log dir (where a new log goes).
        self._log_counts: dict[Path, int] = {}
        # -delete dirs, and the stray .deleted files the load found: unlinked by
        # delete_expired_logs (the worker's delete task), the stray files at shutdown too.
        self._to_delete = LogsToDelete(self._dirs.keys(), self.handle_io_error)
        self._closed = False
        # Invariant: no segment of a log in here is deleted by retention (the worker's
        # pause-retention); replaced as a whole, so readers need no lock.
        self._retention_paused: frozenset[TopicPartition] = frozenset()
        self.retention_totals = RetentionTotals()
        paths = [Path(p).resolve() for p in log_dirs]
        #: Free space against the floor, per log dir (:meth:`ensure_writable`).
        self.disk_space = {path: DiskSpace(path, min_free_bytes) for path in paths}
        if not paths:
            raise ConfigError("at least one log directory is required")
        if len(set(paths)) != len(paths):
            raise ConfigError(f"log directories listed twice: {[str(p) for p in paths]}")
        try:
            for path in paths:
                self._dirs[path] = LogDir.lock(path)
            self._load_logs()
            #: Files the load opened (the cache's misses): after a clean shutdown only the
            #: active segments' (storagecore.loader, pass 3), whatever the segment count.
            self.file_opens_at_load = self.file_cache.stats().misses
        except BaseException:
            for log in self._logs.values():
                log.close_handles()
            self._release_locks()
            raise

    # -- directories ---------------------------------------------------------------------------
    def _release_locks(self) -> None:
        for log_dir in self._dirs.values():
            log_dir.release()

    @property
    def log_dirs(self) -> list[Path]:
        return list(self._dirs)

    @property
    def online_dirs(self) -> list[Path]:
        return [d.path for d in self._dirs.values() if d.online]

    @property
    def offline_dirs(self) -> list[Path]:
        return [d.path for d in self._dirs.values() if not d.online]

    def had_clean_shutdown(self, path: Path) -> bool:
        """Whether ``path`` was found with Kafka's clean-shutdown marker (no recovery ran)."""
        return self._dirs[path].had_clean_shutdown

    def dir_error(self, path: Path) -> str | None:
        return self._dirs[path].error

    def note_disk_full(self, path: Path, exc: OSError) -> None:
        """A write in ``path`` found no space (an append, the cleaner's output): not a failure;
        the dir stays online, under disk pressure until space is free again
        (:mod:`storagecore.disk_space`)."""
        space = self.disk_space.get(path)
        if space is not None:
            space.note_full(exc, f"a write in {path}")

    def handle_io_error(self, path: Path, exc: OSError) -> None:
        """LogDirFailureChannel: take ``path`` offline, keep the other dirs running."""
        with self._lock:
            log_dir = self._dirs.get(path)
            if log_dir is None or not log_dir.online:
                return
            log_dir.online = False
            log_dir.error = str(exc)
            logger.error("Log directory %s is offline after an I/O error: %s", path, exc)
            for log in self._logs.values():
                if log.parent_dir == path:
                    log.mark_offline()

    def ensure_writable(self, path: Path, incoming_bytes: int = 0) -> None:
        """Refuse new data for ``path`` while it is below its free-space floor or its last write
        failed for lack of space (:class:`LogDirFullError`, retriable)."""
        self.disk_space[path].check_writable(incoming_bytes)

    def set_min_free_bytes(self, min_free_bytes: int | None) -> None:
        """The free-space floor of every dir (None: the smaller of 5% and 512 MiB)."""
        for space in self.disk_space.values():
            space.set_min_free_bytes(min_free_bytes)

    @contextlib.contextmanager
    def _guard_dir(self, path: Path, what: str) -> Iterator[None]:
        """Run an operation on ``path``; an OSError takes the dir offline."""
        if not self._dirs[path].online:
            raise LogDirOfflineError(f"{what}: log directory {path} is offline")
        try:
            yield
        except OSError as exc:
            if is_disk_full(exc):
                # A checkpoint or a new log that does not fit: written atomically or not at
                # all, so the dir stays online (the old checkpoint stays in force).
                self.note_disk_full(path, exc)
                raise LogDirFullError(f"{what} failed in {path}: {exc}") from exc
            if is_resource_exhausted(exc):
                # Out of descriptors or memory (EMFILE, ENFILE, ENOMEM): not the disk's fault.
                # Idle files are closed for the next attempt; the dir stays online.
                self.file_cache.shed()
                raise ResourceExhaustedError(
                    f"{what} failed in {path}: {exc}; idle files were closed, retry"
                ) from exc
            self.handle_io_error(path, exc)
            raise LogDirOfflineError(f"{what} failed in {path}: {exc}") from exc

    # -- loading -------------------------------------------------------------------------------
    def _load_logs(self) -> None:
        # A volume of many segments allocates a few objects per segment, all kept: the cyclic
        # garbage collector's passes over them made the load quadratic-ish (half the time of
        # 8,000 segments); it stays off while loading, and what was loaded is frozen out of
        # later passes (gc.freeze: the objects live as long as the worker).
        collecting = gc.isenabled()
        gc.disable()
        try:
            for log_dir in self._dirs.values():
                try:
                    self._load_dir(log_dir)
                    self._index_unindexed_logs(log_dir.path)
                except OSError as exc:
                    self.handle_io_error(log_dir.path, exc)
        finally:
            if collecting:
                gc.enable()
        gc.freeze()

    def _load_dir(self, log_dir: LogDir) -> None:
        recovery_points = log_dir.read_checkpoint(files.RECOVERY_POINT_CHECKPOINT)
        log_starts = log_dir.read_checkpoint(files.LOG_START_OFFSET_CHECKPOINT)
        jobs: list[tuple[TopicPartition, Path]] = []
        for child in sorted(log_dir.path.iterdir()):
            if not child.is_dir() or child.name in files.PIPELINE_DIRS:
                continue
            if files.is_delete_dir_name(child.name):
                self._schedule_dir_delete(child, delay_ms=0)
                continue
            if child.name.endswith((files.FUTURE_DIR_SUFFIX, files.STRAY_DIR_SUFFIX)):
                logger.warning("Skipping %s: future and stray logs are not managed here", child)
                continue
            try:
                tp = files.parse_partition_dir_name(child.name)
            except ConfigError:
                logger.warning("Skipping %s: not a partition directory", child)
                continue
            jobs.append((tp, child))
        clean = log_dir.had_clean_shutdown
        logger.info(
            "Loading %d logs from %s (%s shutdown)",
            len(jobs),
            log_dir.path,
            "clean" if clean else "unclean",
        )

        def load(job: tuple[TopicPartition, Path]) -> Log:
            tp, path = job
            return Log.open(
                path,
                self._config_for(tp.topic),
                self.clock,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=log_starts.get(tp, 0),
                had_clean_shutdown=clean,
                on_io_error=self.handle_io_error,
                on_disk_full=self.note_disk_full,
                file_cache=self.file_cache,
                flush_scheduler=self._roll_flush_scheduler,
                defer_delete=self._to_delete.add_stray_file,
            )

        if len(jobs) <= 1 or self.recovery_threads_per_dir <= 1:
            # One log (a `logkeeper clean` of one partition) needs no pool: its threads and
            # the import of concurrent.futures would be all it adds.
            self._add_loaded(map(load, jobs))
            return
        import concurrent.futures  # noqa: PLC0415 - on first use (see above)

        with concurrent.futures.ThreadPoolExecutor(
            max_workers=self.recovery_threads_per_dir, thread_name_prefix="log-recovery"
        ) as pool:
            self._add_loaded(pool.map(load, jobs))

    def _index_unindexed_logs(self, path: Path) -> None:
        """Once per log dir: the ``.txnindex`` files that a Logkeeper before them did not write
        (read_committed fetches take aborted transactions from them only), found by one walk
        of each log; then the marker file that says it is done."""
        marker = path / files.TXN_INDEX_MARKER_FILE
        if marker.exists():
            return
        logs = [log for log in self._logs.values() if log.parent_dir == path]
        written = 0
        for log in logs:
            try:
                written += log.index_unindexed_segments()
            except StorageError as exc:  # the log is offline: the next start tries again
                logger.warning("Transaction indexes of %s not written: %s", log.tp, exc)
                return
        durability.write_atomically(marker, b"1\n")
        logger.info(
            "Transaction indexes of %s: %d written for %d logs (once per log dir)",
            path,
            written,
            len(logs),
        )

    def _add_loaded(self, logs: Iterable[Log]) -> None:
        for log in logs:
            existing = self._logs.get(log.tp)
            if existing is not None:
                raise StorageError(
                    f"duplicate log directories for {log.tp}: {existing.directory} and "
                    f"{log.directory}"
                )
            self._logs[log.tp] = log
            self._count_log(log.parent_dir, 1)

    def _count_log(self, path: Path, delta: int) -> None:
        self._log_counts[path] = self._log_counts.get(path, 0) + delta

    # -- logs ----------------------------------------------------------------------------------
    def get_log(self, tp: TopicPartition) -> Log:
        log = self._logs.get(tp)
        if log is None:
            raise UnknownTopicOrPartitionError(
                f"no log for {tp} in {', '.join(map(str, self._dirs))}"
            )
        return log

    def find_log(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    @property
    def logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)

    def config_for(self, topic: str) -> LogConfig:
        return self._config_for(topic)

    def get_or_create_log(self, tp: TopicPartition, config: LogConfig | None = None) -> Log:
        """The log of ``tp``, created in the online dir with the fewest logs if absent."""
        with self._lock:
            log = self._logs.get(tp)
            if log is not None:
                return log
            name = files.partition_dir_name(tp)  # validates the topic name first
            target = self._next_log_dir()
            path = target / name
            with self._guard_dir(target, f"create log {tp}"):
                path.mkdir()
                durability.fsync_dir(target)
                log = Log.open(
                    path,
                    config or self._config_for(tp.topic),
                    self.clock,
                    had_clean_shutdown=True,
                    on_io_error=self.handle_io_error,
                    on_disk_full=self.note_disk_full,
                    file_cache=self.file_cache,
                    flush_scheduler=self._roll_flush_scheduler,
                )
            self._logs[tp] = log
            self._count_log(target, 1)
            logger.info("Created log for %s in %s", tp, target)
            return log

    def _next_log_dir(self) -> Path:
        # From the counts kept as logs come and go: a walk over every log per creation made
        # creating N logs next to M cost O(N * M) (100 internal partitions beside 10,000 logs).
        online = [d.path for d in self._dirs.values() if d.online]
        if not online:
            raise LogDirOfflineError("every log directory is offline")
        return min(online, key=lambda p: (self._log_counts.get(p, 0), str(p)))

    def update_config(self, topic: str, config: LogConfig) -> None:
        for tp, log in self.logs.items():
            if tp.topic == topic:
                log.update_config(config)

    def delete_log(self, tp: TopicPartition) -> Path:
        """Kafka partition deletion: close, rename to ``<topic>-<p>.<uuid>-delete``, rewrite the
        checkpoints, and unlink the directory after ``file.delete.delay.ms``."""
        with self._lock:
            log = self.get_log(tp)
            parent = log.parent_dir
            with self._guard_dir(parent, f"delete log {tp}"):
                log.close()
                target = parent / files.delete_dir_name(tp)
                durability.rename(log.directory, target, sync_parent=True)
                del self._logs[tp]
                self._count_log(parent, -1)
                self._checkpoint_dir(parent)
            self._schedule_dir_delete(target, delay_ms=log.config.file_delete_delay_ms)
            logger.info("Log for %s renamed to %s for deletion", tp, target.name)
            return target

    def _schedule_dir_delete(self, path: Path, *, delay_ms: int) -> None:
        self._to_delete.schedule_dir(path, self.clock.milliseconds() + delay_ms)

    def delete_expired_logs(self) -> int:
        """kafka-delete-logs: remove ``-delete`` dirs whose delay passed, and the stray
        ``.deleted`` files the load left (storagecore.logs_to_delete). Returns how many dirs."""
        self._to_delete.delete_stray_files()
        return self._to_delete.delete_due_dirs(self.clock.milliseconds())

    @property
    def pending_dir_deletes(self) -> list[Path]:
        return self._to_delete.pending_dirs

    def delete_expired_segment_files(self) -> int:
        total = 0
        for log in self.logs.values():
            if not log.offline:
                total += log.delete_expired_files()
        return total

    # -- retention -----------------------------------------------------------------------------
    def set_retention_paused(self, tps: Iterable[TopicPartition]) -> None:
        """The partitions whose segments retention must leave alone (replaces the set)."""
        self._retention_paused = frozenset(tps)

    def is_retention_paused(self, tp: TopicPartition) -> bool:
        return tp in self._retention_paused

    def record_retention(self, plans: Sequence[RetentionPlan]) -> None:
        """Count what retention deleted (the worker's metrics)."""
        with self._lock:
            self.retention_totals.record(plans)

    def cleanup_logs(self, cleaner: RetentionCoordinator | None = None) -> list[RetentionPlan]:
        """kafka-log-retention: apply retention to every online log whose retention is not
        paused (storagecore.log_retention); the plans carried out."""
        logs = [
            log
            for log in self.logs.values()
            if not log.offline and log.tp not in self._retention_paused
        ]
        plans = log_retention.delete_old_segments(logs, cleaner)
        self.record_retention(plans)
        return plans

    # -- flush and checkpoints -----------------------------------------------------------------
    def flush_dirty_logs(self) -> int:
        """kafka-log-flusher: flush logs whose ``flush.ms`` has elapsed. Returns how many."""
        now_ms = self.clock.milliseconds()
        flushed = 0
        for log in self.logs.values():
            if log.offline or log.unflushed_messages == 0:
                continue
            if now_ms - log.last_flush_ms >= log.config.flush_ms:
                try:
                    log.flush()
                    flushed += 1
                except LogDirOfflineError:
                    pass
                except ResourceExhaustedError as exc:
                    logger.warning("Flush of %s deferred to the next check: %s", log.tp, exc)
        return flushed

    def checkpoint_recovery_points_and_log_start_offsets(self) -> None:
        # Under the manager's lock, as every other writer of these files (a log's creation or
        # deletion, shutdown): two threads writing one checkpoint would race on its ``.tmp``
        # (one rename finds it gone: an I/O error that took the dir offline). Kafka's
        # CheckpointFile serialises its writes the same way.
        with self._lock:
            for log_dir in self._dirs.values():
                if log_dir.online:
                    try:
                        self._checkpoint_dir(log_dir.path)
                    except LogDirFullError as exc:
                        logger.warning("Checkpoints not written, no space: %s", exc)
                    except ResourceExhaustedError as exc:
                        logger.warning("Checkpoints not written, retried next interval: %s", exc)
                    except LogDirOfflineError:
                        pass

    def _checkpoint_dir(self, path: Path) -> None:
        with self._guard_dir(path, f"checkpoint {path}"):
            logs = [
                log for log in self._logs.values() if log.parent_dir == path and not log.offline
            ]
            log_dir = self._dirs[path]
            log_dir.write_checkpoint(
                files.RECOVERY_POINT_CHECKPOINT, {log.tp: log.recovery_point for log in logs}
            )
            # Only logs whose start moved past their first segment (Kafka does the same).
            log_dir.write_checkpoint(
                files.LOG_START_OFFSET_CHECKPOINT,
                {
                    log.tp: log.log_start_offset
                    for log in logs
                    if log.log_start_offset > log.segments[0].base_offset
                },
            )

    # -- shutdown ------------------------------------------------------------------------------
    def shutdown(self, *, before_unlock: Callable[[], object] | None = None) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown marker per dir.

        ``before_unlock`` runs last, before the dirs' locks are released (even if it raises):
        ``logkeeper clean`` waits there for the thread that unlinks the replaced segments'
        files, so that no other process loads the dir (whose loader removes ``.deleted`` files
        too) while they are being unlinked.
        """
        if self.roll_flusher is not None:
            self.roll_flusher.stop()  # the queued roll flushes first (each log's own follows)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._to_delete.delete_stray_files()
            for log_dir in self._dirs.values():
                if not log_dir.online:
                    for log in self._logs.values():
                        if log.parent_dir == log_dir.path:
                            log.close()
                    continue
                try:
                    logs = [log for log in self._logs.values() if log.parent_dir == log_dir.path]
                    for log in logs:
                        log.flush()
                    self._checkpoint_dir(log_dir.path)
                    for log in logs:
                        log.close()
                    durability.write_atomically(
                        log_dir.path / files.CLEAN_SHUTDOWN_FILE,
                        json.dumps({"version": 0, "brokerEpoch": self.broker_epoch}).encode(),
                    )
                except (
                    OSError,
                    LogDirOfflineError,
                    LogDirFullError,
                    ResourceExhaustedError,
                ) as exc:
                    logger.error("Unclean shutdown of %s: %s", log_dir.path, exc)
                    for log in self._logs.values():
                        if log.parent_dir == log_dir.path:
                            log.close_handles()
            try:
                if before_unlock is not None:
                    before_unlock()
            finally:
                self._logs.clear()
                self._log_counts.clear()
                self._release_locks()

    def close_without_shutdown(self) -> None:
        """Release handles and locks without flushing or marking a clean shutdown (a crash)."""
        if self.roll_flusher is not None:
            self.roll_flusher.stop(cancel_queued=True)
        with self._lock:
            self._closed = True
            for log in self._logs.values():
                log.close_handles()
            self._logs.clear()
            self._log_counts.clear()
            self._release_locks()

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()
