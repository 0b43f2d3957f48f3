"""The worker's status document (``GET /v1/status``), built from in-memory state only.

Per partition: offsets, size, segments, dirty ratio and first dirty offset (compacted logs),
cleaner state, last clean time and stats, uncleanable flag and reason, what retention would
delete now, pause flags and why. Per volume: data directories (online, disk usage), cleaner
threads, settings, the state of the topic and settings files (errors kept until a good file
replaces them), orphaned logs, compaction windows. JSON-ready: only dicts, lists, strings,
numbers, booleans and None. No file is read here (disk usage is one statvfs per directory).
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import shutil
import urllib.parse
from typing import Any

from storagecore import files
from storagecore.cleaner.log_cleaner import LogCleaner
from storagecore.cleaner.log_to_clean import cleanable_offsets, log_to_clean
from storagecore.cleaner.offset_map import ENTRY_BYTES
from storagecore.config import TopicPartition
from storagecore.errors import ConfigError
from storagecore.log import Log
from storageworker.controls import TopicControls
from storageworker.worker import ConfigStatus, Worker


def _config_status(status: ConfigStatus) -> dict[str, Any]:
    return {
        "source": status.source,
        "ok": status.error is None,
        "error": status.error,
        "errorSinceMs": status.error_since_ms,
        "loadedMs": status.loaded_ms,
    }


def partition_status(
    worker: Worker,
    log: Log,
    cleaner: LogCleaner,
    now_ms: int,
    checkpoints: dict[TopicPartition, int],
) -> dict[str, Any]:
    """One partition's entry; ``checkpoints`` is the cleaner's (read once per document)."""
    tp = log.tp
    state, paused = cleaner.manager.reported_state(tp)
    controls = worker.controls_for(tp.topic)
    request = cleaner.manager.compaction_outcomes.get(tp)
    mark = cleaner.manager.uncleanable_marks.get(tp)
    entry: dict[str, Any] = {
        "topic": tp.topic,
        "partition": tp.partition,
        "internal": tp.topic in worker.internal_topics,
        "clientTopic": tp.topic in worker.topics and tp.topic not in worker.declared,
        "dir": str(log.parent_dir),
        "offline": log.offline,
        "logStartOffset": log.log_start_offset,
        "logEndOffset": log.log_end_offset,
        "sizeBytes": log.size_bytes,
        "segments": len(log.segments),
        "cleanupPolicy": ",".join(log.config.cleanup_policy),
        "cleanerState": state.value if state is not None else "idle",
        "cleaningPauseCount": paused,
        "pausedCleaning": controls.pause_cleaning,
        "pausedRetention": controls.pause_retention,
        "pauseReasons": list(controls.reasons),
        "compactNowPending": tp in cleaner.manager.compaction_requests,
        "compactNow": request.as_dict() if request is not None else None,
        "uncleanable": mark is not None,
        "uncleanableReason": mark.reason if mark is not None else None,
        "uncleanableMark": mark.as_dict() if mark is not None else None,
        "cleaningDeferred": cleaner.deferred.get(tp),
        "lastCleanMs": cleaner.last_clean_ms.get(tp),
        "lastClean": None,
        "dirtyRatio": None,
        "firstDirtyOffset": None,
        "retention": None,
    }
    stats = cleaner.last_stats.get(tp)
    if stats is not None:
        entry["lastClean"] = stats.as_dict()
    if log.offline:
        return entry
    # Transactions: producers with one open here, and how far the last stable offset (what
    # read_committed consumers see, and the cleaner's bound) lags the high watermark.
    stable = log.last_stable_offset
    entry["openTransactions"] = log.open_transactions()
    entry["lastStableOffset"] = stable
    entry["lastStableOffsetLag"] = log.high_watermark - stable
    if log.config.compact:
        offsets = cleanable_offsets(log, checkpoints.get(tp), now_ms)
        to_clean = log_to_clean(log, offsets, now_ms)
        entry["dirtyRatio"] = round(to_clean.cleanable_ratio, 6)
        entry["firstDirtyOffset"] = offsets.first_dirty_offset
        entry["maxCompactionDelayMs"] = to_clean.max_compaction_delay_ms
    plan = log.plan_retention(now_ms)
    entry["retention"] = {
        "segmentsDue": len(plan.deletions),
        "bytesDue": plan.deleted_bytes,
        "rules": sorted({d.rule.value for d in plan.deletions}),
        "logStartOffsetAfter": plan.log_start_offset_after,
    }
    return entry


def dedupe_buffer_status(requested_bytes: int, cleaner: LogCleaner) -> dict[str, Any]:
    """The dedupe buffer as requested (``cleaner.dedupeBufferBytes`` of the settings in force)
    and as applied: the cleaner's own config, and per thread the offset map it builds from it
    (``map_memory_per_thread`` rounded down to whole slots, as ``SkimpyOffsetMap`` allocates;
    a test checks the figures against the live maps)."""
    applied = cleaner.config
    slots = applied.map_memory_per_thread // ENTRY_BYTES
    return {
        "requestedBytes": requested_bytes,
        "appliedBytes": applied.dedupe_buffer_size,
        "threads": applied.threads,
        "mapBytesPerThread": slots * ENTRY_BYTES,
        "mapSlotsPerThread": slots,
        "mapKeysPerRoundPerThread": int(slots * applied.io_buffer_load_factor),
    }


def volume_status(worker: Worker, query: StatusQuery | None = None) -> dict[str, Any]:
    """The document; ``query`` (default: everything) asks for a summary or a page."""
    query = StatusQuery() if query is None else query
    now = worker.clock.milliseconds()
    settings = worker.settings
    document: dict[str, Any] = {
        "state": worker.state,
        "nowMs": now,
        "config": {
            "topics": _config_status(worker.topics_status),
            "settings": _config_status(worker.settings_status),
            "reloads": worker.counters.reloads,
            "errors": worker.counters.errors,
        },
        "settings": {
            "cleanerThreads": settings.cleaner_threads,
            "dedupeBufferBytes": settings.dedupe_buffer_bytes,
            "ioMaxBytesPerSecond": (
                None
                if settings.io_max_bytes_per_second == float("inf")
                else settings.io_max_bytes_per_second
            ),
            "retentionCheckIntervalMs": settings.retention_check_interval_ms,
            "compactionWindows": settings.compaction_windows.describe(),
            "minFreeBytes": settings.min_free_bytes,
            "maxOpenFiles": settings.max_open_files,
        },
        "compactionWindowOpen": settings.compaction_windows.is_open(now),
        "topics": sorted(worker.topics),
        "internalTopics": sorted(worker.internal_topics),
        "clientTopics": {
            "prefixes": list(settings.client_topic_prefixes),
            "store": str(worker.client_topics.path),
            "error": worker.client_topics.error,
            "topics": [
                topic.as_json()
                for name, topic in sorted(worker.client_topics.topics().items())
                if name not in worker.declared
            ],
        },
        "orphanedLogs": list(worker.orphans),
        "undeclaredPartitions": list(worker.extra_partitions),
        "dirs": [],
        "cleaner": None,
        "partitions": [],
    }
    manager, cleaner = worker.log_manager, worker.cleaner
    if manager is None or cleaner is None:
        return document
    for path in manager.log_dirs:
        online = path in manager.online_dirs
        usage = None
        if online:
            try:
                disk = shutil.disk_usage(path)
                usage = {"totalBytes": disk.total, "usedBytes": disk.used, "freeBytes": disk.free}
            except OSError:
                usage = None
        space = manager.disk_space[path].reading() if online else None
        document["dirs"].append(
            {
                "path": str(path),
                "online": online,
                "diskPressure": None
                if space is None
                else {
                    "underFloor": space.under_floor,
                    "floorBytes": space.floor_bytes,
                    "freeBytes": space.free_bytes,
                    "reason": space.reason,
                },
                "hadCleanShutdown": manager.had_clean_shutdown(path),
                "error": manager.dir_error(path),
                "disk": usage,
                "logBytes": sum(
                    log.size_bytes for log in manager.logs.values() if log.parent_dir == path
                ),
            }
        )
    gauges = cleaner.gauges()
    document["cleaner"] = {
        "dedupeBuffer": dedupe_buffer_status(settings.dedupe_buffer_bytes, cleaner),
        "threads": cleaner.thread_states(),
        "aliveThreads": cleaner.alive_threads,
        "roundsTotal": cleaner.rounds_total,
        "threadErrors": cleaner.thread_errors,
        "lastError": cleaner.last_error,
        "maxDirtyPercent": gauges.max_dirty_percent,
        "timeSinceLastRunMs": gauges.time_since_last_run_ms,
        "maxCompactionDelayMs": gauges.max_compaction_delay_ms,
        "uncleanablePartitions": gauges.uncleanable_partitions,
        "uncleanableBytes": gauges.uncleanable_bytes,
        "throttleWaitSeconds": cleaner.throttler.total_wait_s,
    }
    rounds = worker.external_rounds
    # Partition → the Spark compact job that holds it (storageworker.external_rounds).
    document["compactJobs"] = rounds.busy() if rounds is not None else {}
    cache = manager.file_cache.stats()
    document["openFiles"] = {
        "maxOpenFiles": cache.max_open_files,
        "opensAtLoad": manager.file_opens_at_load,
        "cached": cache.open_files,
        "heldForAppends": cache.held_files,
        "process": process_open_files(),
        "hits": cache.hits,
        "misses": cache.misses,
        "evictions": cache.evictions,
        "sheds": cache.sheds,
        "overflows": cache.overflows,
        "resourceErrors": cache.resource_errors,
    }
    logs = sorted(manager.logs.items())
    if query.topics:
        wanted = set(query.topics)
        logs = [(tp, log) for tp, log in logs if tp.topic in wanted]
    document["retention"] = {
        "deletedSegments": manager.retention_totals.segments_deleted,
        "deletedBytes": manager.retention_totals.bytes_deleted,
    }
    if query.summary:
        del document["partitions"]
        document["partitionSummary"] = partition_summary(worker, [log for _, log in logs], now)
        return document
    checkpoints = cleaner.manager.all_checkpoints()
    page = logs
    if query.limit is not None:
        start = 0
        if query.after is not None:
            start = bisect.bisect_right([tp for tp, _ in logs], query.after)
        page = logs[start : start + query.limit]
        more = start + query.limit < len(logs)
        document["page"] = {
            "limit": query.limit,
            "after": None if query.after is None else files.partition_dir_name(query.after),
            "total": len(logs),
            "nextAfter": files.partition_dir_name(page[-1][0]) if more and page else None,
        }
    document["partitions"] = [
        partition_status(worker, log, cleaner, now, checkpoints) for _, log in page
    ]
    # The Kafka port's transaction coordinator, when the worker serves one.
    report = worker.transactions_status
    document["transactions"] = report() if report is not None else None
    return document


@dataclasses.dataclass(frozen=True, slots=True)
class StatusQuery:
    """What ``GET /v1/status`` was asked for (the query parameters; README, HTTP table)."""

    summary: bool = False
    """``view=summary``: counts and sums instead of the per-partition list."""
    limit: int | None = None
    """``limit=N``: at most N partitions (1..PAGE_LIMIT_MAX), in (topic, partition) order."""
    after: TopicPartition | None = None
    """``after=T-P``: the page starts after this partition (exclusive)."""
    topics: tuple[str, ...] = ()
    """``topic=NAME`` (repeatable): only these topics' partitions."""


