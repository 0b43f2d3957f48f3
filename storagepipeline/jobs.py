"""The ``snapshot`` and ``stats`` jobs (``compact`` is :mod:`storagepipeline.compact`).

``snapshot`` writes the compacted state of topics as a Parquet table plus a manifest of the log
offsets it covers; the next run reads only the offsets after them and writes the changes (upserts
and deletes). Each run's table is written to a temporary directory and renamed into place, then
the manifest is replaced atomically: a failed run leaves the previous state as it was. With
``table_format="iceberg"`` the runs are applied to one Apache Iceberg table instead, whose
properties keep the offsets (:mod:`storagepipeline.iceberg`).

``stats`` reads the logs and reports, per topic-partition, what an operator asks before tuning
retention or compaction.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's customary alias

from storagecore import TopicPartition, durability
from storagecore import files as core_files
from storagecore.checkpoints import OffsetCheckpointFile
from storagecore.errors import CorruptCheckpointError
from storagepipeline import iceberg
from storagepipeline.logdirs import (
    DataLossError,
    PartitionSnapshot,
    Pinner,
    PipelineError,
    SegmentRef,
    partition_dirs,
    select_partitions,
    snapshot_partition,
)
from storagepipeline.reading import ReadCounters, ReadOptions, batches

MANIFEST: Final = "_manifest.json"
MANIFEST_VERSION: Final = 1
#: The snapshot job's output formats (:func:`snapshot`); Parquet is the default.
SNAPSHOT_FORMATS: Final = ("parquet", "iceberg")


def _reader(spark: SparkSession, data_dirs: Sequence[str], topics: Sequence[str]) -> Any:
    return (
        spark.read.format("logkeeper")
        .option("path", ",".join(data_dirs))
        .option("topic", ",".join(topics))
    )


def _snapshots(
    data_dirs: Sequence[str], topics: Sequence[str], pattern: str | None, pinner: Pinner
) -> dict[TopicPartition, PartitionSnapshot]:
    if not topics and not pattern:
        raise PipelineError("give at least one topic or a topic pattern")
    selected = select_partitions(partition_dirs(data_dirs), topics=topics, pattern=pattern)
    if not selected:
        raise PipelineError(f"no partitions match topics {list(topics)} / pattern {pattern!r}")
    return {tp: snapshot_partition(tp, path, pinner) for tp, path in selected.items()}


#: A job releases its pins when it ends; the lease only bounds what a killed driver leaves.
JOB_PIN_MS: Final = 24 * 3_600_000


def _offsets_json(offsets: dict[TopicPartition, int]) -> str:
    by_topic: dict[str, dict[str, int]] = {}
    for tp, offset in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, {})[str(tp.partition)] = offset
    return json.dumps(by_topic)


# -- snapshot ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class SnapshotRun:
    run_id: str
    kind: str
    path: str
    rows: int
    deletes: int
    start_offsets: dict[str, int]
    end_offsets: dict[str, int]


def read_manifest(output: Path) -> dict[str, Any]:
    path = output / MANIFEST
    if not path.exists():
        return {"version": MANIFEST_VERSION, "runs": []}
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise PipelineError(f"snapshot manifest {path} is not JSON: {exc}") from exc
    if manifest.get("version") != MANIFEST_VERSION:
        raise PipelineError(f"snapshot manifest {path}: unknown version {manifest.get('version')}")
    return manifest


def _latest_per_key(df: DataFrame) -> DataFrame:
    """For each (topic, partition, key) the highest-offset record (tombstones included)."""
    keyed = df.where(F.col("key").isNotNull())
    record = F.struct("offset", "value", "timestamp", "headers")
    return (
        keyed.groupBy("topic", "partition", "key")
        .agg(F.max_by(record, "offset").alias("r"))
        .select(
            "topic",
            "partition",
            "key",
            F.col("r.value").alias("value"),
            F.col("r.headers").alias("headers"),
            F.col("r.offset").alias("offset"),
            F.col("r.timestamp").alias("timestamp"),
            F.col("r.value").isNull().alias("deleted"),
        )
    )


def snapshot(
    spark: SparkSession,
    data_dirs: Sequence[str],
    output: str,
    *,
    topics: Sequence[str] = (),
    pattern: str | None = None,
    fail_on_data_loss: bool = True,
    table_format: str = "parquet",
    table: str = iceberg.DEFAULT_TABLE,
    catalog: Mapping[str, str] | None = None,
) -> SnapshotRun:
    """Export the live keys (first run) or the changes since the last run (later runs).

    ``table_format="parquet"`` (the default) writes each run as its own Parquet table under
    ``output`` beside a manifest; ``"iceberg"`` applies each run to the Iceberg table ``table``
    of ``catalog`` (pyiceberg catalog properties; default a SQLite catalog in ``output``), whose
    properties keep the offsets: :mod:`storagepipeline.iceberg`.
    """
    if table_format not in SNAPSHOT_FORMATS:
        raise PipelineError(f"snapshot format {table_format!r}: use one of {SNAPSHOT_FORMATS}")
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    # The pins make the export one point in time: the Spark read plans from the segments
    # pinned here, whatever the worker cleans or deletes meanwhile, until the job ends.
    pinner = Pinner(JOB_PIN_MS)
    try:
        if table_format == "iceberg":
            target = iceberg.open_table(catalog or iceberg.default_catalog(out), table)
            previous = iceberg.end_offsets(target)
            changes, starts, ends = _changes(
                spark,
                data_dirs,
                previous,
                topics=topics,
                pattern=pattern,
                pinner=pinner,
                fail_on_data_loss=fail_on_data_loss,
            )
            if not previous:  # a first run: nothing to delete
                changes = changes.where(~F.col("deleted"))
            # Topics of earlier runs that this run did not select keep their offsets.
            done = iceberg.commit(spark, target, changes, {**previous, **_named(ends)})
            return SnapshotRun(
                run_id=str(done.snapshot_id),
                kind="changes" if previous else "full",
                path=target.location(),
                rows=done.rows,
                deletes=done.deletes,
                start_offsets=_named(starts),
                end_offsets=_named(ends),
            )
        manifest = read_manifest(out)
        previous = manifest["runs"][-1]["end_offsets"] if manifest["runs"] else {}
        changes, starts, ends = _changes(
            spark,
            data_dirs,
            previous,
            topics=topics,
            pattern=pattern,
            pinner=pinner,
            fail_on_data_loss=fail_on_data_loss,
        )
        return _parquet_run(spark, changes, starts, ends, out=out, manifest=manifest)
    finally:
        pinner.release()


def _named(offsets: dict[TopicPartition, int]) -> dict[str, int]:
    return {str(tp): offset for tp, offset in sorted(offsets.items())}


def _changes(
    spark: SparkSession,
    data_dirs: Sequence[str],
    previous: dict[str, int],
    *,
    topics: Sequence[str],
    pattern: str | None,
    pinner: Pinner,
    fail_on_data_loss: bool,
) -> tuple[DataFrame, dict[TopicPartition, int], dict[TopicPartition, int]]:
    """The latest record of each key written after ``previous`` (tombstones flagged), with the
    start and end offsets it covers."""
    snaps = _snapshots(data_dirs, topics, pattern, pinner)
    starts: dict[TopicPartition, int] = {}
    ends: dict[TopicPartition, int] = {}
    for tp, snap in snaps.items():
        start = previous.get(str(tp), snap.log_start_offset)
        if start < snap.log_start_offset:
            message = (
                f"{tp}: the last snapshot ends at offset {start} but the log now starts at "
                f"{snap.log_start_offset}: records in between were deleted unseen"
            )
            if fail_on_data_loss:
                raise DataLossError(message + " (fail_on_data_loss=False exports from the start)")
            start = snap.log_start_offset
        starts[tp] = min(start, snap.log_end_offset)
        ends[tp] = snap.log_end_offset
    df = (
        _reader(spark, data_dirs, sorted({tp.topic for tp in snaps}))
        .option("startingOffsets", _offsets_json(starts))
        .option("endingOffsets", _offsets_json(ends))
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
        .option("pinSets", pinner.option_value())
        .load()
    )
    return _latest_per_key(df), starts, ends


def _parquet_run(
    spark: SparkSession,
    table: DataFrame,
    starts: dict[TopicPartition, int],
    ends: dict[TopicPartition, int],
    *,
    out: Path,
    manifest: dict[str, Any],
) -> SnapshotRun:
    kind = "changes" if manifest["runs"] else "full"
    if kind == "full":
        table = table.where(~F.col("deleted"))
    run_id = f"{len(manifest['runs']) + 1:05d}-{kind}"
    final = out / run_id
    temporary = out / f".{run_id}.{uuid.uuid4().hex}.tmp"
    try:
        table.write.parquet(str(temporary))
        counts = (
            spark.read.parquet(str(temporary))
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.sum(F.col("deleted").cast("int")).alias("deletes"),
            )
            .first()
        )
        durability.rename(temporary, final, sync_parent=True)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    run = SnapshotRun(
        run_id=run_id,
        kind=kind,
        path=str(final),
        rows=int(counts["rows"] or 0) if counts else 0,
        deletes=int(counts["deletes"] or 0) if counts else 0,
        start_offsets=_named(starts),
        end_offsets=_named(ends),
    )
    manifest["runs"].append({**dataclasses.asdict(run), "created_ms": int(time.time() * 1000)})
    # The commit point of the run: the manifest names it only once its table is in place.
    durability.write_atomically(out / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    return run


# -- stats ---------------------------------------------------------------------------------------
def _cleaner_checkpoints(data_dirs: Sequence[str]) -> dict[TopicPartition, int]:
    result: dict[TopicPartition, int] = {}
    for data_dir in data_dirs:
        path = Path(data_dir) / core_files.CLEANER_OFFSET_CHECKPOINT
        if path.exists():
            try:
                result.update(OffsetCheckpointFile(path).read())
            except CorruptCheckpointError:
                continue
    return result


def _count_corrupt(item: tuple[TopicPartition, SegmentRef, str]) -> tuple[TopicPartition, int]:
    tp, ref, directory = item
    counters = ReadCounters()
    options = ReadOptions(fail_on_corruption=False, fail_on_data_loss=False)
    for _batch in batches(ref, Path(directory), options, counters):
        pass
    return tp, counters.corrupt_batches


def _corrupt_batches(
    spark: SparkSession, snaps: dict[TopicPartition, PartitionSnapshot]
) -> dict[TopicPartition, int]:
    """Batches failing their CRC or framing, per partition (one Spark task per segment)."""
    items = [(tp, ref, snap.directory) for tp, snap in snaps.items() for ref in snap.segments]
    if not items:
        return {}
    counted = spark.sparkContext.parallelize(items, len(items)).map(_count_corrupt)
    return dict(counted.reduceByKey(lambda a, b: a + b).collect())


def dirty_ratio(snap: PartitionSnapshot, first_dirty: int | None) -> float:
    """The cleaner's ratio: dirty bytes / bytes of the sealed segments (0 without any)."""
    sealed = [ref for ref in snap.segments if not ref.active]
    total = sum(ref.size_bytes for ref in sealed)
    if not total:
        return 0.0
    start = snap.log_start_offset if first_dirty is None else first_dirty
    dirty = sum(ref.size_bytes for ref in sealed if ref.end_offset > start)
    return dirty / total


