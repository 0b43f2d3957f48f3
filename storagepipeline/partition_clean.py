"""One partition cleaned whole on one executor by the storage core's cleaner (``compact``'s
first path): no shuffle, no Python per record.

The driver plans the round exactly as the worker's cleaner would (first dirty offset, first
uncleanable offset, the cleaner's size-bounded groups, aborted transactions, active producers)
and ships one :class:`PartitionCleanTask` per partition. On the executor,
:func:`clean_partition` builds the offset map over the dirty range with
:meth:`storagecore.cleaner.Cleaner.build_offset_map` (the native region engine, keyed SipHash
under the job's secret) and, when every dirty key fitted the executor's map, rewrites each group
with :meth:`storagecore.cleaner.Cleaner.write_cleaned_segment` into ``<base>.log.cleaned`` files
beside the segments. The driver (or, online, the worker) swaps them in.

A partition whose dirty keys do not fit the map writes nothing and reports ``fits=False``: the
driver sends it down the aggregated offset-map path (:mod:`storagepipeline.aggregated_map`).

Reads only the planned bytes of each segment file (``size_bytes``: appends after planning are
not seen) through read-only descriptors; writes only ``.cleaned`` files, and removes every one
it wrote when it fails. Must not swap, delete or rename anything: that is the swap protocol's.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from storagecore import LogConfig, TopicPartition
from storagecore import files as core_files
from storagecore.cleaner import CleanedTransactionMetadata, Cleaner, CleanerStats
from storagecore.cleaner.legacy import legacy_delete_horizon_ms
from storagecore.cleaner.map_source import FileMapSource
from storagecore.cleaner.offset_map import ENTRY_BYTES, SkimpyOffsetMap
from storagecore.cleaner.round_plan import RoundPlan
from storagecore.config import CleanerConfig
from storagecore.transactions import AbortedTxn, ProducerLastBatch


@dataclasses.dataclass(frozen=True, slots=True)
class SegmentFile:
    """One segment as planned: the file to read, its base offset, the bytes that belong."""

    path: str
    base_offset: int
    size_bytes: int


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionCleanTask:
    """One partition's cleaning round, planned on the driver."""

    index: int
    topic: str
    partition: int
    #: The partition's directory: where the ``.cleaned`` files are written.
    directory: str
    config: LogConfig
    #: The log's segments in offset order (the active one included: the map pass reads what
    #: the cleaner's ``dirty_segments`` selects among them).
    segments: tuple[SegmentFile, ...]
    #: The cleaner's groups, as indexes into ``segments``.
    groups: tuple[tuple[int, ...], ...]
    first_dirty_offset: int
    upper_bound: int
    #: The round's end offset as the driver computed it (the map must reach it).
    end_offset: int
    now_ms: int
    #: The job's offset-map digest secret.
    secret: bytes
    #: The executor's map: at most this many bytes (sized down to the dirty offsets' span).
    map_bytes: int
    load_factor: float
    aborted: tuple[AbortedTxn, ...]
    producers: tuple[tuple[int, ProducerLastBatch], ...]

    @classmethod
    def from_plan(
        cls,
        index: int,
        plan: RoundPlan,
        *,
        secret: bytes,
        map_bytes_max: int,
        read_paths: Sequence[str] | None = None,
    ) -> PartitionCleanTask:
        """The task of ``plan``; its map sized by :func:`map_bytes_for`. ``read_paths`` (one
        per planned segment) are read instead of the live names: a worker's pins."""
        paths = [s.path for s in plan.segments] if read_paths is None else list(read_paths)
        assert len(paths) == len(plan.segments), (plan.tp, len(paths), len(plan.segments))
        load_factor = CleanerConfig().io_buffer_load_factor
        return cls(
            index=index,
            topic=plan.topic,
            partition=plan.partition,
            directory=plan.directory,
            config=plan.config,
            segments=tuple(
                SegmentFile(path, s.base_offset, s.size_bytes)
                for path, s in zip(paths, plan.segments, strict=True)
            ),
            groups=plan.groups,
            first_dirty_offset=plan.first_dirty_offset,
            upper_bound=plan.first_uncleanable_offset,
            end_offset=plan.end_offset,
            now_ms=plan.now_ms,
            secret=secret,
            map_bytes=map_bytes_for(plan.dirty_span_offsets, map_bytes_max, load_factor),
            load_factor=load_factor,
            aborted=plan.aborted,
            producers=plan.producers,
        )


