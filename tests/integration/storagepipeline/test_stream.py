"""The ``logkeeper`` streaming reader on local[2] Spark: Trigger.AvailableNow runs into a Parquet
sink with a checkpoint, restarted to check where they resume, and the data-loss rules.

Every expectation comes from what was written (offsets from 0 in append order) or from a batch
read of the same directory, never from the stream itself.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from storagecore import LogConfig, LogManager, ManualClock, NewRecord
from storagecore.cleaner.log_cleaner import LogCleaner
from storagecore.config import CleanerConfig
from storagepipeline import plan
from tests.integration.storagepipeline.conftest import (
    START_MS,
    clean_and_delete_everything,
    write_log,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

COMPACTED = {"cleanup.policy": "compact,delete", "file.delete.delay.ms": 0}


def append(data_dir: Path, per_partition: int, *, seed: int, config: Any = None) -> None:
    """``per_partition`` more records (batches of 10, 5 keys) to each of 2 partitions."""
    rng = random.Random(seed)
    batches = {
        partition: [
            [
                NewRecord(
                    key=f"k{rng.randrange(5)}".encode(),
                    value=rng.randbytes(30),
                    timestamp=START_MS + i,
                )
                for i in range(10)
            ]
            for _ in range(per_partition // 10)
        ]
        for partition in range(2)
    }
    write_log(data_dir, "orders", batches, config=config)


def run(spark: SparkSession, data_dir: Path, work: Path, **options: str) -> list[dict[str, Any]]:
    """One Trigger.AvailableNow run into ``work/out`` with checkpoint ``work/checkpoint``; the
    progress of its micro-batches."""
    reader = spark.readStream.format("logkeeper").option("path", str(data_dir))
    for key, value in {"topic": "orders", **options}.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .selectExpr("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(work / "out"))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "the AvailableNow run did not finish in 120 s"
    finally:
        query.stop()
    return [dict(p) for p in query.recentProgress]


def sink(spark: SparkSession, work: Path) -> list[tuple[int, int, bytes]]:
    if not (work / "out").exists():
        return []
    rows = spark.read.parquet(str(work / "out")).collect()
    return sorted((r["partition"], r["offset"], bytes(r["value"])) for r in rows)


def batch_read(spark: SparkSession, data_dir: Path) -> list[tuple[int, int, bytes]]:
    df = spark.read.format("logkeeper").option("path", str(data_dir)).option("topic", "orders")
    rows = df.load().collect()
    return sorted((r["partition"], r["offset"], bytes(r["value"])) for r in rows)


def last_checkpointed_offsets(work: Path) -> Any:
    offsets = work / "checkpoint" / "offsets"
    last = max((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    return json.loads(last.read_text().splitlines()[-1])


def test_max_offsets_per_trigger_and_a_restart_resumes_exactly_where_it_stopped(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    append(data, 200, seed=1)
    progress = run(spark, data, tmp_path, startingOffsets="earliest", maxOffsetsPerTrigger="150")
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    # 400 offsets, at most 150 a trigger, shared by lag: 75 + 75, 75 + 75, 50 + 50.
    assert sizes == [150, 150, 100]
    assert sink(spark, tmp_path) == batch_read(spark, data)
    assert last_checkpointed_offsets(tmp_path) == {"orders": {"0": 200, "1": 200}}

    append(data, 50, seed=2)
    progress = run(spark, data, tmp_path, startingOffsets="earliest", maxOffsetsPerTrigger="150")
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [100]
    got = sink(spark, tmp_path)
    assert got == batch_read(spark, data)  # the 100 new rows once, nothing read twice
    assert len(got) == len({(p, o) for p, o, _v in got}) == 500
    assert last_checkpointed_offsets(tmp_path) == {"orders": {"0": 250, "1": 250}}


def test_starting_offsets_latest_is_the_streaming_default(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    append(data, 100, seed=1)
    run(spark, data, tmp_path)
    assert sink(spark, tmp_path) == []
    append(data, 20, seed=3)
    run(spark, data, tmp_path)
    got = sink(spark, tmp_path)
    assert [(p, o) for p, o, _v in got] == [(p, o) for p in (0, 1) for o in range(100, 120)]


def test_max_records_per_partition_cuts_each_micro_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    append(data, 200, seed=1)
    run(spark, data, tmp_path, startingOffsets="earliest", maxRecordsPerPartition="30")
    got = sink(spark, tmp_path)
    assert got == batch_read(spark, data)
    # The sink writes one file per non-empty task: 2 partitions of 200 offsets, 30 per task.
    assert len(list((tmp_path / "out").glob("part-*.parquet"))) == 2 * 7


def test_compaction_gaps_are_not_data_loss_but_retention_is(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    append(data, 300, seed=1, config=COMPACTED)
    log_config = LogConfig.from_topic_config({"segment.bytes": 4096, **COMPACTED})
    clock = ManualClock(START_MS + 10**6)
    with LogManager([data], config_for={"orders": log_config}, clock=clock) as manager:
        LogCleaner(manager, CleanerConfig(), clock=clock).clean_until_done()
    compacted = batch_read(spark, data)
    assert 0 < len(compacted) < 600  # gaps; the log start is still 0
    from_zero = json.dumps({"orders": {"0": 0, "1": 0}})
    run(spark, data, tmp_path / "a", startingOffsets=from_zero)
    assert sink(spark, tmp_path / "a") == compacted

    clean_and_delete_everything(data, "orders", COMPACTED, log_start=150)
    kept = batch_read(spark, data)
    assert kept and min(o for _p, o, _v in kept) >= 150
    with pytest.raises(
        StreamingQueryException, match=r"orders-0: offsets \[0, 1\d\d\) were deleted"
    ):
        run(spark, data, tmp_path / "b", startingOffsets=from_zero)
    run(spark, data, tmp_path / "c", startingOffsets=from_zero, failOnDataLoss="false")
    assert sink(spark, tmp_path / "c") == kept


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"endingOffsets": "latest"}, "endingOffsets is not allowed for streaming queries"),
        ({"view": "latest"}, "view must be log for streaming queries"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be >= 1, got 0"),
    ],
)
def test_bad_streaming_options_name_the_option(
    spark: SparkSession, tmp_path: Path, options: dict[str, str], message: str
) -> None:
    append(tmp_path / "data", 10, seed=1)
    with pytest.raises(Exception, match=message):
        run(spark, tmp_path / "data", tmp_path, **options)


def test_max_offsets_per_trigger_is_refused_for_batch_reads(tmp_path: Path) -> None:
    with pytest.raises(plan.PipelineError, match="maxOffsetsPerTrigger applies to streaming"):
        plan.parse_read_options(
            {"path": str(tmp_path), "topic": "orders", "maxOffsetsPerTrigger": "5"}
        )
