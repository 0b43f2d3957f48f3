"""The columnar read path: the same rows as the record-by-record reference, only the asked-for
columns decoded, and the read tasks cut as Spark's Kafka source cuts them.

The in-process tests drive the data source's reader directly (no JVM): the reference is
``storagepipeline.reading.records`` (RecordBatch.records(), record by record) over the same
planned ranges; the decoder's own counters say which columns it built.
"""

from __future__ import annotations

import datetime
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import StructType

from storagecore import Compression, NewRecord
from storagepipeline import SCHEMA, columnar, plan, reading
from storagepipeline.source import SCHEMA_WITHOUT_HEADERS, LogkeeperReader
from tests.integration.storagepipeline.conftest import START_MS, write_log

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def build(data_dir: Path, *, codec: Compression = Compression.NONE, partitions: int = 2) -> int:
    """Batches of 1-9 records with headers, tombstones and keyless records, 4 KiB segments;
    returns the record count."""
    rng = random.Random(7)
    batches: dict[int, list[list[NewRecord]]] = {}
    total = 0
    for partition in range(partitions):
        for b in range(60):
            batch = []
            for i in range(rng.randrange(1, 10)):
                key = None if rng.random() < 0.05 else f"k{rng.randrange(30)}".encode()
                value = None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 60))
                headers = (("h", f"{b}".encode()), ("n", None)) if rng.random() < 0.3 else ()
                ts = START_MS + b * 1000 + i
                batch.append(NewRecord(key=key, value=value, timestamp=ts, headers=headers))
            batches.setdefault(partition, []).append(batch)
            total += len(batch)
    write_log(data_dir, "orders", batches, codec=codec)
    return total


def reader_for(data_dir: Path, schema: StructType = SCHEMA, **options: str) -> LogkeeperReader:
    given = {"path": str(data_dir), "topic": "orders", "pinMs": "0", **options}
    return LogkeeperReader(plan.parse_read_options(given), schema)


def columnar_rows(
    reader: LogkeeperReader, counters: columnar.DecodeCounters | None = None
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in reader.partitions():
        for batch in reader.read_unit(
            part.unit,  # type: ignore[attr-defined]
            reading.ReadCounters(),
            decode_counters=counters,
        ):
            assert isinstance(batch, pa.RecordBatch)
            out.extend(batch.to_pylist())
    return out


def reference_rows(reader: LogkeeperReader) -> list[dict[str, Any]]:
    """The same planned ranges, record by record through RecordBatch.records()."""
    out = []
    for part in reader.partitions():
        unit = part.unit  # type: ignore[attr-defined]
        for ref in unit.refs:
            for record, ts_type in reading.records(
                ref, Path(unit.directory), reader.spec.read_options, reading.ReadCounters()
            ):
                out.append(
                    {
                        "key": record.key,
                        "value": record.value,
                        "topic": unit.topic,
                        "partition": unit.partition,
                        "offset": record.offset,
                        "timestamp": datetime.datetime.fromtimestamp(
                            record.timestamp / 1000, datetime.UTC
                        ),
                        "timestampType": ts_type,
                        "headers": [{"key": k, "value": v} for k, v in record.headers],
                    }
                )
    return out


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.config_name)
def test_columnar_rows_equal_the_record_by_record_reference(
    tmp_path: Path, codec: Compression
) -> None:
    total = build(tmp_path, codec=codec)
    reader = reader_for(tmp_path)
    got = columnar_rows(reader)
    assert len(got) == total
    assert got == reference_rows(reader)


def test_chunks_smaller_than_a_batch_read_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunk boundaries fall inside batches, and a batch can be larger than a chunk."""
    build(tmp_path, codec=Compression.NONE)
    reader = reader_for(tmp_path, minPartitions="7")
    whole = columnar_rows(reader)
    monkeypatch.setattr(columnar, "CHUNK_BYTES", 100)
    assert columnar_rows(reader) == whole == reference_rows(reader)


@pytest.mark.parametrize(
    ("schema", "decoded"),
    [
        (("key",), {"key"}),
        (("offset", "partition"), {"offset"}),
        (("topic",), set()),
        (("value", "timestamp"), {"value", "timestamp"}),
        (("headers", "timestampType"), {"headers", "timestamp_type"}),
    ],
)
def test_only_the_schemas_columns_are_decoded(
    tmp_path: Path, schema: tuple[str, ...], decoded: set[str]
) -> None:
    total = build(tmp_path, codec=Compression.LZ4)
    narrow = StructType([SCHEMA[name] for name in schema])
    counters = columnar.DecodeCounters()
    rows = columnar_rows(reader_for(tmp_path, narrow), counters)
    assert len(rows) == total and counters.rows == total
    assert set(counters.column_bytes) == decoded
    names = narrow.fieldNames()
    assert rows == [{name: r[name] for name in names} for r in reference_rows(reader_for(tmp_path))]
    whole = columnar.DecodeCounters()
    columnar_rows(reader_for(tmp_path, SCHEMA_WITHOUT_HEADERS), whole)
    if "value" not in decoded:
        assert "value" in whole.column_bytes and whole.column_bytes["value"] > 0


def test_a_narrow_schema_through_spark_and_a_bad_one_named(
    spark: SparkSession, tmp_path: Path
) -> None:
    build(tmp_path)
    reference = sorted(
        (r["partition"], r["offset"], r["key"]) for r in reference_rows(reader_for(tmp_path))
    )
    df = (
        spark.read.format("logkeeper")
        .schema("partition int, offset long, key binary")
        .option("path", str(tmp_path))
        .option("topic", "orders")
        .load()
    )
    got = sorted(
        (r["partition"], r["offset"], None if r["key"] is None else bytes(r["key"]))
        for r in df.collect()
    )
    assert got == reference
    for bad, message in (
        ("colour string", "read schema column 'colour' is not a column"),
        ("offset int", "read schema column 'offset' must be bigint, got int"),
    ):
        with pytest.raises(Exception, match=message):
            spark.read.format("logkeeper").schema(bad).option("path", str(tmp_path)).option(
                "topic", "orders"
            ).load().collect()


def test_tasks_per_partition_min_partitions_and_max_records_through_spark(
    spark: SparkSession, tmp_path: Path
) -> None:
    total = build(tmp_path)
    segments = len(list(tmp_path.glob("orders-*/*.log")))
    assert segments > 4

    def load(**options: str) -> Any:
        reader = spark.read.format("logkeeper").option("path", str(tmp_path))
        for key, value in {"topic": "orders", **options}.items():
            reader = reader.option(key, value)
        return reader.load()

    def per_task(df: Any) -> list[tuple[int, int, int, int]]:
        """(task, rows, first offset, last offset) of each Spark partition that has rows."""
        rows = (
            df.groupBy(F.spark_partition_id().alias("task"))
            .agg(F.count("*"), F.min("offset"), F.max("offset"))
            .collect()
        )
        return sorted(tuple(r) for r in rows)

    assert load().rdd.getNumPartitions() == 2
    split = load(minPartitions="6")
    assert split.rdd.getNumPartitions() == 6 and split.count() == total
    capped = load(maxRecordsPerPartition="40")
    tasks = per_task(capped)
    # Offsets run from 0 in each partition: a task of at most 40 offsets has at most 40 rows.
    assert all(rows <= 40 and last - first < 40 for _task, rows, first, last in tasks)
    assert sum(rows for _task, rows, _first, _last in tasks) == total
    # The latest view needs whole partitions: it is never cut.
    assert load(view="latest", minPartitions="6").rdd.getNumPartitions() == 2