def map_bytes_for(span_offsets: int, map_bytes_max: int, load_factor: float) -> int:
    """Bytes of a map that holds ``span_offsets`` keys (at most ``map_bytes_max``): a partition
    with few dirty offsets does not reserve the whole budget."""
    needed_slots = int(span_offsets / load_factor) + 2
    return max(min(map_bytes_max, needed_slots * ENTRY_BYTES), 2 * ENTRY_BYTES)


def clean_partition(task: PartitionCleanTask) -> dict[str, Any]:
    """Map the dirty range and, when it fits, write every group's ``.cleaned`` segment.

    Returns ``index``, ``fits`` (False: nothing written, the map filled first), ``keys``,
    ``partition_seconds``, ``started_at`` and ``finished_at`` (epoch seconds) and,
    when it fits, ``cleaned_sizes`` (bytes per group) and the cleaner's figures summed over
    the groups."""
    # The wall clock too (epoch seconds): the benchmark's phases tell the executors' busy span
    # from the job's overhead with them (same host in local mode; a cluster's clocks may differ).
    started, started_at = time.perf_counter(), time.time()
    tp = TopicPartition(task.topic, task.partition)
    source = FileMapSource.open(
        tp,
        [(Path(s.path), s.base_offset, s.size_bytes) for s in task.segments],
        # Bounds the keys a round may put (the cleaner sizes its map's probed prefix by it):
        # the planned first uncleanable offset, where the map pass stops (a segment base).
        task.upper_bound,
    )
    sources = source.segments
    written: list[int] = []
    sizes: list[int] = []
    try:
        offset_map = SkimpyOffsetMap(task.map_bytes, task.load_factor, secret=task.secret)
        cleaner = Cleaner(offset_map=offset_map, config=CleanerConfig())
        stats = CleanerStats(topic_partition=str(tp), first_dirty_offset=task.first_dirty_offset)
        full = cleaner.build_offset_map(
            source, task.first_dirty_offset, task.upper_bound, task.aborted, stats
        )
        if full:
            return {
                "index": task.index,
                "fits": False,
                "keys": offset_map.size,
                "partition_seconds": time.perf_counter() - started,
                "started_at": started_at,
                "finished_at": time.time(),
            }
        end_offset = max(offset_map.latest_offset + 1, task.first_dirty_offset)
        assert end_offset == task.end_offset, (tp, end_offset, task.end_offset)
        txns = CleanedTransactionMetadata(list(task.aborted))
        producers = dict(task.producers)
        # The sources cover the log from its start: its clean part gives v0/v1 tombstones'
        # horizon as the worker's cleaner computes it.
        legacy_horizon_ms = legacy_delete_horizon_ms(
            sources, task.first_dirty_offset, task.config.delete_retention_ms
        )
        for group in task.groups:
            cleaned = cleaner.write_cleaned_segment(
                Path(task.directory),
                tp,
                task.config,
                [sources[i] for i in group],
                now_ms=task.now_ms,
                stats=stats,
                txns=txns,
                producers=producers,
                upper_bound=task.upper_bound,
                legacy_delete_horizon_ms=legacy_horizon_ms,
            )
            written.append(cleaned.base_offset)
            sizes.append(cleaned.size_bytes)
            cleaned.close()
            stats.segments_replaced += len(group)
        stats.groups = len(task.groups)
        return {
            "index": task.index,
            "fits": True,
            "keys": offset_map.size,
            "cleaned_sizes": sizes,
            "partition_seconds": time.perf_counter() - started,
            "started_at": started_at,
            "finished_at": time.time(),
            **stats.as_dict(),
        }
    except BaseException:
        for base in written:
            delete_cleaned(Path(task.directory), base)
        raise
    finally:
        source.close()


def delete_cleaned(directory: Path, base_offset: int) -> None:
    """The ``.cleaned`` files of the group at ``base_offset`` (gone already is fine)."""
    suffix = core_files.CLEANED_SUFFIX
    for path in (
        core_files.log_file(directory, base_offset, suffix),
        core_files.index_file(directory, base_offset, suffix),
        core_files.time_index_file(directory, base_offset, suffix),
        core_files.txn_index_file(directory, base_offset, suffix),
    ):
        path.unlink(missing_ok=True)
