"""The ``logkeeper`` Spark data source: topic logs as DataFrames, in the Kafka source's schema.

``spark.read.format("logkeeper").option("path", DATA_DIR).option("topic", "orders").load()``.
Planning (driver) is :mod:`storagepipeline.plan`; reading (executors) is
:mod:`storagepipeline.reading`; writing is :mod:`storagepipeline.writing`. This module only adapts
them to ``pyspark.sql.datasource`` and builds the Arrow batches.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from storagepipeline import columnar, latest, plan, reading
from storagepipeline.logdirs import PipelineError
from storagepipeline.writing import LogkeeperWriter

logger = logging.getLogger(__name__)

#: The Kafka source's schema (Spark's ``KafkaRecordToRowConverter``), headers included.
SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
    ]
)
SCHEMA_WITHOUT_HEADERS = StructType(SCHEMA.fields[:-1])


def check_read_schema(schema: StructType) -> None:
    """A schema given to a read (``spark.read.schema(...)``) must be columns of :data:`SCHEMA`,
    each with its type: the reader decodes exactly those columns (pyspark 4.3 gives Python data
    sources no column pruning, so a narrower schema is how a query skips decoding values)."""
    known = {field.name: field.dataType for field in SCHEMA.fields}
    for field in schema.fields:
        expected = known.get(field.name)
        if expected is None:
            raise PipelineError(
                f"read schema column {field.name!r} is not a column of the logkeeper source "
                f"(columns: {', '.join(known)})"
            )
        if field.dataType != expected:
            raise PipelineError(
                f"read schema column {field.name!r} must be {expected.simpleString()}, "
                f"got {field.dataType.simpleString()}"
            )


class LogkeeperInputPartition(InputPartition):
    def __init__(self, unit: plan.PlannedPartition) -> None:
        super().__init__(unit)
        self.unit = unit


def _timestamp_ms(value: Any) -> int | None:
    if isinstance(value, datetime.datetime):
        # Naive datetimes come from Spark in the local time zone (TimestampType.fromInternal).
        return int(value.timestamp() * 1000)
    if isinstance(value, int | float):
        return int(value)
    return None


class LogkeeperReader(DataSourceReader):
    """Reads the planned units through the native columnar decoder (:mod:`.columnar`),
    decoding only the columns of ``schema``. Pruning comes from the options
    (``startingOffsets`` and friends, through the offset and time indexes);
    :class:`PushdownReader` adds ``where`` filters when the ``pushdown`` option asks for it."""

    def __init__(self, spec: plan.ReadSpec, schema: StructType) -> None:
        self.spec = spec
        self.schema = schema
        self.pushdown = plan.Pushdown()

    # -- planning ------------------------------------------------------------------------------
    def partitions(self) -> Sequence[InputPartition]:
        if self.pushdown.offset_low >= self.pushdown.offset_high:
            self.pushdown.empty = True
        units = plan.plan_read(self.spec, self.pushdown)
        logger.info("logkeeper read plan: %s", plan.describe(units))
        if not units:
            # Spark needs at least one partition; an empty unit reads nothing.
            return [LogkeeperInputPartition(plan.PlannedPartition("", -1, "", ()))]
        return [LogkeeperInputPartition(unit) for unit in units]

    # -- reading -------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LogkeeperInputPartition), partition
        unit = partition.unit
        if not unit.refs:
            return
        counters = reading.ReadCounters()
        yield from self.read_unit(unit, counters)
        if counters.anything:
            logger.warning("%s-%d read: %s", unit.topic, unit.partition, counters)
            if self.spec.skip_report_path:
                reading.write_skip_report(
                    Path(self.spec.skip_report_path),
                    unit.topic,
                    unit.partition,
                    unit.refs[0],
                    counters,
                )

    def read_unit(
        self,
        unit: plan.PlannedPartition,
        counters: reading.ReadCounters,
        decode_counters: columnar.DecodeCounters | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The unit's rows in the reader's schema (what :meth:`read` yields), counting what it
        skipped into ``counters`` and what it decoded into ``decode_counters``."""
        target = columnar.ArrowTarget(
            schema=to_arrow_schema(self.schema, timezone="UTC"),
            topic=unit.topic,
            partition=unit.partition,
            rows_per_batch=self.spec.max_records_per_batch,
        )
        directory = Path(unit.directory)
        options = self.spec.read_options
        if self.spec.view == "latest":
            yield from latest.record_batches(
                unit.refs, directory, target, options, counters, decode_counters=decode_counters
            )
            return
        for ref in unit.refs:
            yield from columnar.record_batches(
                ref, directory, target, options, counters, decode_counters=decode_counters
            )


