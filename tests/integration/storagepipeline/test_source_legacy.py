"""The ``logkeeper`` data source over an old partition: v0/v1 messages (kafka-python's legacy
builder) then v2 batches, read as Spark's Kafka source shows them (issue 21, point 4)."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from storagecore import LogConfig, ManualClock, NewRecord, build_batch
from storagecore.log import Log
from tests.integration.storagepipeline.conftest import START_MS
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
