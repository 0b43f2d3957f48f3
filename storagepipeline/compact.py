"""The ``compact`` job: Kafka's log cleaning of whole partitions, spread over Spark.

1. (driver) take the data dir's lock through a :class:`storagecore.LogManager` (recovering the
   logs as a worker would), and plan each partition's round exactly as the worker's cleaner
   does (:func:`storagecore.cleaner.round_plan.plan_round`: the range ``[first dirty, first
   uncleanable)`` from the cleaner checkpoint, the size-bounded groups, the transactions);
2. (Spark, one task per partition, no shuffle) clean each partition on one executor with the
   storage core's cleaner (:mod:`storagepipeline.partition_clean`): its offset map over the
   dirty range, then each group written as ``<base>.log.cleaned``; a partition whose dirty keys
   do not fit the executor's map (``map_bytes``) writes nothing and goes to
3. (Spark, only for those) the aggregated offset map (:mod:`storagepipeline.aggregated_map`):
   ``(partition, digest(key)) → max offset`` as a Spark aggregation, joined back to each group;
4. (driver) swap each partition's cleaned groups in with :meth:`storagecore.Log.replace_segments`
   (one run of the crash-safe protocol per partition, the partitions in parallel threads:
   the swaps wait on directory fsyncs), write every round's end into the cleaner checkpoint
   at once, shut the log manager down cleanly.

Every digest is the offset map's keyed SipHash under one secret drawn for the job. Because the
filter, the groups, the horizon and the offset range are the cleaner's, the result is the records
(and the bytes) the storage core cleaner writes, when it can do the job in one round. A failure
before step 4 leaves only ``.cleaned`` files, which the loader deletes.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from storagecore import LogConfig, LogManager, TopicPartition
from storagecore.cleaner.manager import LogCleanerManager
from storagecore.cleaner.offset_map import new_secret
from storagecore.cleaner.round_plan import RoundPlan, plan_round, swap_planned
from storagecore.config import CleanerConfig
from storagecore.errors import LogDirLockedError
from storagepipeline import aggregated_map
from storagepipeline.aggregated_map import SUMMED
from storagepipeline.logdirs import PipelineError
from storagepipeline.partition_clean import (
    PartitionCleanTask,
    clean_partition,
    delete_cleaned,
)
from storagepipeline.worker_gc import freeze_long_lived

logger = logging.getLogger(__name__)

#: Partitions swapped at a time at most (the swaps wait on fsync, not on a core: fsyncs in
#: flight together share the file system's journal commits).
_SWAP_THREADS = 16

#: The phases of :func:`compact` that ``phases`` reports, in order (seconds each).
PHASES = ("load", "plan", "clean", "swap", "checkpoint", "shutdown")

#: An executor's offset map for one partition: at most the worker cleaner's default dedupe
#: buffer (the pages are touched only as keys land, so a small partition costs little).
MAP_BYTES_DEFAULT = CleanerConfig().dedupe_buffer_size


@dataclasses.dataclass(frozen=True, slots=True)
class CompactResult:
    """One partition's outcome (``stats`` has the cleaner's fields, summed over groups)."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int
    groups: int
    stats: dict[str, Any]


