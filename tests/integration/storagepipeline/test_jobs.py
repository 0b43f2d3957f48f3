"""The ``compact``, ``snapshot`` and ``stats`` jobs, and the writer, on local[2] Spark."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import BinaryType

from storagecore import Compression, LogConfig, LogManager, ManualClock, NewRecord, pins
from storagecore.cleaner.log_cleaner import LogCleaner
from storagecore.config import CleanerConfig
from storagecore.partitioner import partition_for_key
from storagepipeline import PipelineError, jobs
from storagepipeline.compact import PHASES, compact
from storagepipeline.jobs import read_manifest, snapshot, stats
from tests.integration.storagepipeline.conftest import (
    START_MS,
    clean_and_delete_everything,
    copy_dir,
    write_log,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

NOW_MS = START_MS + 3_600_000
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": 4096, "delete.retention.ms": 1000}


def traffic(
    partitions: int, batches: int, keys: int, *, seed: int = 7, start_ms: int = START_MS
) -> dict[int, list[list[NewRecord]]]:
    rng = random.Random(seed)
    out: dict[int, list[list[NewRecord]]] = {}
    for partition in range(partitions):
        for b in range(batches):
            out.setdefault(partition, []).append(
                [
                    NewRecord(
                        key=f"user-{rng.randrange(keys)}".encode(),
                        value=None if rng.random() < 0.08 else rng.randbytes(rng.randrange(5, 60)),
                        timestamp=start_ms + b * 100 + i,
                        headers=(("n", str(b).encode()),) if i == 0 else (),
                    )
                    for i in range(4)
                ]
            )
    return out


def segment_files(data_dir: Path, topic: str) -> dict[str, bytes]:
    return {
        f"{p.parent.name}/{p.name}": p.read_bytes()
        for p in sorted(data_dir.glob(f"{topic}-*/*.log"))
    }


def core_clean(data_dir: Path, config: LogConfig, dedupe_bytes: int = 64 << 20) -> list[Any]:
    clock = ManualClock(NOW_MS)
    with LogManager([data_dir], config_for={"profiles": config}, clock=clock) as manager:
        cleaner = LogCleaner(manager, CleanerConfig(dedupe_buffer_size=dedupe_bytes), clock=clock)
        done = cleaner.clean_until_done()
        for log in manager.logs.values():
            log.delete_expired_files(force=True)
        return done


# -- compact -------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4], ids=lambda c: c.config_name)
def test_compact_writes_what_the_core_cleaner_writes(
    spark: SparkSession, tmp_path: Path, codec: Compression
) -> None:
    source = tmp_path / "source"
    config = write_log(source, "profiles", traffic(2, 120, 40), config=COMPACTED, codec=codec)
    by_core = copy_dir(source, tmp_path / "core")
    by_spark = copy_dir(source, tmp_path / "spark")
    rounds = core_clean(by_core, config)
    assert len(rounds) == 2  # one round per partition: the core cleaner can do the job
    phases: dict[str, float] = {}
    results = compact(
        spark,
        str(by_spark),
        topics=["profiles"],
        configs={"profiles": config},
        now_ms=NOW_MS,
        phases=phases,
    )
    assert [(r.topic, r.partition) for r in results] == [("profiles", 0), ("profiles", 1)]
    # The driver's clock over each phase, and the executors' own time (the benchmark's lines).
    assert list(phases) == [*PHASES[:3], "partition_seconds", "executor_span", *PHASES[3:]]
    assert all(seconds >= 0 for seconds in phases.values()) and phases["partition_seconds"] > 0
    # The executors' busy span lies within the Spark phase that holds it.
    assert 0 < phases["executor_span"] <= phases["clean"]
    core_files = segment_files(by_core, "profiles")
    spark_files = segment_files(by_spark, "profiles")
    assert core_files.keys() == spark_files.keys()
    assert core_files == spark_files  # same records, same offsets, same bytes
    assert sum(len(b) for b in spark_files.values()) < sum(
        len(b) for b in segment_files(source, "profiles").values()
    )
    checkpoint = (by_spark / "cleaner-offset-checkpoint").read_text()
    assert checkpoint == (by_core / "cleaner-offset-checkpoint").read_text()
    for result in results:
        assert result.stats["messages_read"] > result.stats["messages_written"] > 0
        # Each partition's keys fit one executor's map: cleaned there, without a shuffle.
        assert result.stats["path"] == "partition"
    # The compacted dir loads cleanly (no .cleaned/.swap left, indexes sane).
    assert not list(by_spark.glob("profiles-*/*.cleaned")) and not list(
        by_spark.glob("profiles-*/*.swap")
    )
    with LogManager([by_spark], config_for={"profiles": config}) as manager:
        assert len(manager.logs) == 2


def test_compact_beyond_one_workers_dedupe_buffer(spark: SparkSession, tmp_path: Path) -> None:
    """A partition with more dirty keys than an executor's map takes the aggregated path; in
    the same job a small partition is still cleaned whole on one executor."""
    source = tmp_path / "source"
    batches = traffic(1, 1500, 3000, seed=3) | {1: traffic(1, 60, 20, seed=4)[0]}
    config = write_log(source, "profiles", batches, config=COMPACTED)
    small_buffer = 24 * 1000  # a worker whose dedupe buffer maps at most 900 keys per round
    small = copy_dir(source, tmp_path / "small")
    first = core_clean(small, config, dedupe_bytes=small_buffer)[0]
    assert first.map_full and first.keys_in_map < 1000  # the premise: more keys than the buffer
    by_core = copy_dir(source, tmp_path / "core")
    core_clean(by_core, config)
    by_spark = copy_dir(source, tmp_path / "spark")
    results = compact(
        spark,
        str(by_spark),
        topics=["profiles"],
        configs={"profiles": config},
        now_ms=NOW_MS,
        map_bytes=small_buffer,
    )
    assert [r.stats["path"] for r in results] == ["aggregated", "partition"]
    assert results[0].stats["keys"] > 1000
    assert segment_files(by_spark, "profiles") == segment_files(by_core, "profiles")
    checkpoint = (by_spark / "cleaner-offset-checkpoint").read_text()
    assert checkpoint == (by_core / "cleaner-offset-checkpoint").read_text()


def test_a_failing_executor_leaves_the_log_as_it_was(spark: SparkSession, tmp_path: Path) -> None:
    """A batch that fails its CRC in the dirty range fails the job before any swap: every
    segment keeps its bytes and no ``.cleaned`` file is left."""
    source = tmp_path / "source"
    config = write_log(source, "profiles", traffic(2, 120, 40), config=COMPACTED)
    segments = sorted((source / "profiles-1").glob("*.log"))
    victim = segments[len(segments) // 2]
    data = bytearray(victim.read_bytes())
    data[80] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    victim.write_bytes(bytes(data))
    before = segment_files(source, "profiles")
    with pytest.raises(Exception, match="CRC|corrupt|Corrupt"):
        compact(
            spark, str(source), topics=["profiles"], configs={"profiles": config}, now_ms=NOW_MS
        )
    assert segment_files(source, "profiles") == before
    assert not list(source.glob("profiles-*/*.cleaned"))
    assert (
        not (source / "cleaner-offset-checkpoint").exists()
        or "profiles" not in (source / "cleaner-offset-checkpoint").read_text()
    )


def test_compact_refuses_a_locked_dir_and_a_delete_topic(
    spark: SparkSession, tmp_path: Path
) -> None:
    config = write_log(tmp_path, "profiles", traffic(1, 10, 5), config=COMPACTED)
    locked = "compact runs only where no worker holds the dir"
    with (
        LogManager([tmp_path], config_for={"profiles": config}),
        pytest.raises(PipelineError, match=locked),
    ):
        compact(spark, str(tmp_path), topics=["profiles"], configs={"profiles": config})
    delete = LogConfig.from_topic_config({"cleanup.policy": "delete"})
    with pytest.raises(PipelineError, match="profiles-0: cleanup.policy is delete"):
        compact(spark, str(tmp_path), topics=["profiles"], configs={"profiles": delete})
    with pytest.raises(PipelineError, match="unknown topic 'nope'"):
        compact(spark, str(tmp_path), topics=["nope"], configs={"profiles": config})


# -- snapshot ------------------------------------------------------------------------------------
def latest(
    batches: dict[int, list[list[NewRecord]]], first_offset: dict[int, int] | None = None
) -> dict[tuple[int, bytes], tuple[int, bytes | None]]:
    out: dict[tuple[int, bytes], tuple[int, bytes | None]] = {}
    for partition, partition_batches in batches.items():
        offset = (first_offset or {}).get(partition, 0)
        for batch in partition_batches:
            for record in batch:
                assert record.key is not None
                out[(partition, record.key)] = (offset, record.value)
                offset += 1
    return out


def table(
    spark: SparkSession, path: str
) -> dict[tuple[int, bytes], tuple[int, bytes | None, bool]]:
    return {
        (r["partition"], bytes(r["key"])): (
            r["offset"],
            None if r["value"] is None else bytes(r["value"]),
            r["deleted"],
        )
        for r in spark.read.parquet(path).collect()
    }


def test_snapshot_then_more_traffic_exports_only_the_changes(
    spark: SparkSession, tmp_path: Path
) -> None:
    data, out = tmp_path / "data", tmp_path / "export"
    first = traffic(2, 60, 25)
    write_log(data, "profiles", first)
    run1 = snapshot(spark, [str(data)], str(out), topics=["profiles"])
    want1 = {k: (o, v, False) for k, (o, v) in latest(first).items() if v is not None}
    assert run1.kind == "full" and table(spark, run1.path) == want1
    assert run1.end_offsets == {"profiles-0": 240, "profiles-1": 240}
    second = traffic(2, 10, 40, seed=99, start_ms=START_MS + 10**6)
    write_log(data, "profiles", second)
    run2 = snapshot(spark, [str(data)], str(out), topics=["profiles"])
    assert run2.kind == "changes" and run2.start_offsets == run1.end_offsets
    changes = table(spark, run2.path)
    want2 = {k: (o, v, v is None) for k, (o, v) in latest(second, {0: 240, 1: 240}).items()}
    assert changes == want2  # only keys written after the first run, deletes flagged
    assert run2.rows == len(want2) and run2.deletes == sum(1 for v in want2.values() if v[2])
    manifest = read_manifest(out)
    assert [r["run_id"] for r in manifest["runs"]] == ["00001-full", "00002-changes"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # nothing half-written
    run3 = snapshot(spark, [str(data)], str(out), topics=["profiles"])
    assert run3.rows == 0  # nothing new
    assert pins.pin_sets(data) == []  # each run released its read pins


def test_a_snapshot_is_one_point_in_time_while_the_worker_cleans_and_deletes(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Right after the job pinned and took its offsets, the worker cleans every sealed segment,
    moves the log start to 150 and unlinks the old files: the export is still exactly the
    state at the job's offsets (unpinned, offsets below 150 would be data loss)."""
    data, out = tmp_path / "data", tmp_path / "export"
    config = {"cleanup.policy": "compact,delete", "file.delete.delay.ms": 0}
    batches = traffic(2, 60, 25)
    write_log(data, "profiles", batches, config=config)
    real = jobs._snapshots

    def racing(*args: Any, **kwargs: Any) -> Any:
        snaps = real(*args, **kwargs)
        clean_and_delete_everything(data, "profiles", config)
        return snaps

    monkeypatch.setattr(jobs, "_snapshots", racing)
    run = snapshot(spark, [str(data)], str(out), topics=["profiles"])
    want = {k: (o, v, False) for k, (o, v) in latest(batches).items() if v is not None}
    assert table(spark, run.path) == want
    assert run.start_offsets == {"profiles-0": 0, "profiles-1": 0}
    assert pins.pin_sets(data) == []


