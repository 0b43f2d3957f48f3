"""Prometheus metrics of a worker, collected from its state at scrape time.

Prometheus naming: base units (bytes, seconds), ``_total`` for counters, labels only for the
topic, the partition and the data directory (never offsets or keys). Counters come from the
monotonic totals kept by storagecore (:class:`~storagecore.cleaner.log_cleaner.CleanerTotals`,
:class:`~storagecore.log_retention.RetentionTotals`) and the worker's reload counters; gauges read
the logs and the cleaner. One registry per worker, so tests can run several.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from storagecore.cleaner.log_to_clean import cleanable_offsets, log_to_clean
from storagecore.config import TopicPartition
from storageworker import status
from storageworker.controls import TopicControls
from storageworker.worker import Worker

PREFIX = "logkeeper"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class WorkerCollector(Collector):
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Metric]:
        worker = self.worker
        up = GaugeMetricFamily(f"{PREFIX}_worker_ready", "1 when every log is loaded and serving")
        up.add_metric([], 1.0 if worker.readiness()[0] else 0.0)
        yield up
        reloads = CounterMetricFamily(
            f"{PREFIX}_config_reloads", "Topic-set and settings reloads that took effect"
        )
        reloads.add_metric([], worker.counters.reloads)
        yield reloads
        errors = CounterMetricFamily(
            f"{PREFIX}_config_errors", "Topic or settings files rejected (the last good stays)"
        )
        errors.add_metric([], worker.counters.errors)
        yield errors
        config_ok = GaugeMetricFamily(
            f"{PREFIX}_config_ok", "1 when the file parsed and validated", labels=["file"]
        )
        config_ok.add_metric(["topics"], 1.0 if worker.topics_status.error is None else 0.0)
        config_ok.add_metric(["settings"], 1.0 if worker.settings_status.error is None else 0.0)
        yield config_ok
        orphans = GaugeMetricFamily(
            f"{PREFIX}_orphaned_logs", "Logs on the volume whose topic is not declared"
        )
        orphans.add_metric([], len(worker.orphans))
        yield orphans
        client = GaugeMetricFamily(
            f"{PREFIX}_client_topics",
            "Topics Kafka clients created (clientTopicPrefixes) that no Topic resource declares",
        )
        client.add_metric(
            [], sum(1 for t in worker.client_topics.topics() if t not in worker.declared)
        )
        yield client
        client_ok = GaugeMetricFamily(
            f"{PREFIX}_client_topics_store_ok",
            "0 while the client topics file cannot be read (client topic changes are refused)",
        )
        client_ok.add_metric([], 1 if worker.client_topics.error is None else 0)
        yield client_ok
        pinned = GaugeMetricFamily(
            f"{PREFIX}_read_pins_bytes",
            "Bytes of deleted segments kept by Spark readers' pins (until released or expired)",
            labels=["dir"],
        )
        for data_dir, size_bytes in sorted(worker.pinned_bytes.items()):
            pinned.add_metric([data_dir], float(size_bytes))
        yield pinned
        expired = CounterMetricFamily(
            f"{PREFIX}_read_pin_sets_expired", "Readers' pin sets removed when their lease passed"
        )
        expired.add_metric([], worker.pin_sets_expired)
        yield expired
        manager, cleaner = worker.log_manager, worker.cleaner
        if manager is None or cleaner is None:
            return
        yield from self._dirs(worker)
        yield from self._open_files(worker)
        yield from self._logs(worker)
        window = GaugeMetricFamily(
            f"{PREFIX}_compaction_window_open",
            "1 while the settings' compaction windows let the cleaner run",
        )
        window.add_metric(
            [],
            1.0 if worker.settings.compaction_windows.is_open(worker.clock.milliseconds()) else 0.0,
        )
        yield window
        totals = cleaner.totals
        for name, help_text, value in (
            ("cleaner_runs", "Cleaning rounds completed", totals.rounds),
            ("cleaner_read_bytes", "Bytes read by the cleaner (both passes)", totals.bytes_read),
            ("cleaner_written_bytes", "Bytes written by the cleaner", totals.bytes_written),
            ("cleaner_records_read", "Records read by the cleaner", totals.records_read),
            ("cleaner_records_removed", "Records removed by compaction", totals.records_removed),
            ("cleaner_duration_seconds", "Time spent cleaning", totals.duration_s),
            ("cleaner_aborted_runs", "Cleaning rounds aborted (pause, deletion)", totals.aborted),
            ("cleaner_failed_runs", "Cleaning rounds that failed", totals.failed),
            (
                "cleaner_throttle_wait_seconds",
                "Time cleaners waited for the I/O limit",
                cleaner.throttler.total_wait_s,
            ),
            (
                "retention_deleted_segments",
                "Segments deleted by retention",
                manager.retention_totals.segments_deleted,
            ),
            (
                "retention_deleted_bytes",
                "Bytes deleted by retention",
                manager.retention_totals.bytes_deleted,
            ),
        ):
            counter = CounterMetricFamily(f"{PREFIX}_{name}", help_text)
            counter.add_metric([], value)
            yield counter
        gauges = cleaner.gauges()
        for name, help_text, value in (
            (
                "cleaner_max_dirty_ratio",
                "Highest dirty ratio among compacted logs (0..1)",
                gauges.max_dirty_percent / 100,
            ),
            (
                "cleaner_time_since_last_run_seconds",
                "Since the cleaner last chose a log",
                gauges.time_since_last_run_ms / 1000,
            ),
            (
                "cleaner_max_compaction_delay_seconds",
                "Longest breach of max.compaction.lag.ms",
                gauges.max_compaction_delay_ms / 1000,
            ),
            ("cleaner_alive_threads", "Cleaner threads running", cleaner.alive_threads),
        ):
            gauge = GaugeMetricFamily(f"{PREFIX}_{name}", help_text)
            gauge.add_metric([], value)
            yield gauge
        unclean_parts = GaugeMetricFamily(
            f"{PREFIX}_cleaner_uncleanable_partitions",
            "Partitions marked uncleanable",
            labels=["dir"],
        )
        unclean_bytes = GaugeMetricFamily(
            f"{PREFIX}_cleaner_uncleanable_bytes",
            "Cleanable bytes of uncleanable partitions",
            labels=["dir"],
        )
        for directory, count in gauges.uncleanable_partitions.items():
            unclean_parts.add_metric([directory], count)
            unclean_bytes.add_metric([directory], gauges.uncleanable_bytes.get(directory, 0))
        yield unclean_parts
        yield unclean_bytes

    def _open_files(self, worker: Worker) -> Iterator[Metric]:
        """The process's descriptors and the segment-file cache that bounds most of them
        (storagecore.file_cache)."""
        manager = worker.log_manager
        assert manager is not None
        stats = manager.file_cache.stats()
        process = status.process_open_files()
        if process is not None:
            fds = GaugeMetricFamily(
                f"{PREFIX}_open_files", "Descriptors the worker process holds (/proc/self/fd)"
            )
            fds.add_metric([], float(process))
            yield fds
        gauges = {
            "max_open_files": (stats.max_open_files, "The bound of the segment-file cache"),
            "open_files": (stats.open_files, "Segment files the cache holds open"),
            "pinned_files": (stats.pinned_files, "Open segment files in use right now"),
            "held_files": (
                stats.held_files,
                "Of the pinned files, the active segments' held for appends",
            ),
        }
        for name, (value, text) in gauges.items():
            gauge = GaugeMetricFamily(f"{PREFIX}_file_cache_{name}", text)
            gauge.add_metric([], float(value))
            yield gauge
        counters = {
            "hits": (stats.hits, "Uses of a segment file that found it open"),
            "misses": (stats.misses, "Uses of a segment file that opened it"),
            "evictions": (stats.evictions, "Idle segment files closed to make room"),
            "sheds": (stats.sheds, "EMFILE, ENFILE or ENOMEM made the cache close idle files"),
            "overflows": (stats.overflows, "Opens past the bound (every open file in use)"),
            "resource_errors": (
                stats.resource_errors,
                "Opens that failed with EMFILE, ENFILE or ENOMEM even after shedding",
            ),
        }
        for name, (value, text) in counters.items():
            counter = CounterMetricFamily(f"{PREFIX}_file_cache_{name}", text)
            counter.add_metric([], float(value))
            yield counter

    def _dirs(self, worker: Worker) -> Iterator[Metric]:
        """Per data directory: online, and the filesystem's capacity and free bytes (one statvfs
        each; an offline directory reports no disk figures)."""
        manager = worker.log_manager
        assert manager is not None
        labels = ["dir"]
        online = GaugeMetricFamily(
            f"{PREFIX}_dir_online", "1 while the data directory serves", labels=labels
        )
        capacity = GaugeMetricFamily(
            f"{PREFIX}_dir_capacity_bytes", "Size of the directory's filesystem", labels=labels
        )
        free = GaugeMetricFamily(
            f"{PREFIX}_dir_free_bytes",
            "Free bytes of the directory's filesystem (for unprivileged writers)",
            labels=labels,
        )
        pressure = GaugeMetricFamily(
            f"{PREFIX}_dir_disk_pressure",
            "1 while produce is refused: free space below the floor, or a write found none",
            labels=labels,
        )
        floor = GaugeMetricFamily(
            f"{PREFIX}_dir_min_free_bytes", "The directory's free-space floor", labels=labels
        )
        episodes = CounterMetricFamily(
            f"{PREFIX}_dir_disk_pressure_episodes",
            "Times the directory went under disk pressure",
            labels=labels,
        )
        for path in manager.log_dirs:
            is_online = path in manager.online_dirs
            online.add_metric([str(path)], 1.0 if is_online else 0.0)
            space = manager.disk_space[path]
            episodes.add_metric([str(path)], space.pressure_episodes)
            if not is_online:
                continue
            try:
                disk = shutil.disk_usage(path)
                reading = space.reading()
            except OSError:
                continue
            capacity.add_metric([str(path)], float(disk.total))
            free.add_metric([str(path)], float(disk.free))
            pressure.add_metric([str(path)], 1.0 if reading.under_floor else 0.0)
            floor.add_metric([str(path)], float(reading.floor_bytes))
        yield from (online, capacity, free, pressure, floor, episodes)

    def _logs(self, worker: Worker) -> Iterator[Metric]:
        manager, cleaner = worker.log_manager, worker.cleaner
        assert manager is not None and cleaner is not None
        labels = ["topic", "partition"]
        families = {
            "size": GaugeMetricFamily(
                f"{PREFIX}_log_size_bytes", "Bytes of the log", labels=labels
            ),
            "segments": GaugeMetricFamily(
                f"{PREFIX}_log_segments", "Segments of the log", labels=labels
            ),
            "start": GaugeMetricFamily(
                f"{PREFIX}_log_start_offset", "Log start offset", labels=labels
            ),
            "end": GaugeMetricFamily(f"{PREFIX}_log_end_offset", "Log end offset", labels=labels),
            "dirty": GaugeMetricFamily(
                f"{PREFIX}_log_dirty_ratio", "Dirty ratio of a compacted log", labels=labels
            ),
            "offline": GaugeMetricFamily(
                f"{PREFIX}_log_offline", "1 when the log's directory is offline", labels=labels
            ),
            "min_dirty": GaugeMetricFamily(
                f"{PREFIX}_log_min_cleanable_dirty_ratio",
                "The topic's min.cleanable.dirty.ratio (compacted logs)",
                labels=labels,
            ),
            "cleaning_paused": GaugeMetricFamily(
                f"{PREFIX}_log_cleaning_paused",
                "1 while cleaning of the log is paused (annotation, admin verb or deletion)",
                labels=labels,
            ),
            "retention_paused": GaugeMetricFamily(
                f"{PREFIX}_log_retention_paused",
                "1 while retention of the log is paused",
                labels=labels,
            ),
            "open_txns": GaugeMetricFamily(
                f"{PREFIX}_log_open_transactions",
                "Producers with a transaction open on the partition",
                labels=labels,
            ),
            "lso_lag": GaugeMetricFamily(
                f"{PREFIX}_log_last_stable_offset_lag",
                "High watermark minus last stable offset (held back by open transactions)",
                labels=labels,
            ),
            "retention_due": GaugeMetricFamily(
                f"{PREFIX}_log_retention_due_bytes",
                "Bytes of segments that retention would delete now",
                labels=labels,
            ),
        }
        now = worker.clock.milliseconds()
        # One read of the cleaner's states, of each topic's controls and of the dirty ratios
        # its last selection planned: a scrape of thousands of partitions plans no log (a
        # compacted log the cleaner has not planned yet, such as a paused one, is planned here).
        states = cleaner.manager.states()
        ratios = cleaner.manager.dirty_ratios
        checkpoints: dict[TopicPartition, int] | None = None
        controls_of: dict[str, TopicControls] = {}
        for tp, log in sorted(manager.logs.items()):
            values = [tp.topic, str(tp.partition)]
            families["offline"].add_metric(values, 1.0 if log.offline else 0.0)
            if log.offline:
                continue
            families["size"].add_metric(values, log.size_bytes)
            families["segments"].add_metric(values, len(log.segments))
            families["start"].add_metric(values, log.log_start_offset)
            families["end"].add_metric(values, log.log_end_offset)
            families["open_txns"].add_metric(values, log.open_transactions())
            families["lso_lag"].add_metric(values, log.high_watermark - log.last_stable_offset)
            controls = controls_of.get(tp.topic)
            if controls is None:
                controls = controls_of[tp.topic] = worker.controls_for(tp.topic)
            _, paused = states.get(tp, (None, 0))
            families["cleaning_paused"].add_metric(
                values, 1.0 if controls.pause_cleaning or paused else 0.0
            )
            families["retention_paused"].add_metric(
                values, 1.0 if controls.pause_retention else 0.0
            )
            families["retention_due"].add_metric(values, log.plan_retention(now).deleted_bytes)
            if log.config.compact:
                ratio = ratios.get(tp)
                if ratio is None:
                    if checkpoints is None:
                        checkpoints = cleaner.manager.all_checkpoints()
                    offsets = cleanable_offsets(log, checkpoints.get(tp), now)
                    ratio = log_to_clean(log, offsets, now).cleanable_ratio
                families["dirty"].add_metric(values, ratio)
                families["min_dirty"].add_metric(values, log.config.min_cleanable_dirty_ratio)
        yield from families.values()


def registry_for(worker: Worker) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerCollector(worker))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