def compact(
    spark: SparkSession,
    data_dir: str,
    *,
    topics: Sequence[str] = (),
    partitions: Sequence[TopicPartition] = (),
    configs: Mapping[str, LogConfig] | None = None,
    now_ms: int | None = None,
    map_bytes: int = MAP_BYTES_DEFAULT,
    phases: dict[str, float] | None = None,
) -> list[CompactResult]:
    """Compact the named topics (or partitions) of ``data_dir``; see the module docstring.
    ``map_bytes`` bounds one executor's offset map: a partition with more dirty keys than it
    holds is cleaned through the aggregated map. ``phases``, when given, receives the seconds
    of each of :data:`PHASES` (the driver's clock; ``clean`` is the Spark work) and
    ``partition_seconds``, the executors' time in :func:`clean_partition`, summed, and
    ``executor_span``, from the first partition's start to the last one's end (epoch clocks of
    the executors): what the benchmark prints to tell the driver's serial work, Spark's per-job
    cost (``clean`` less the span) and the parallel part apart."""
    configs = dict(configs or {})
    now = int(time.time() * 1000) if now_ms is None else now_ms
    root = Path(data_dir)
    clock = _PhaseClock(phases)
    try:
        manager = LogManager([root], config_for=lambda t: configs.get(t, _default_config()))
    except LogDirLockedError as exc:
        raise PipelineError(
            f"{exc}; compact runs only where no worker holds the dir (or give the worker's "
            "admin URL: compact then runs online, through it)"
        ) from exc
    clock.lap("load")
    try:
        selected = _selected(manager, topics, partitions, configs)
        checkpoints = LogCleanerManager([root])
        saved = checkpoints.all_checkpoints()
        plans = [plan_round(manager.get_log(tp), saved.get(tp), now) for tp in selected]
        clock.lap("plan")
        try:
            stats = clean_planned(spark, plans, secret=new_secret(), map_bytes=map_bytes)
        except BaseException:
            # Other partitions' tasks may have finished: nothing of the job stays behind.
            discard_cleaned(plans)
            raise
        clock.lap("clean")
        clock.add("partition_seconds", sum(s.get("partition_seconds", 0.0) for s in stats))
        ran = [s for s in stats if "started_at" in s]
        if ran:
            span = max(s["finished_at"] for s in ran) - min(s["started_at"] for s in ran)
            clock.add("executor_span", span)
        # The swaps are fsync-bound and each holds only its own log's lock: one thread per
        # partition (the checkpoint update is serialized by the manager).
        with ThreadPoolExecutor(max_workers=max(min(len(plans), _SWAP_THREADS), 1)) as pool:
            swaps = [pool.submit(_swap, manager, plan, stats[i]) for i, plan in enumerate(plans)]
            results = [swap.result() for swap in swaps]
        clock.lap("swap")
        # Then every round's end in the cleaner checkpoint, in one atomic write (a crash
        # before it leaves the rounds to do again, which finds them clean).
        live = [lg.tp for lg in manager.logs.values()]
        checkpoints.update_checkpoint(
            root, live, updates={plan.tp: plan.end_offset for plan in plans}
        )
        clock.lap("checkpoint")
        return results
    finally:
        for log in manager.logs.values():
            log.delete_expired_files(force=True)  # the replaced segments: no reader holds them
        manager.shutdown()
        clock.lap("shutdown")


class _PhaseClock:
    """Seconds since the last lap, into ``phases`` (nothing when it is None)."""

    def __init__(self, phases: dict[str, float] | None) -> None:
        self.phases = phases
        self.last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.add(name, now - self.last)
        self.last = now

    def add(self, name: str, seconds: float) -> None:
        if self.phases is not None:
            self.phases[name] = self.phases.get(name, 0.0) + seconds


def _default_config() -> LogConfig:
    return LogConfig.from_topic_config({"cleanup.policy": "compact"})


def _selected(
    manager: LogManager,
    topics: Sequence[str],
    partitions: Sequence[TopicPartition],
    declared: Iterable[str],
) -> list[TopicPartition]:
    """The named partitions (each must exist and be compacted); without names, every
    partition of a ``declared`` topic (one given a config) whose policy includes compact."""
    declared = {t for t in declared if manager.config_for(t).compact}
    present = sorted(manager.logs)
    wanted = set(partitions)
    for topic in topics:
        matching = [tp for tp in present if tp.topic == topic]
        if not matching:
            raise PipelineError(f"unknown topic {topic!r} in {manager.log_dirs[0]}")
        wanted.update(matching)
    missing = sorted(str(tp) for tp in wanted if tp not in manager.logs)
    if missing:
        raise PipelineError(f"unknown partition(s) {', '.join(missing)}")
    if not topics and not partitions:
        wanted = {tp for tp in present if tp.topic in declared}
        if not wanted:
            raise PipelineError(
                "no topic given and no partition of a declared compacted topic in "
                f"{manager.log_dirs[0]}"
            )
    for tp in wanted:
        if not manager.get_log(tp).config.compact:
            raise PipelineError(
                f"{tp}: cleanup.policy is {','.join(manager.get_log(tp).config.cleanup_policy)}, "
                f"not compact (give the topic's config with cleanup.policy=compact)"
            )
    return sorted(wanted)


