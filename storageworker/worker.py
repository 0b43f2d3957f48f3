"""The worker: one LogManager and its LogCleaner over a volume, driven by files.

Lifecycle: :meth:`Worker.__init__` reads the settings and the topic set (nothing is opened);
:meth:`Worker.start` loads every log (recovery as needed), creates the declared partitions,
applies the controls, starts the cleaner threads and the scheduler; :meth:`Worker.shutdown`
stops new work, aborts running cleans, flushes, writes every checkpoint and the clean-shutdown
marker. Status and metrics read the worker's state (:mod:`storageworker.status`).

Reloads (every ``configReloadIntervalMs``): a topic file or settings file whose content changed
is parsed; if it fails to parse or validate, the last good configuration stays in force and the
error is reported (status, ``logkeeper_config_errors_total``, the log). Nothing is ever deleted
because a file is broken or empty: a topic is deleted only when it disappears from a set that
parsed, and only if its last declared ``spec.deletionPolicy`` was ``Delete``; otherwise its logs
stay, reported as orphaned.

Invariant: everything the worker writes or deletes is inside its data directories (through
storagecore, DESIGN invariant 5).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from storagecore import pins
from storagecore.cleaner.compaction_request import CompactionRequest
from storagecore.cleaner.log_cleaner import LogCleaner
from storagecore.cleaner.manager import CleaningState
from storagecore.clock import Clock, SystemClock
from storagecore.config import LogConfig, TopicPartition, TopicSpec
from storagecore.errors import ConfigError, StorageError
from storagecore.file_cache import default_max_open_files
from storagecore.log_manager import LogManager
from storageworker.client_topics import CLIENT_TOPICS_FILE, ClientTopicStore
from storageworker.controls import (
    COMPACT_NOW,
    RETRY_UNCLEANABLE,
    VOLUME,
    ApiHolds,
    TopicControls,
    request_token,
    topic_controls,
)
from storageworker.external_rounds import ExternalRounds
from storageworker.scheduler import Scheduler
from storageworker.settings import VolumeSettings, WorkerSettings, load_settings
from storageworker.topics import (
    ParseCache,
    TopicSources,
    parse_topic_sources,
    read_topic_sources,
    stat_stamp,
)

logger = logging.getLogger(__name__)

#: How long a pause waits for a running clean to abort before giving up (it stays pending).
PAUSE_WAIT_S = 30.0


@dataclasses.dataclass(slots=True)
class ConfigStatus:
    """What the last reload of one file said."""

    source: str
    fingerprint: str | None = None
    """Of the content in force (the last good)."""
    seen: str | None = None
    """Of the content read last (good or not): unchanged content is not parsed again."""
    stamp: str | None = None
    """Of the files' metadata at the read last (topics.stat_stamp): unchanged, not read again."""
    error: str | None = None
    error_since_ms: int | None = None
    loaded_ms: int | None = None


@dataclasses.dataclass(slots=True)
class ConfigCounters:
    reloads: int = 0
    errors: int = 0