PAGE_LIMIT_MAX = 10_000


def parse_query(query: str) -> StatusQuery:
    """The query string of ``/v1/status``; ValueError names the bad parameter."""
    params = urllib.parse.parse_qs(query, keep_blank_values=True, strict_parsing=False)
    unknown = set(params) - {"view", "limit", "after", "topic"}
    if unknown:
        raise ValueError(
            f"unknown query parameter {sorted(unknown)[0]!r} (view, limit, after, topic)"
        )
    view = params.get("view", ["full"])[-1]
    if view not in ("full", "summary"):
        raise ValueError(f"view must be full or summary, got {view!r}")
    limit: int | None = None
    if "limit" in params:
        raw = params["limit"][-1]
        if not raw.isdigit() or not 1 <= int(raw) <= PAGE_LIMIT_MAX:
            raise ValueError(f"limit must be an integer from 1 to {PAGE_LIMIT_MAX}, got {raw!r}")
        limit = int(raw)
    after: TopicPartition | None = None
    if "after" in params:
        raw = params["after"][-1]
        if limit is None:
            raise ValueError("after needs limit")
        try:
            after = files.parse_partition_dir_name(raw)
        except ConfigError as exc:
            raise ValueError(f"after: {exc}") from None
    return StatusQuery(view == "summary", limit, after, tuple(params.get("topic", ())))