def _swap(manager: LogManager, plan: RoundPlan, stats: dict[str, Any]) -> CompactResult:
    """Swap each cleaned group of ``plan`` in (the log's crash-safe protocol), in offset
    order."""
    log = manager.get_log(plan.tp)
    # Invariant: a group is swapped only after a task wrote it (an empty .cleaned would
    # otherwise replace it).
    assert not plan.groups or stats.get("path") in ("partition", "aggregated"), (plan.tp, stats)
    # The dir's lock kept every other writer away: the segments are the planned ones.
    swapped = swap_planned(log, plan, stats.get("cleaned_sizes", []))
    assert swapped, f"{plan.tp}: segments changed under the dir's lock"
    log.delete_expired_files(force=True)  # the replaced segments: no reader holds them
    return result_of(plan, stats)


def result_of(plan: RoundPlan, stats: dict[str, Any]) -> CompactResult:
    """The partition's outcome (logged)."""
    result = CompactResult(
        plan.topic,
        plan.partition,
        plan.first_dirty_offset,
        plan.end_offset,
        len(plan.groups),
        {name: stats.get(name, 0) for name in (*SUMMED, "path", "keys")},
    )
    logger.info(
        "compacted %s: [%d, %d) in %d group(s): %s",
        plan.tp,
        plan.first_dirty_offset,
        plan.end_offset,
        len(plan.groups),
        result.stats,
    )
    return result


def _bins(tasks: Sequence[PartitionCleanTask], slots: int) -> list[list[PartitionCleanTask]]:
    """The tasks in at most ``slots`` bins of about equal bytes (largest first, each to the
    lightest bin): one Spark task per bin, because a Spark task costs tens of milliseconds of
    scheduling and Python-worker round trips, about what the native cleaner takes for a
    100k-record partition."""
    count = max(min(slots, len(tasks)), 1)
    bins: list[list[PartitionCleanTask]] = [[] for _ in range(count)]
    loads = [0] * count
    for task in sorted(tasks, key=lambda t: -sum(s.size_bytes for s in t.segments)):
        lightest = loads.index(min(loads))
        bins[lightest].append(task)
        loads[lightest] += sum(s.size_bytes for s in task.segments)
    return bins


def _clean_bin(tasks: Sequence[PartitionCleanTask]) -> list[dict[str, Any]]:
    """One Spark task (on an executor): its partitions cleaned one after the other."""
    freeze_long_lived()
    return [clean_partition(task) for task in tasks]


def discard_cleaned(plans: Sequence[RoundPlan]) -> None:
    """Remove the ``.cleaned`` files the plans' groups may have left (a failed job)."""
    for plan in plans:
        for group in plan.groups:
            delete_cleaned(Path(plan.directory), plan.segments[group[0]].base_offset)


def clean_planned(
    spark: SparkSession,
    plans: Sequence[RoundPlan],
    *,
    secret: bytes,
    map_bytes: int,
    read_paths: Sequence[Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """Write the ``.cleaned`` segments of every plan's groups (steps 2 and 3); per plan, the
    cleaner's figures summed over its groups, ``cleaned_sizes`` (bytes per group) and
    ``path``: ``partition`` or ``aggregated``. ``read_paths`` (per plan, per segment) are
    where to read the segments instead of their live names (a worker's pins)."""
    tasks = [
        PartitionCleanTask.from_plan(
            i,
            plan,
            secret=secret,
            map_bytes_max=map_bytes,
            read_paths=None if read_paths is None else read_paths[i],
        )
        for i, plan in enumerate(plans)
        if plan.groups
    ]
    results: list[dict[str, Any]] = [{"path": "none"} for _ in plans]
    if tasks:
        sc = spark.sparkContext
        bins = _bins(tasks, sc.defaultParallelism)
        cleaned = sc.parallelize(bins, len(bins)).flatMap(_clean_bin).collect()
        for done in cleaned:
            results[done["index"]] = {**done, "path": "partition"}
    spilled = [i for i, result in enumerate(results) if result.get("fits") is False]
    if spilled:
        aggregated = aggregated_map.clean_plans(
            spark,
            [plans[i] for i in spilled],
            secret,
            None if read_paths is None else [read_paths[i] for i in spilled],
        )
        for i, done in aggregated.items():
            results[spilled[i]] = {**done, "path": "aggregated"}
    return results