class Worker:
    def __init__(
        self,
        data_dirs: Sequence[Path],
        topics_path: Path,
        settings_path: Path | None = None,
        *,
        clock: Clock | None = None,
        internal_topics: Mapping[str, TopicSpec] | None = None,
    ) -> None:
        #: Topics the worker declares itself (the Kafka port's ``__consumer_offsets``):
        #: served and cleaned like declared ones; a topic file may not declare them.
        self.internal_topics = dict(internal_topics or {})
        self.data_dirs = [Path(d) for d in data_dirs]
        self.topics_path = Path(topics_path)
        self.settings_path = Path(settings_path) if settings_path is not None else None
        self.clock = clock or SystemClock()
        self.state = "starting"
        self._lock = threading.RLock()
        self._apply_lock = threading.Lock()
        self.counters = ConfigCounters()
        self.topics_status = ConfigStatus(str(self.topics_path))
        self._parsed_topics: ParseCache = {}
        self.settings_status = ConfigStatus(str(self.settings_path or "<defaults>"))
        # A broken settings file at start is fatal (there is no last good one to keep);
        # a broken topic set is not: logs are still loaded and served, nothing is deleted.
        self.volume = self._read_settings_or_raise()
        #: Called with (old, new) after a settings reload (serve: admin token, log format).
        self.settings_listeners: list[Callable[[WorkerSettings, WorkerSettings], None]] = []
        #: The transaction coordinator's status (set by the Kafka listener when it serves one).
        self.transactions_status: Callable[[], dict[str, Any]] | None = None
        #: Topics Kafka clients created (``clientTopicPrefixes``), loaded at start.
        self.client_topics = ClientTopicStore(self.data_dirs[0] / CLIENT_TOPICS_FILE)
        #: The Topic resources' topics and the internal ones: what the files declare.
        self.declared: dict[str, TopicSpec] = {}
        #: Everything served: ``declared``, then the client topics no resource declares.
        self.topics: dict[str, TopicSpec] = {}
        self._previous_topics: dict[str, TopicSpec] = {}
        self._reload_topics(initial=True)
        for name, spec in self.internal_topics.items():
            self.declared.setdefault(name, spec)  # even when the topic file is broken
            self.topics.setdefault(name, spec)
        self.holds = ApiHolds()
        # Per request annotation: the value last acted on, per scope (a topic, or VOLUME).
        self._tokens_seen: dict[str, dict[str, str]] = {}
        self._paused_cleaning: set[TopicPartition] = set()
        self.orphans: list[str] = []
        self.extra_partitions: list[str] = []
        #: Per data dir: bytes held only by readers' pins (storagecore.pins), as of the last
        #: ``retention`` task, and how many expired pin sets that task has removed in all.
        self.pinned_bytes: dict[str, int] = {}
        self.pin_sets_expired = 0
        self.log_manager: LogManager | None = None
        self.cleaner: LogCleaner | None = None
        #: Compact jobs run on this volume's logs (``storageworker.external_rounds``).
        self.external_rounds: ExternalRounds | None = None
        self.scheduler = Scheduler(self.clock)

    @property
    def settings(self) -> WorkerSettings:
        return self.volume.settings

    # -- files ---------------------------------------------------------------------------------
    def _read_settings_or_raise(self) -> VolumeSettings:
        if self.settings_path is None:
            return VolumeSettings(WorkerSettings(), {})
        try:
            text = self.settings_path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{self.settings_path}: cannot read the settings: {exc}") from None
        volume = load_settings(text, source=str(self.settings_path))
        self.settings_status.fingerprint = self.settings_status.seen = _fingerprint(text)
        self.settings_status.loaded_ms = self.clock.milliseconds()
        return volume

    def _record_error(self, status: ConfigStatus, message: str) -> None:
        if status.error != message:
            logger.error("Configuration rejected, the last good one stays in force: %s", message)
        if status.error is None:
            status.error_since_ms = self.clock.milliseconds()
        status.error = message
        self.counters.errors += 1

    @staticmethod
    def _changed(status: ConfigStatus, fingerprint: str) -> bool:
        """Whether content with ``fingerprint`` needs parsing: it differs from what was read
        last, and from what is in force (back to the good content clears the error)."""
        if fingerprint == status.seen:
            return False
        status.seen = fingerprint
        if fingerprint == status.fingerprint:
            status.error = status.error_since_ms = None
            return False
        return True

    def _reload_topics(self, *, initial: bool = False) -> bool:
        """Re-read the topic files; True when a new, valid set was taken."""
        status = self.topics_status
        try:
            stamp = stat_stamp(self.topics_path)
            if stamp is not None and stamp == status.stamp:
                return False
            sources: TopicSources = read_topic_sources(self.topics_path)
            status.stamp = stamp
            if not self._changed(status, sources.fingerprint):
                return False
            topics = parse_topic_sources(sources, self._parsed_topics)
            reserved = sorted(topics.keys() & self.internal_topics.keys())
            if reserved:
                raise ConfigError(
                    f"{self.topics_path}: topic {reserved[0]!r} is reserved for the worker's "
                    "own use; rename it"
                )
            topics.update(self.internal_topics)
        except ConfigError as exc:
            self._record_error(status, str(exc))
            return False
        status.fingerprint = sources.fingerprint
        status.error = status.error_since_ms = None
        status.loaded_ms = self.clock.milliseconds()
        with self._lock:
            self.declared = topics
            previous, self.topics = self.topics, self._merged(topics)
        if not initial:
            self.counters.reloads += 1
            logger.info("Topic set reloaded: %d topics", len(topics))
        self._previous_topics = previous
        return True

    def _merged(self, declared: dict[str, TopicSpec]) -> dict[str, TopicSpec]:
        """``declared`` and the client topics none of them declares. A client topic that a
        Topic resource now declares is adopted: the store forgets it, the resource owns it."""
        store = self.client_topics
        if store.loaded:
            try:
                store.adopt(declared)
            except OSError as exc:  # retried at the next reload; the resource wins meanwhile
                logger.error("Adopting client topics: cannot write %s: %s", store.path, exc)
        merged = {
            name: topic.spec() for name, topic in store.topics().items() if name not in declared
        }
        merged.update(declared)
        return merged

    def refresh_client_topics(self) -> None:
        """Take the client topic store's content into the topic set and apply it."""
        with self._lock:
            self.topics = self._merged(self.declared)
        self.apply_topics()

    def _reload_settings(self) -> bool:
        if self.settings_path is None:
            return False
        status = self.settings_status
        try:
            text = self.settings_path.read_text(encoding="utf-8")
            if not self._changed(status, _fingerprint(text)):
                return False
            volume = load_settings(text, source=str(self.settings_path))
        except OSError as exc:
            self._record_error(status, f"{self.settings_path}: cannot read the settings: {exc}")
            return False
        except ConfigError as exc:
            self._record_error(status, str(exc))
            return False
        status.fingerprint = _fingerprint(text)
        status.error = status.error_since_ms = None
        status.loaded_ms = self.clock.milliseconds()
        old, self.volume = self.settings, volume
        self.counters.reloads += 1
        self._apply_settings(old, volume.settings)
        logger.info("Settings reloaded from %s", self.settings_path)
        return True

    def _apply_settings(self, old: WorkerSettings, new: WorkerSettings) -> None:
        for name, interval in self._intervals(new).items():
            self.scheduler.set_interval(name, interval)
        if self.log_manager is not None:
            self.log_manager.set_min_free_bytes(new.min_free_bytes)
            self.log_manager.file_cache.set_max_open_files(
                default_max_open_files() if new.max_open_files is None else new.max_open_files
            )
        cleaner = self.cleaner
        if cleaner is not None:
            cleaner.lag_lead_ms = new.compaction_lag_lead_ms
            cleaner.reconfigure(new.cleaner_config())
        for listener in self.settings_listeners:
            try:
                listener(old, new)
            except Exception as exc:
                # A setting the process cannot take (an unreadable token file) is reported;
                # the rest of the new settings stay in force.
                self._record_error(self.settings_status, f"applying the settings: {exc}")

    def readiness(self) -> tuple[bool, str]:
        """Ready (``/readyz`` 200) once every log is loaded, while running, and while no data
        directory is offline: an offline directory's partitions cannot be served."""
        if self.state != "running":
            return False, self.state
        manager = self.log_manager
        offline = manager.offline_dirs if manager is not None else []
        if offline:
            return False, "offline data directories: " + ", ".join(str(p) for p in offline)
        return True, self.state

    # -- start and stop ------------------------------------------------------------------------
    def _config_for(self, topic: str) -> LogConfig:
        spec = self.topics.get(topic)
        return spec.config if spec is not None else LogConfig()

    def _window_open(self, now_ms: int) -> bool:
        return self.settings.compaction_windows.is_open(now_ms)

    @staticmethod
    def _intervals(settings: WorkerSettings) -> dict[str, int]:
        return {
            "retention": settings.retention_check_interval_ms,
            "flush": settings.flush_check_interval_ms,
            "checkpoint": settings.checkpoint_interval_ms,
            "delete": settings.delete_check_interval_ms,
            "reload": settings.config_reload_interval_ms,
        }

    def start(self, *, background: bool = True) -> None:
        """Load the logs and apply the topic set; with ``background`` also start the cleaner
        threads and the scheduler (tests drive both by hand with ``background=False``)."""
        manager = LogManager(
            self.data_dirs,
            config_for=self._config_for,
            clock=self.clock,
            min_free_bytes=self.settings.min_free_bytes,
            max_open_files=self.settings.max_open_files,
            # The Kafka listener appends on its event loop: a roll must not make it wait for
            # the old segment's fsync (storagecore.roll_flush).
            background_roll_flush=True,
        )
        self.log_manager = manager
        settings = self.settings
        self.cleaner = LogCleaner(
            manager,
            settings.cleaner_config(),
            clock=self.clock,
            may_start_new_work=self._window_open,
            lag_lead_ms=settings.compaction_lag_lead_ms,
        )
        self.external_rounds = ExternalRounds(manager, self.cleaner, self.clock)
        self._previous_topics = {}
        self.client_topics.load()
        with self._lock:
            self.topics = self._merged(self.declared)
        self.apply_topics()
        tasks = {
            "retention": self._run_retention,
            "flush": manager.flush_dirty_logs,
            "checkpoint": manager.checkpoint_recovery_points_and_log_start_offsets,
            "delete": self._run_deletes,
            "reload": self.reload,
        }
        for name, interval in self._intervals(settings).items():
            # Retention waits one interval after start, as Kafka's (InitialTaskDelayMs).
            self.scheduler.schedule(name, interval, tasks[name], delay_ms=interval)
        if background:
            self.cleaner.start()
            self.scheduler.start()
        self.state = "running"
        logger.info(
            "Worker running: %d logs in %s, %d topics declared",
            len(manager.logs),
            ", ".join(str(d) for d in self.data_dirs),
            len(self.topics),
        )

    def shutdown(self) -> None:
        """Stop new work, abort running cleans (their ``.cleaned`` files go), flush, write the
        checkpoints and the clean-shutdown marker."""
        with self._lock:
            if self.state in ("stopping", "stopped"):
                return
            self.state = "stopping"
        self.scheduler.shutdown()
        if self.cleaner is not None:
            self.cleaner.shutdown(timeout_s=max(self.settings.shutdown_grace_period_ms / 2000, 1))
        if self.log_manager is not None:
            self.log_manager.shutdown()
        self.state = "stopped"
        logger.info("Worker stopped cleanly")

    # -- scheduled work ------------------------------------------------------------------------
    def _run_retention(self) -> None:
        manager, cleaner = self.started_parts()
        for plan in manager.cleanup_logs(cleaner.manager):
            logger.info(
                "Retention deleted %d segments (%d bytes) of %s; log start offset %d -> %d",
                len(plan.deletions),
                plan.deleted_bytes,
                plan.tp,
                plan.log_start_offset_before,
                plan.log_start_offset_after,
            )
        # Once per retention check, not per delete check (every second): measuring walks every
        # pinned file, and a lease of an hour needs no finer sweep.
        self._sweep_pins()

    def _run_deletes(self) -> None:
        manager, _ = self.started_parts()
        manager.delete_expired_segment_files()
        manager.delete_expired_logs()

    def _sweep_pins(self) -> None:
        """Remove the Spark readers' pin sets whose lease passed (a reader that died keeps
        deleted segments' bytes only until then) and measure what the live ones hold."""
        now_ms = self.clock.milliseconds()
        for data_dir in self.data_dirs:
            try:
                self.pin_sets_expired += pins.sweep_expired(data_dir, now_ms)
                self.pinned_bytes[str(data_dir)] = pins.pinned_bytes(data_dir)
            except OSError as exc:
                logger.warning("Read pins of %s not swept: %s", data_dir, exc)

    def reload(self) -> None:
        """Re-read both files and apply what changed (the ``reload`` task)."""
        self._reload_settings()
        self._reload_topics()
        if self.external_rounds is not None:
            self.external_rounds.expire()  # compact jobs that died without ending
        # Annotations and API holds are applied on every pass: cheap, and a pause that could
        # not be applied (a clean that did not abort in time) is retried.
        self.apply_topics()

    def started_parts(self) -> tuple[LogManager, LogCleaner]:
        """The log manager and the cleaner of a started worker."""
        assert self.log_manager is not None and self.cleaner is not None, "worker not started"
        return self.log_manager, self.cleaner

    # -- the topic set -------------------------------------------------------------------------
    def apply_topics(self) -> None:
        """Make the logs match the topic set and the controls (idempotent). Called by the
        reload task and by admin calls: one at a time."""
        with self._apply_lock:
            self._apply_topics()

    def _apply_topics(self) -> None:
        manager, cleaner = self.started_parts()
        with self._lock:
            topics = dict(self.topics)
            previous = self._previous_topics
            self._previous_topics = topics
        existing = manager.logs
        for name, spec in topics.items():
            for partition in range(spec.partitions):
                tp = TopicPartition(name, partition)
                log = existing.get(tp)
                if log is None:
                    try:
                        manager.get_or_create_log(tp, spec.config)
                    except StorageError as exc:
                        logger.error("Cannot create %s: %s", tp, exc)
                elif log.config != spec.config:
                    log.update_config(spec.config)
                    logger.info("Configuration of %s updated", tp)
        # Topics gone from a set that parsed: deleted only if they asked for it.
        for name, spec in previous.items():
            if name in topics or spec.deletion_policy != "Delete":
                continue
            for tp in [tp for tp in manager.logs if tp.topic == name]:
                logger.warning("Topic %s left the topic set with deletionPolicy Delete", name)
                try:
                    cleaner.delete_log(tp)
                except StorageError as exc:
                    logger.error("Cannot delete %s: %s", tp, exc)
        logs = manager.logs
        self.orphans = sorted(str(tp) for tp in logs if tp.topic not in topics)
        self.extra_partitions = sorted(
            str(tp)
            for tp in logs
            if tp.topic in topics and tp.partition >= topics[tp.topic].partitions
        )
        self._apply_controls(topics, logs.keys())

    def controls_for(self, topic: str) -> TopicControls:
        spec = self.topics.get(topic)
        return topic_controls(
            topic, spec.annotations if spec else {}, self.volume.annotations, self.holds
        )

    def _apply_controls(self, topics: dict[str, TopicSpec], tps: Any) -> None:
        manager, cleaner = self.started_parts()
        all_tps = sorted(tps)
        controls = {topic: self.controls_for(topic) for topic in {tp.topic for tp in all_tps}}
        manager.set_retention_paused(tp for tp in all_tps if controls[tp.topic].pause_retention)
        want_paused = {tp for tp in all_tps if controls[tp.topic].pause_cleaning}
        for tp in sorted(want_paused - self._paused_cleaning):
            # LogCleaningInProgress -> LogCleaningAborted -> LogCleaningPaused: a running clean
            # stops at its next check and leaves no files. If it takes longer than the wait,
            # the pause still lands when it stops (done_cleaning turns Aborted into Paused).
            try:
                cleaner.manager.abort_and_pause(tp, PAUSE_WAIT_S, self.clock.milliseconds())
            except TimeoutError as exc:
                logger.warning("Pausing cleaning of %s: %s; it pauses when it stops", tp, exc)
            self._paused_cleaning.add(tp)
            logger.info("Cleaning of %s paused", tp)
        for tp in sorted(self._paused_cleaning - want_paused):
            state, _ = cleaner.manager.state(tp)
            if state is CleaningState.ABORTED:
                continue  # still stopping: resume on a later pass
            self._paused_cleaning.discard(tp)
            if state is CleaningState.PAUSED and tp in manager.logs:
                cleaner.manager.resume(tp)
                logger.info("Cleaning of %s resumed", tp)
        # compact-now and retry-uncleanable: a value not seen before asks once (topic or
        # volume-wide).
        scopes = [("", self.volume.annotations)]
        scopes += [(name, spec.annotations) for name, spec in topics.items()]
        for annotation, act in (
            (COMPACT_NOW, self.compact_now),
            (RETRY_UNCLEANABLE, self.retry_uncleanable),
        ):
            seen = self._tokens_seen.setdefault(annotation, {})
            for scope, scope_annotations in scopes:
                token = request_token(scope_annotations, annotation)
                key = scope or VOLUME
                if token is None:
                    seen.pop(key, None)
                    continue
                if seen.get(key) == token:
                    continue
                seen[key] = token
                act(None if scope == "" else scope)

    # -- admin verbs ---------------------------------------------------------------------------
    def compact_now(self, topic: str | None) -> dict[TopicPartition, CompactionRequest]:
        """Ask for one cleaning pass of every compacted partition of ``topic`` (None: all),
        whatever its dirty ratio. Each request is decided at once where it can be (refused, or
        nothing to clean) and otherwise pending until the cleaner threads end it."""
        manager, cleaner = self.started_parts()
        now = self.clock.milliseconds()
        asked = {
            tp: cleaner.manager.ask_compaction(log, now)
            for tp, log in sorted(manager.logs.items())
            if (topic is None or tp.topic == topic) and log.config.compact
        }
        for tp, request in asked.items():
            logger.info(
                "Compaction requested for %s: %s %s", tp, request.outcome.value, request.detail
            )
        return asked

    def retry_uncleanable(self, topic: str | None) -> list[TopicPartition]:
        """Retry the uncleanable partitions of ``topic`` (None: all) at the next selection; each
        keeps its mark and reason until its retry succeeds."""
        manager, cleaner = self.started_parts()
        now = self.clock.milliseconds()
        retried = [
            tp
            for tp in sorted(cleaner.manager.uncleanable)
            if (topic is None or tp.topic == topic)
            and tp in manager.logs
            and cleaner.manager.retry_uncleanable(tp, now)
        ]
        if retried:
            logger.info("Retrying uncleanable %s", ", ".join(str(tp) for tp in retried))
        return retried

    def control_states(self, topic: str | None) -> dict[str, dict[str, Any]]:
        """Where the pause verbs left each partition of ``topic`` (None: all): the cleaner's
        state as status shows it (``LogCleaningPaused`` once a running clean stopped,
        ``LogCleaningAborted`` while it stops) and whether cleaning and retention are held."""
        manager, cleaner = self.started_parts()
        result: dict[str, dict[str, Any]] = {}
        for tp in sorted(manager.logs):
            if topic is not None and tp.topic != topic:
                continue
            state, _ = cleaner.manager.reported_state(tp)
            controls = self.controls_for(tp.topic)
            result[str(tp)] = {
                "cleanerState": state.value if state is not None else "idle",
                "pausedCleaning": controls.pause_cleaning,
                "pausedRetention": controls.pause_retention,
            }
        return result

    def control(self, verb: str, topic: str | None) -> None:
        """An admin API pause or resume, for ``topic`` or (None) the whole volume."""
        if topic is not None and topic not in self.topics:
            raise ConfigError(f"unknown topic {topic!r}")
        with self._lock:
            self.holds = self.holds.apply(verb, VOLUME if topic is None else topic)
        self.apply_topics()


def _fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
