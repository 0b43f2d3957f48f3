"""The ``logkeeper`` data source over an old partition: v0/v1 messages (kafka-python's legacy
builder) then v2 batches, read as Spark's Kafka source shows them (issue 21, point 4)."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from storagecore import LogConfig, LogManager, ManualClock, NewRecord, build_batch
from storagecore.cleaner import LogCleaner
from storagecore.config import CleanerConfig
from storagecore.log import Log
from storagepipeline.compact import compact
from tests.integration.storagepipeline.conftest import START_MS, copy_dir
from tests.integration.storagepipeline.test_jobs import COMPACTED, NOW_MS, segment_files
from tests.legacy_data import Message, kp_entry, kp_read, write_segment

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_legacy_messages_read_as_sparks_kafka_source_shows_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    parts: list[bytes] = []
    offset = 0
    for magic, codec, count in [(0, 0, 2), (0, 1, 4), (0, 3, 3), (1, 2, 5), (1, 3, 4)]:
        messages = [
            (START_MS + offset + i, b"k%d" % i, b"v%d" % (offset + i)) for i in range(count)
        ]
        parts.append(kp_entry(magic, codec, messages, offset))
        offset += count
    v2 = build_batch([NewRecord(b"k", b"new", START_MS + 999)], base_offset=offset)
    directory = tmp_path / "old-0"
    write_segment(directory, 0, [*parts, v2])
    # As a worker leaves it: loaded (indexes rebuilt), shut down cleanly.
    Log.open(directory, LogConfig(), ManualClock(START_MS), had_clean_shutdown=False).close()
    model = [*kp_read(b"".join(parts)), Message(offset, START_MS + 999, b"k", b"new")]

    df = spark.read.format("logkeeper").option("path", str(tmp_path)).option("topic", "old").load()
    got = sorted(
        (
            r["offset"],
            bytes(r["key"]),
            bytes(r["value"]),
            int(r["timestamp"].replace(tzinfo=datetime.UTC).timestamp() * 1000),
            r["timestampType"],
        )
        for r in df.collect()
    )
    # v0: no timestamp, shown as Spark's Kafka source shows ConsumerRecord's -1 (the instant
    # 1 ms before the epoch) with timestamp type -1 (NoTimestampType); v1 and v2: CreateTime.
    assert got == [
        (m.offset, m.key, m.value, m.timestamp, -1 if m.timestamp < 0 else 0) for m in model
    ]


@pytest.mark.parametrize("map_bytes", [64 << 20, 24 * 12], ids=["partition", "aggregated"])
def test_compact_of_an_old_partition_writes_what_the_core_cleaner_writes(
    spark: SparkSession, tmp_path: Path, map_bytes: int
) -> None:
    """Legacy segments, the first two already clean (a checkpoint) and old enough that their
    v0/v1 tombstones are past the legacy horizon: Spark's compact (whole partition on one
    executor, or the aggregated map) writes the core cleaner's bytes."""
    config = LogConfig.from_topic_config(COMPACTED)
    source = tmp_path / "source"
    directory = source / "profiles-0"
    offset = 0
    for index, (magic, codec) in enumerate([(0, 1), (0, 0), (1, 2), (1, 3), (0, 3)]):
        messages = [
            (START_MS + offset + i, b"k%d" % (i % 7), None if i % 5 == 2 else b"v%d" % i)
            for i in range(14)
        ]
        path = write_segment(directory, offset, [kp_entry(magic, codec, messages, offset)])
        when = (START_MS - 600_000 + index * 120_000) / 1000
        os.utime(path, (when, when))
        offset += len(messages)
    write_segment(
        directory, offset, [build_batch([NewRecord(b"k", b"v", START_MS)], base_offset=offset)]
    )
    (source / "cleaner-offset-checkpoint").write_text("0\n1\nprofiles 0 28\n")
    Log.open(directory, config, ManualClock(NOW_MS), had_clean_shutdown=False).close()
    by_core = copy_dir(source, tmp_path / "core")
    by_spark = copy_dir(source, tmp_path / "spark")
    with LogManager(
        [by_core], config_for={"profiles": config}, clock=ManualClock(NOW_MS)
    ) as manager:
        cleaner = LogCleaner(
            manager, CleanerConfig(dedupe_buffer_size=map_bytes), clock=ManualClock(NOW_MS)
        )
        assert cleaner.clean_until_done()
    compact(
        spark,
        str(by_spark),
        topics=["profiles"],
        configs={"profiles": config},
        now_ms=NOW_MS,
        map_bytes=map_bytes,
    )
    core_files = segment_files(by_core, "profiles")
    assert core_files == segment_files(by_spark, "profiles")
    assert sum(map(len, core_files.values())) < sum(
        map(len, segment_files(source, "profiles").values())
    )
