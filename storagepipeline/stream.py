"""The ``logkeeper`` streaming reader: topic logs as an unbounded table, micro-batch by
micro-batch, with the offsets and options of Spark's Kafka source.

``spark.readStream.format("logkeeper").option("path", DIR).option("topic", T).load()``. Spark
keeps each micro-batch's end offsets (``{"topic": {"partition": offset}}``, the JSON of the
Kafka source) in the query's checkpoint; a restarted query plans its next batch from there, so it
resumes exactly where it stopped. Per micro-batch, on the driver:

* :meth:`LogkeeperStreamReader.latestOffset`: the partitions' log end offsets now, limited by
  ``maxOffsetsPerTrigger`` (shared by lag, :func:`storagepipeline.ranges.rate_limit`) and, after
  ``Trigger.AvailableNow`` started the query, by the ends it recorded then;
* :meth:`LogkeeperStreamReader.partitions`: the batch's ranges, checked for data loss and cut
  into tasks as a batch read's (:func:`storagepipeline.plan.cut`).

Data loss, as the Kafka source tells it: a gap *inside* a range is normal (compaction removed
those offsets; the task reads the records that are left). Offsets of a range that are *below the
log start offset* (retention, DeleteRecords), a partition that vanished, or a log end that went
backwards are lost: an error naming the partition and offsets, or with ``failOnDataLoss=false``
a warning, and the batch reads what is there. A partition that appears later is read from its
log start, as the Kafka source reads new partitions from earliest.

Executors read exactly as a batch read does (:class:`storagepipeline.source.LogkeeperReader`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from storagecore import TopicPartition
from storagepipeline import plan, ranges
from storagepipeline.logdirs import (
    DataLossError,
    PartitionSnapshot,
    Pinner,
    PipelineError,
    partition_dirs,
    select_partitions,
    snapshot_partition,
)
from storagepipeline.source import LogkeeperInputPartition, LogkeeperReader

logger = logging.getLogger(__name__)

#: A stream offset: the Kafka source's JSON form, ``{"topic": {"partition": offset}}``.
StreamOffset = dict[str, dict[str, int]]


def to_json(offsets: Mapping[TopicPartition, int]) -> StreamOffset:
    out: StreamOffset = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def from_json(offset: Mapping[str, Any]) -> dict[TopicPartition, int]:
    """A checkpointed offset back to offsets; a malformed one is named."""
    out: dict[TopicPartition, int] = {}
    try:
        for topic, partitions in offset.items():
            for partition, value in partitions.items():
                out[TopicPartition(str(topic), int(partition))] = int(value)
    except (AttributeError, TypeError, ValueError):
        raise PipelineError(
            f"stream offset {json.dumps(offset)} is not of the form "
            '{"topic": {"partition": offset}} (a checkpoint of another source?)'
        ) from None
    return out


class LogkeeperStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """See the module docstring. One instance lives on the driver for the whole query."""

    def __init__(self, spec: plan.ReadSpec, schema: StructType) -> None:
        self.spec = spec
        self.schema = schema
        #: Trigger.AvailableNow: the log ends when the query started; nothing past them is read.
        self.available_now: dict[TopicPartition, int] | None = None
        #: The pins of each planned micro-batch (by its end offset), released when Spark
        #: commits that batch.
        self.pinners: dict[str, Pinner] = {}

    # -- offsets -------------------------------------------------------------------------------
    def _snapshots(self, pinner: Pinner | None = None) -> dict[TopicPartition, PartitionSnapshot]:
        selected = select_partitions(
            partition_dirs(self.spec.data_dirs),
            topics=self.spec.topics,
            pattern=self.spec.topic_pattern,
        )
        return {tp: snapshot_partition(tp, path, pinner) for tp, path in selected.items()}

    def initialOffset(self) -> StreamOffset:  # noqa: N802 - Spark's name
        snaps = self._snapshots()
        spec = self.spec
        explicit = (
            plan.explicit_offsets(spec.starting, list(snaps), "startingOffsets")
            if isinstance(spec.starting, dict)
            else {}
        )
        starts: dict[TopicPartition, int] = {}
        for tp, snap in snaps.items():
            if spec.starting_timestamp is not None:
                found = plan.offset_for_timestamp(snap, spec.starting_timestamp, spec.read_options)
                if found is None and spec.timestamp_strategy == "error":
                    raise PipelineError(
                        f"{tp}: no record has a timestamp >= startingTimestamp "
                        f"{spec.starting_timestamp} (startingOffsetsByTimestampStrategy=latest "
                        f"starts such partitions at their end instead)"
                    )
                starts[tp] = snap.log_end_offset if found is None else found
                continue
            default = plan.EARLIEST if spec.starting == "earliest" else plan.LATEST
            offset = explicit.get(tp, default)
            if offset == plan.EARLIEST:
                offset = snap.log_start_offset
            elif offset == plan.LATEST:
                offset = snap.log_end_offset
            elif offset > snap.log_end_offset:
                raise PipelineError(
                    f"{tp}: startingOffsets {offset} is beyond the log end offset "
                    f"{snap.log_end_offset}"
                )
            starts[tp] = offset
        return to_json(starts)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        limit = self.spec.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        self.available_now = {tp: snap.log_end_offset for tp, snap in self._snapshots().items()}
        logger.info("Trigger.AvailableNow: reading up to %s", to_json(self.available_now))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> StreamOffset:  # noqa: N802
        begun = from_json(start)
        snaps = self._snapshots()
        ends = {tp: snap.log_end_offset for tp, snap in snaps.items()}
        if self.available_now is not None:
            # Partitions that appeared after the query started are not part of this run.
            ends = {
                tp: min(end, self.available_now[tp])
                for tp, end in ends.items()
                if tp in self.available_now
            }
        # New partitions start at their log start; partitions gone keep their offset (the
        # loss is reported when the batch is planned).
        starts = {tp: begun.get(tp, snaps[tp].log_start_offset) for tp in ends}
        if isinstance(limit, ReadMaxRows):
            ends = ranges.rate_limit(starts, ends, limit.max_rows)
        elif not isinstance(limit, ReadAllAvailable):
            raise PipelineError(f"read limit {limit!r} is not supported by the logkeeper source")
        for tp, offset in begun.items():
            ends.setdefault(tp, offset)
        return to_json(ends)

    def reportLatestOffset(self) -> StreamOffset:  # noqa: N802 - Spark's name
        return to_json({tp: snap.log_end_offset for tp, snap in self._snapshots().items()})

    # -- planning ------------------------------------------------------------------------------
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begun, until = from_json(start), from_json(end)
        pinner = self.spec.pinner()
        snaps = self._snapshots(pinner)
        spans = []
        for tp, end_offset in sorted(until.items()):
            snap = snaps.get(tp)
            if snap is None:
                self._lost(
                    f"{tp}: the partition is gone (deleted?); its offsets from "
                    f"{begun.get(tp, end_offset)} on are not read"
                )
                continue
            first = begun.get(tp, snap.log_start_offset)
            last = min(end_offset, snap.log_end_offset)
            if end_offset > snap.log_end_offset or first > snap.log_end_offset:
                self._lost(
                    f"{tp}: the log end offset went back to {snap.log_end_offset} (planned "
                    f"[{first}, {end_offset})): the log was truncated or recreated; reading "
                    f"from its log start {snap.log_start_offset}"
                )
                first = min(first, snap.log_start_offset)
            if first < snap.log_start_offset:
                self._lost(
                    f"{tp}: offsets [{first}, {snap.log_start_offset}) were deleted (retention "
                    f"or delete-records) before this micro-batch read them"
                )
                first = snap.log_start_offset
            spans.append((snap, first, last))
        units = plan.cut(self.spec, spans)
        self.pinners[json.dumps(end, sort_keys=True)] = pinner
        logger.info("logkeeper micro-batch plan: %s", plan.describe(units))
        if not units:
            return [LogkeeperInputPartition(plan.PlannedPartition("", -1, "", ()))]
        return [LogkeeperInputPartition(unit) for unit in units]

    def _lost(self, message: str) -> None:
        if self.spec.fail_on_data_loss:
            raise DataLossError(message + " (set failOnDataLoss=false to go on without them)")
        logger.warning("%s (failOnDataLoss=false)", message)

    # -- reading and committing ----------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from LogkeeperReader(self.spec, self.schema).read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark wrote the batch ending at ``end``: its pins (and earlier ones) can go."""
        key = json.dumps(end, sort_keys=True)
        if key not in self.pinners:
            return
        for planned in list(self.pinners):
            self.pinners.pop(planned).release()
            if planned == key:
                break

    def stop(self) -> None:
        for pinner in self.pinners.values():
            pinner.release()
        self.pinners.clear()
