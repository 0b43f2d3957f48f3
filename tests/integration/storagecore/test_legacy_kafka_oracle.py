"""Kafka's own record classes as the oracle for legacy v0/v1 data, both ways (issue 21, point 5).

Kafka's ``MemoryRecordsBuilder`` (kafka-clients 4.3.1 still writes magic 0 and 1) builds a
segment of every variant; storagecore loads it beside a v2 batch and reads exactly what Kafka's
``FileRecords`` reads. storagecore's cleaner then compacts it; Kafka reads the cleaned segment
exactly as storagecore does, and Kafka's DumpLogSegments accepts the files (deep iteration,
index verification).
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest

from storagecore import Log, LogConfig, ManualClock, NewRecord, build_batch
from storagecore.cleaner import Cleaner, CleanRequest
from storagecore.cleaner.offset_map import SkimpyOffsetMap
from storagecore.records.legacy import LegacyRecordBatch
from tests.kafka_support import dump_log_segments
from tests.kafka_support.java_client import java_client

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        bool(dump_log_segments.missing_tools()),
        reason=f"needs {dump_log_segments.missing_tools()} for Kafka's record classes",
    ),
]

START_MS = 1_700_000_000_000
COMPACT = LogConfig(cleanup_policy=("compact",), index_interval_bytes=64, file_delete_delay_ms=0)
#: magic:codec:timestampType:count:keys, one MemoryRecordsBuilder each (offsets follow on).
SPECS = [
    "0:none:CreateTime:4:3", "0:gzip:CreateTime:9:4", "0:snappy:CreateTime:7:3",
    "0:lz4:CreateTime:6:5", "1:none:CreateTime:3:2", "1:gzip:CreateTime:8:3",
    "1:snappy:LogAppendTime:6:4", "1:lz4:CreateTime:40:6", "1:lz4:LogAppendTime:5:2",
    "0:gzip:CreateTime:12:2",
]  # fmt: skip
_DUMP_ENTRY = re.compile(r"^offset: (\d+) position: \d+ .* magic: ([01]) .* isvalid: (\w+)$")
Row = tuple[int, int, bytes | None, bytes | None]


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def kafka_read(path: Path) -> tuple[list[dict[str, Any]], list[Row]]:
    answer = java_client("read", path, program="LegacyRecords")
    rows = [
        (r["offset"], r["timestamp"], _bytes(r["key"]), _bytes(r["value"]))
        for r in answer["records"]
    ]
    return answer["batches"], rows


def ours(log: Log) -> list[Row]:
    return [(r.offset, r.timestamp, r.key, r.value) for r in log.records()]


def kafka_segment(directory: Path) -> tuple[Path, int]:
    directory.mkdir(parents=True)
    path = directory / "00000000000000000000.log"
    specs = []
    offset = 0
    for index, spec in enumerate(SPECS):
        magic, codec, ts_type, count, keys = spec.split(":")
        specs.append(f"{magic}:{codec}:{ts_type}:{offset}:{count}:{keys}:{START_MS + index * 1000}")
        offset += int(count)
    java_client("write", path, *specs, program="LegacyRecords")
    return path, offset


def test_kafka_built_legacy_segments_read_and_clean_identically(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    path, end = kafka_segment(directory)
    kafka_batches, kafka_rows = kafka_read(path)
    assert {(b["magic"], b["codec"]) for b in kafka_batches} >= {
        (0, "none"), (0, "gzip"), (0, "snappy"), (0, "lz4"),
        (1, "none"), (1, "gzip"), (1, "snappy"), (1, "lz4"),
    }  # fmt: skip
    assert len(kafka_rows) == end
    # The upgrade: v2 batches follow in a segment of their own (the active one).
    upgraded = directory / f"{end:020d}.log"
    upgraded.write_bytes(
        build_batch([NewRecord(b"k0", b"new", START_MS + 99_000)], base_offset=end)
    )
    clock = ManualClock(START_MS + 200_000)
    log = Log.open(directory, COMPACT, clock, had_clean_shutdown=False)
    try:
        assert ours(log)[:end] == kafka_rows
        # Our view of each entry agrees with Kafka's batch: magic, last offset, codec, type.
        entries = [b for _, b in log.segments[0].log.batches()]
        assert [
            (b.magic, b.last_offset, b.compression.config_name, b.max_timestamp) for b in entries
        ] == [(b["magic"], b["lastOffset"], b["codec"], b["maxTimestamp"]) for b in kafka_batches]
        assert all(isinstance(b, LegacyRecordBatch) for b in entries)

        stats = Cleaner(offset_map=SkimpyOffsetMap(64 * 1024)).clean(CleanRequest(log, 0, end))
        assert stats.batches_rebuilt > 0 and stats.messages_written < stats.messages_read
        cleaned_path = log.segments[0].log.path
        cleaned_rows = ours(log)[:-1]
    finally:
        log.close()
    # Kafka reads the cleaner's output as we do: rewritten wrappers, verbatim entries, offsets.
    cleaned_batches, kafka_cleaned = kafka_read(cleaned_path)
    assert kafka_cleaned == cleaned_rows
    assert {b["magic"] for b in cleaned_batches} == {0, 1}
    # The model: the latest record per key (tombstones too: nothing is clean yet, so the
    # legacy delete horizon is 0), keyless messages dropped.
    latest = {key: offset for offset, _, key, _ in kafka_rows if key is not None}
    assert cleaned_rows == [
        row for row in kafka_rows if row[2] is not None and latest[row[2]] == row[0]
    ]

    # Kafka's DumpLogSegments accepts the cleaned files: every entry valid, every record there.
    segments = sorted(directory.glob("*.log"))
    deep = dump_log_segments.dump(segments, "--deep-iteration", "--print-data-log")
    entries_seen = [m for line in deep.stdout.splitlines() if (m := _DUMP_ENTRY.match(line))]
    assert entries_seen and all(m.group(3) == "true" for m in entries_seen)
    assert "Found" not in deep.stdout and "invalid" not in deep.stdout.lower().replace(
        "isvalid", ""
    )
    offsets = [int(m.group(1)) for m in re.finditer(r"^\| offset: (\d+)", deep.stdout, re.M)]
    assert offsets == [row[0] for row in cleaned_rows] + [end]
    indexes = sorted(directory.glob("*.index"))
    verified = dump_log_segments.dump(indexes, "--verify-index-only")
    assert verified.stderr == ""
    assert "Mismatches" not in verified.stdout and "not found" not in verified.stdout.lower()
