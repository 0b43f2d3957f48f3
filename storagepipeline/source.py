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

from storagecore import Record
from storagepipeline import plan, reading
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
    """Reads the planned units. Pruning comes from the options (``startingOffsets`` and
    friends, through the offset and time indexes); :class:`PushdownReader` adds ``where``
    filters when the ``pushdown`` option asks for it."""

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
        options = self.spec.read_options
        if self.pushdown.timestamp_low_ms is not None and self.spec.view == "log":
            options = reading.ReadOptions(
                fail_on_corruption=options.fail_on_corruption,
                fail_on_data_loss=options.fail_on_data_loss,
                min_timestamp=self.pushdown.timestamp_low_ms,
            )
        counters = reading.ReadCounters()
        directory = Path(unit.directory)
        if self.spec.view == "latest":
            rows = latest_records(unit, directory, options, counters)
        else:
            rows = (
                item
                for ref in unit.refs
                for item in reading.records(ref, directory, options, counters)
            )
        yield from ArrowBuilder(self.schema, unit, self.spec.max_records_per_batch).batches(rows)
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


def latest_records(
    unit: plan.PlannedPartition,
    directory: Path,
    options: reading.ReadOptions,
    counters: reading.ReadCounters,
) -> Iterator[tuple[Record, int]]:
    """The compacted view of one partition: for each key its highest-offset record, tombstones
    and keyless records dropped (what a consumer of a fully cleaned log would keep).

    Two passes over the unit's segments; the first holds one dict entry per distinct key of the
    partition (the ``compact`` job has no such bound: it aggregates in Spark).
    """
    last: dict[bytes, int] = {}
    for ref in unit.refs:
        for record, _type in reading.records(ref, directory, options, counters):
            if record.key is not None:
                last[record.key] = record.offset
    for ref in unit.refs:
        for record, timestamp_type in reading.records(ref, directory, options, counters):
            key = record.key
            if key is not None and record.value is not None and last.get(key) == record.offset:
                yield record, timestamp_type


class ArrowBuilder:
    """Rows to ``pyarrow.RecordBatch``es of the output schema, ``rows_per_batch`` at a time."""

    def __init__(self, schema: StructType, unit: plan.PlannedPartition, rows_per_batch: int):
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.headers = "headers" in schema.fieldNames()
        self.unit = unit
        self.rows_per_batch = rows_per_batch

    def batches(self, rows: Iterator[tuple[Record, int]]) -> Iterator[pa.RecordBatch]:
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        offsets: list[int] = []
        timestamps: list[int] = []
        types: list[int] = []
        headers: list[list[dict[str, Any]]] = []
        for record, timestamp_type in rows:
            keys.append(record.key)
            values.append(record.value)
            offsets.append(record.offset)
            timestamps.append(record.timestamp * 1000)
            types.append(timestamp_type)
            if self.headers:
                headers.append([{"key": k, "value": v} for k, v in record.headers])
            if len(offsets) >= self.rows_per_batch:
                yield self._batch(keys, values, offsets, timestamps, types, headers)
                keys, values, offsets, timestamps, types, headers = [], [], [], [], [], []
        if offsets:
            yield self._batch(keys, values, offsets, timestamps, types, headers)

    def _batch(  # noqa: PLR0917 - the columns
        self,
        keys: list[bytes | None],
        values: list[bytes | None],
        offsets: list[int],
        timestamps: list[int],
        types: list[int],
        headers: list[list[dict[str, Any]]],
    ) -> pa.RecordBatch:
        schema = self.arrow_schema
        n = len(offsets)
        columns = [
            pa.array(keys, type=schema.field("key").type),
            pa.array(values, type=schema.field("value").type),
            pa.array([self.unit.topic] * n, type=schema.field("topic").type),
            pa.array([self.unit.partition] * n, type=schema.field("partition").type),
            pa.array(offsets, type=schema.field("offset").type),
            pa.array(timestamps, type=schema.field("timestamp").type),
            pa.array(types, type=schema.field("timestampType").type),
        ]
        if self.headers:
            columns.append(pa.array(headers, type=schema.field("headers").type))
        return pa.RecordBatch.from_arrays(columns, schema=schema)


class LogkeeperDataSource(DataSource):
    """Format ``logkeeper``: read (batch) and write topic logs. Options: see the README."""

    @classmethod
    def name(cls) -> str:
        return "logkeeper"

    def schema(self) -> StructType:
        # Called for reads only (a write takes the DataFrame's schema, checked by the writer).
        spec = plan.parse_read_options(dict(self.options))
        return SCHEMA if spec.include_headers else SCHEMA_WITHOUT_HEADERS

    def reader(self, schema: StructType) -> DataSourceReader:
        spec = plan.parse_read_options(dict(self.options))
        return (PushdownReader if spec.pushdown else LogkeeperReader)(spec, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return LogkeeperWriter(dict(self.options), schema, overwrite)