def stats(
    spark: SparkSession,
    data_dirs: Sequence[str],
    *,
    topics: Sequence[str] = (),
    pattern: str | None = None,
    output: str | None = None,
) -> list[dict[str, Any]]:
    """Per topic-partition figures (records, bytes, keys, tombstones, dirty ratio, sizes, times)."""
    pinner = Pinner(JOB_PIN_MS)
    try:
        return _stats(
            spark, data_dirs, topics=topics, pattern=pattern, output=output, pinner=pinner
        )
    finally:
        pinner.release()


def _stats(
    spark: SparkSession,
    data_dirs: Sequence[str],
    *,
    topics: Sequence[str],
    pattern: str | None,
    output: str | None,
    pinner: Pinner,
) -> list[dict[str, Any]]:
    snaps = _snapshots(data_dirs, topics, pattern, pinner)
    ends = {tp: snap.log_end_offset for tp, snap in snaps.items()}
    # Corrupt batches are counted (below) rather than failing the figures of everything else.
    df = (
        _reader(spark, data_dirs, sorted({tp.topic for tp in snaps}))
        .option("endingOffsets", _offsets_json(ends))
        .option("failOnCorruption", "false")
        .option("pinSets", pinner.option_value())
        .load()
    )
    key_size = F.length("key")
    value_size = F.length("value")
    quantiles = [0.5, 0.9, 0.99]
    figures = (
        df.groupBy("topic", "partition")
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.countDistinct("key").alias("distinct_keys"),
            F.sum(F.col("value").isNull().cast("int")).alias("tombstones"),
            F.percentile_approx(key_size, quantiles).alias("key_size_p50_p90_p99"),
            F.max(key_size).alias("key_size_max"),
            F.percentile_approx(value_size, quantiles).alias("value_size_p50_p90_p99"),
            F.max(value_size).alias("value_size_max"),
            F.min("timestamp").alias("oldest_timestamp"),
            F.max("timestamp").alias("newest_timestamp"),
        )
        .collect()
    )
    checkpoints = _cleaner_checkpoints(data_dirs)
    corrupt = _corrupt_batches(spark, snaps)
    rows: list[dict[str, Any]] = []
    by_tp = {TopicPartition(r["topic"], r["partition"]): r.asDict() for r in figures}
    for tp, snap in sorted(snaps.items()):
        row = by_tp.get(tp, {"topic": tp.topic, "partition": tp.partition, "records": 0})
        row.update(
            log_start_offset=snap.log_start_offset,
            log_end_offset=snap.log_end_offset,
            segments=len(snap.segments),
            size_bytes=sum(ref.size_bytes for ref in snap.segments),
            dirty_ratio=round(dirty_ratio(snap, checkpoints.get(tp)), 4),
            corrupt_batches=corrupt.get(tp, 0),
        )
        rows.append(row)
    if output:
        temporary = Path(output).with_name(f".{Path(output).name}.{uuid.uuid4().hex}.tmp")
        try:
            spark.createDataFrame(rows).write.parquet(str(temporary))
            if Path(output).exists():
                raise PipelineError(f"stats output {output} exists; choose a new path")
            durability.rename(temporary, Path(output), sync_parent=True)
        finally:
            shutil.rmtree(temporary, ignore_errors=True)
    return rows


STATS_COLUMNS: Final = (
    "topic",
    "partition",
    "records",
    "size_bytes",
    "segments",
    "distinct_keys",
    "tombstones",
    "dirty_ratio",
    "corrupt_batches",
    "key_size_p50_p90_p99",
    "value_size_p50_p90_p99",
    "oldest_timestamp",
    "newest_timestamp",
)


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] = STATS_COLUMNS) -> str:
    """A plain-text table (the CLI's output)."""

    def cell(value: Any) -> str:
        if isinstance(value, list):
            return "/".join(str(v) for v in value)
        return "-" if value is None else str(value)

    table = [list(columns)] + [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    return "\n".join(
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
        for line in table
    )