def partition_summary(worker: Worker, logs: list[Log], now_ms: int) -> dict[str, Any]:
    """Counts and sums over ``logs`` from memory only (no file read, no retention plan):
    what a volume of thousands of partitions can answer at once."""
    cleaner = worker.cleaner
    assert cleaner is not None
    by_state: dict[str, int] = {}
    offline = uncleanable = paused_cleaning = paused_retention = 0
    size_bytes = segments = 0
    # One read of the cleaner's states (not a lock acquisition per log: a selection of the
    # cleaner holds that lock meanwhile), of the uncleanable marks and of each topic's controls.
    states = cleaner.manager.states()
    marks = cleaner.manager.uncleanable_marks
    controls_of: dict[str, TopicControls] = {}
    for log in logs:
        tp = log.tp
        state = states.get(tp, (None, 0))[0]
        name = state.value if state is not None else "idle"
        by_state[name] = by_state.get(name, 0) + 1
        controls = controls_of.get(tp.topic)
        if controls is None:
            controls = controls_of[tp.topic] = worker.controls_for(tp.topic)
        paused_cleaning += controls.pause_cleaning
        paused_retention += controls.pause_retention
        uncleanable += tp in marks
        if log.offline:
            offline += 1
            continue
        size_bytes += log.size_bytes
        segments += len(log.segments)
    return {
        "count": len(logs),
        "topics": len({log.tp.topic for log in logs}),
        "offline": offline,
        "uncleanable": uncleanable,
        "pausedCleaning": paused_cleaning,
        "pausedRetention": paused_retention,
        "byCleanerState": dict(sorted(by_state.items())),
        "sizeBytes": size_bytes,
        "segments": segments,
        "nowMs": now_ms,
    }


def process_open_files() -> int | None:
    """Descriptors this process holds (``/proc/self/fd``; None where there is no /proc)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None