class PushdownReader(LogkeeperReader):
    """``pushdown=true``: partition, topic and offset filters are applied exactly (offsets
    through the offset index); a lower bound on timestamp skips segments (time index) and
    batches, and is also given back to Spark. In the ``latest`` view only lower offset bounds
    are pushed: an upper bound changes which record is the latest for a key.

    Opt-in because pyspark 4.3 caches a scan's planned partitions on the loaded DataFrame: a
    query *without* filters on a DataFrame that was queried *with* pushed filters reuses the
    narrowed plan and silently returns too few rows (see the README). Load a fresh DataFrame
    per query when this is on.
    """

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 - Spark's name
        for item in filters:
            if not self.push(item):
                yield item

    def push(self, item: Filter) -> bool:
        """Record ``item`` in :attr:`pushdown`; True when it needs no evaluation by Spark."""
        attribute: tuple[str, ...] = getattr(item, "attribute", ())
        column = attribute[0] if len(attribute) == 1 else None
        push = self.pushdown
        latest = self.spec.view == "latest"
        value: Any = getattr(item, "value", None)
        if column in {"topic", "partition"} and isinstance(item, EqualTo | In):
            values = {value} if isinstance(item, EqualTo) else set(value)
            if column == "topic":
                push.topics = values if push.topics is None else push.topics & values
            else:
                push.partitions = values if push.partitions is None else push.partitions & values
            return True
        if column == "offset" and isinstance(value, int):
            if isinstance(item, GreaterThan):
                push.offset_low = max(push.offset_low, value + 1)
                return True
            if isinstance(item, GreaterThanOrEqual):
                push.offset_low = max(push.offset_low, value)
                return True
            if isinstance(item, EqualTo):
                push.offset_low = max(push.offset_low, value)
                if latest:
                    return False
                push.offset_high = min(push.offset_high, value + 1)
                return True
            if latest:
                return False
            if isinstance(item, LessThan):
                push.offset_high = min(push.offset_high, value)
                return True
            if isinstance(item, LessThanOrEqual):
                push.offset_high = min(push.offset_high, value + 1)
                return True
            return False
        if column == "timestamp" and not latest:
            ms = _timestamp_ms(value)
            if ms is not None and isinstance(item, GreaterThan | GreaterThanOrEqual | EqualTo):
                low = push.timestamp_low_ms
                push.timestamp_low_ms = ms if low is None else max(low, ms)
            return False  # timestamps are not ordered by offset: Spark checks every row
        return False


class LogkeeperDataSource(DataSource):
    """Format ``logkeeper``: read (batch) and write topic logs. Options: see the README."""

    @classmethod
    def name(cls) -> str:
        return "logkeeper"

    def schema(self) -> StructType:
        # Called for batch and streaming reads (a write takes the DataFrame's schema, checked by
        # the writer); the reader and the stream reader check the other options.
        options = dict(self.options)
        plan.check_known(options, plan.READ_OPTIONS, "logkeeper read")
        return SCHEMA if plan.include_headers(options) else SCHEMA_WITHOUT_HEADERS

    def reader(self, schema: StructType) -> DataSourceReader:
        spec = plan.parse_read_options(dict(self.options))
        check_read_schema(schema)
        return (PushdownReader if spec.pushdown else LogkeeperReader)(spec, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        # Imported here: the stream reader reads through this module's reader.
        from storagepipeline.stream import LogkeeperStreamReader  # noqa: PLC0415

        spec = plan.parse_read_options(dict(self.options), streaming=True)
        check_read_schema(schema)
        return LogkeeperStreamReader(spec, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return LogkeeperWriter(dict(self.options), schema, overwrite)