# -- stats ---------------------------------------------------------------------------------------
def test_stats_per_partition(spark: SparkSession, tmp_path: Path) -> None:
    batches = traffic(2, 50, 30)
    config = write_log(tmp_path, "profiles", batches, config=COMPACTED)
    rows = stats(
        spark, [str(tmp_path)], topics=["profiles"], output=str(tmp_path / "stats.parquet")
    )
    for row in rows:
        records = [r for b in batches[row["partition"]] for r in b]
        assert row["records"] == len(records) == row["log_end_offset"]
        assert row["distinct_keys"] == len({r.key for r in records})
        assert row["tombstones"] == sum(1 for r in records if r.value is None)
        assert row["dirty_ratio"] == 1.0  # never cleaned: every sealed segment is dirty
        assert row["key_size_max"] == max(len(r.key or b"") for r in records)
    assert spark.read.parquet(str(tmp_path / "stats.parquet")).count() == 2
    assert all(row["corrupt_batches"] == 0 for row in rows)
    # A corrupt batch is counted where it is, and the other figures still come out.
    segment = sorted((tmp_path / "profiles-1").glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    segment.write_bytes(bytes(data))
    damaged = {r["partition"]: r for r in stats(spark, [str(tmp_path)], topics=["profiles"])}
    assert damaged[1]["corrupt_batches"] == 1 and damaged[0]["corrupt_batches"] == 0
    assert damaged[1]["records"] == rows[1]["records"] - 4
    segment.write_bytes(bytes(data[:70]) + bytes([data[70] ^ 0xFF]) + bytes(data[71:]))
    compact(spark, str(tmp_path), topics=["profiles"], configs={"profiles": config}, now_ms=NOW_MS)
    assert all(
        row["dirty_ratio"] == 0.0 for row in stats(spark, [str(tmp_path)], topics=["profiles"])
    )
    assert pins.pin_sets(tmp_path) == []


# -- writer --------------------------------------------------------------------------------------
def test_offline_write_round_trip(spark: SparkSession, tmp_path: Path) -> None:
    rows = [
        (f"key-{i}".encode(), f"value-{i}".encode(), [("h", f"{i}".encode())]) for i in range(500)
    ]
    df = spark.createDataFrame(
        rows, "key binary, value binary, headers array<struct<key:string,value:binary>>"
    )
    (
        df.repartition(3)
        .write.format("logkeeper")
        .option("path", str(tmp_path))
        .option("topic", "loaded")
        .option("partitions", "3")
        .option("compression", "zstd")
        .option("config.segment.bytes", "8192")
        .mode("append")
        .save()
    )
    back = (
        spark.read.format("logkeeper")
        .option("path", str(tmp_path))
        .option("topic", "loaded")
        .load()
    )
    got = back.collect()
    assert len(got) == 500
    for r in got:
        assert r["partition"] == partition_for_key(bytes(r["key"]), 3)
        assert bytes(r["value"]) == b"value-" + bytes(r["key"])[4:]
        assert [(h["key"], bytes(h["value"])) for h in r["headers"]] == [("h", bytes(r["key"])[4:])]
    for partition in range(3):
        offsets = sorted(r["offset"] for r in got if r["partition"] == partition)
        assert offsets == list(range(len(offsets)))
    assert len(list(tmp_path.glob("loaded-0/*.log"))) > 1  # segment.bytes respected
    assert not (tmp_path / ".logkeeper-staging").exists()
    # Appending again continues the offsets; the log loads as a worker would load it.
    df.limit(10).write.format("logkeeper").option("path", str(tmp_path)).option(
        "topic", "loaded"
    ).mode("append").save()
    with LogManager([tmp_path]) as manager:
        assert sum(log.log_end_offset for log in manager.logs.values()) == 510


def test_a_failed_write_leaves_nothing(spark: SparkSession, tmp_path: Path) -> None:
    write_log(tmp_path, "loaded", {0: [[NewRecord(key=b"a", value=b"1")]]})
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.suffix == ".log"}

    def explode(value: bytes) -> bytes:
        if value == b"value-377":
            raise ValueError("boom at row 377")
        return value

    boom = F.udf(explode, BinaryType(), useArrow=False)
    df = spark.createDataFrame(
        [(f"value-{i}".encode(),) for i in range(600)], "value binary"
    ).repartition(4)
    with pytest.raises(Exception, match="boom at row 377"):
        df.select(boom("value").alias("value")).write.format("logkeeper").option(
            "path", str(tmp_path)
        ).option("topic", "loaded").mode("append").save()
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.suffix == ".log"}
    assert after == before
    assert not (tmp_path / ".logkeeper-staging").exists()
    # A row the writer itself rejects (partition out of range) fails the same way.
    bad = spark.createDataFrame([(b"v", 0), (b"w", 5)], "value binary, partition int")
    with pytest.raises(Exception, match="row partition 5 is out of range for topic loaded"):
        bad.write.format("logkeeper").option("path", str(tmp_path)).option("topic", "loaded").mode(
            "append"
        ).save()
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.log")} == before


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "fresh"}, "topic fresh does not exist .* give option partitions"),
        ({"topic": "loaded", "partitions": "4"}, "option partitions=4 but topic loaded has 1"),
        ({"topic": "loaded", "compression": "brotli"}, "option compression must be"),
        ({"topic": "loaded", "colour": "red"}, "unknown logkeeper write option"),
        ({"topic": "bad/name"}, "bad/name"),
        ({"topic": "loaded", "config.retention.mss": "1"}, "retention.mss"),
    ],
)
def test_bad_write_options_name_the_option(
    spark: SparkSession, tmp_path: Path, options: dict[str, str], message: str
) -> None:
    write_log(tmp_path, "loaded", {0: [[NewRecord(key=b"a", value=b"1")]]})
    writer = (
        spark.createDataFrame([(b"v",)], "value binary")
        .write.format("logkeeper")
        .option("path", str(tmp_path))
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match=message):
        writer.mode("append").save()


def test_offline_write_refuses_a_dir_a_worker_holds(spark: SparkSession, tmp_path: Path) -> None:
    write_log(tmp_path, "loaded", {0: [[NewRecord(key=b"a", value=b"1")]]})
    with LogManager([tmp_path]), pytest.raises(Exception, match="kafka.bootstrap.servers"):
        spark.createDataFrame([(b"v",)], "value binary").write.format("logkeeper").option(
            "path", str(tmp_path)
        ).option("topic", "loaded").mode("append").save()


def test_manifest_json_is_readable(tmp_path: Path) -> None:
    (tmp_path / "_manifest.json").write_text(json.dumps({"version": 99, "runs": []}))
    with pytest.raises(PipelineError, match="unknown version 99"):
        read_manifest(tmp_path)
