"""The ``logkeeper`` data source on local[2] Spark, against logs written by the storage core.

Every expectation comes from a model of what was written (offsets assigned from 0 in append
order), never from the reader itself.
"""

from __future__ import annotations

import datetime
import errno
import json
import logging
import random
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from storagecore import Compression, NewRecord, TopicPartition, files, pins
from storagecore.records import layout
from storagepipeline import plan, read_skip_report
from storagepipeline.logdirs import Pinner, snapshot_partition
from storagepipeline.source import SCHEMA, LogkeeperInputPartition, LogkeeperReader
from tests.integration.storagepipeline.conftest import (
    START_MS,
    clean_and_delete_everything,
    write_log,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

Model = dict[
    int, list[tuple[int, bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...]]]
]


def build(
    data_dir: Path,
    topic: str,
    *,
    partitions: int = 2,
    batches: int = 40,
    per_batch: int = 5,
    keys: int = 9,
    codec: Compression = Compression.NONE,
    config: dict[str, object] | None = None,
    seed: int = 1,
    keyless: float = 0.03,
) -> Model:
    """A log with headers, tombstones, a keyless record now and then; returns the model."""
    rng = random.Random(seed)
    written: dict[int, list[list[NewRecord]]] = {}
    model: Model = {}
    for partition in range(partitions):
        offset = 0
        for b in range(batches):
            batch: list[NewRecord] = []
            for i in range(per_batch):
                key = None if rng.random() < keyless else f"k{rng.randrange(keys)}".encode()
                value = None if (key is not None and rng.random() < 0.1) else rng.randbytes(20)
                headers = (("trace", f"{b}.{i}".encode()), ("empty", None)) if i % 2 else ()
                timestamp = START_MS + b * 1000 + i
                batch.append(NewRecord(key=key, value=value, timestamp=timestamp, headers=headers))
                model.setdefault(partition, []).append((offset, key, value, timestamp, headers))
                offset += 1
            written.setdefault(partition, []).append(batch)
    write_log(data_dir, topic, written, codec=codec, config=config)
    return model


def rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(
        (
            r["partition"],
            r["offset"],
            None if r["key"] is None else bytes(r["key"]),
            None if r["value"] is None else bytes(r["value"]),
            int(r["timestamp"].replace(tzinfo=datetime.UTC).timestamp() * 1000),
            tuple(
                (h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"]
            ),
        )
        for r in df.collect()
    )


def expected(model: Model, keep: Any = lambda p, o: True) -> list[tuple[Any, ...]]:
    return sorted(
        (p, o, k, v, t, h)
        for p, records in model.items()
        for (o, k, v, t, h) in records
        if keep(p, o)
    )


def read(spark: SparkSession, data_dir: Path, topic: str, **options: str) -> Any:
    reader = spark.read.format("logkeeper").option("path", str(data_dir)).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


# -- formats -------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.config_name)
def test_every_codec_reads_back_exactly(
    spark: SparkSession, tmp_path: Path, codec: Compression
) -> None:
    model = build(tmp_path, "orders", codec=codec)
    df = read(spark, tmp_path, "orders")
    assert df.schema == SCHEMA
    assert rows(df) == expected(model)
    # One Spark partition per topic-partition (Spark's Kafka source), however many segments.
    segments = len(list(tmp_path.glob("orders-*/*.log")))
    assert segments > 2 and df.rdd.getNumPartitions() == 2
    assert {r["timestampType"] for r in df.select("timestampType").collect()} == {0}
    assert {r["topic"] for r in df.select("topic").distinct().collect()} == {"orders"}


def test_log_append_time_topics_report_timestamp_type_1(
    spark: SparkSession, tmp_path: Path
) -> None:
    build(
        tmp_path,
        "appended",
        partitions=1,
        batches=3,
        config={"message.timestamp.type": "LogAppendTime"},
    )
    df = read(spark, tmp_path, "appended")
    assert {r["timestampType"] for r in df.collect()} == {1}


def test_several_data_dirs_and_a_topic_pattern(spark: SparkSession, tmp_path: Path) -> None:
    a = build(tmp_path / "vol-a", "orders.eu", partitions=1, batches=5)
    b = build(tmp_path / "vol-b", "orders.us", partitions=2, batches=5, seed=2)
    build(tmp_path / "vol-b", "payments", partitions=1, batches=5, seed=3)
    df = (
        spark.read.format("logkeeper")
        .option("path", f"{tmp_path / 'vol-a'},{tmp_path / 'vol-b'}")
        .option("topicPattern", r"orders\..*")
        .load()
    )
    got = {(r["topic"], r["partition"], r["offset"]) for r in df.collect()}
    want = {("orders.eu", p, o) for p, recs in a.items() for o, *_ in recs}
    want |= {("orders.us", p, o) for p, recs in b.items() for o, *_ in recs}
    assert got == want
    two = (
        spark.read.format("logkeeper")
        .option("path", f"{tmp_path / 'vol-a'},{tmp_path / 'vol-b'}")
        .option("subscribe", "orders.eu,payments")
        .load()
    )
    assert {r["topic"] for r in two.select("topic").distinct().collect()} == {
        "orders.eu",
        "payments",
    }


# -- offsets options (Spark's Kafka source semantics) -------------------------------------------
def test_starting_and_ending_offsets_json(spark: SparkSession, tmp_path: Path) -> None:
    model = build(tmp_path, "orders")
    starting = json.dumps({"orders": {"0": 23, "1": -2}})
    ending = json.dumps({"orders": {"0": 150, "1": -1}})
    df = read(spark, tmp_path, "orders", startingOffsets=starting, endingOffsets=ending)
    assert rows(df) == expected(model, lambda p, o: (23 <= o < 150) if p == 0 else True)


def test_starting_timestamp_is_the_first_offset_at_or_after_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    model = build(tmp_path, "orders")
    cut = START_MS + 17 * 1000 + 2  # batch 17, record 2
    df = read(spark, tmp_path, "orders", startingTimestamp=str(cut))
    # Timestamps increase with offsets here, so "from the first offset >= cut" is every record
    # whose timestamp is >= cut.
    assert rows(df) == expected(model, lambda p, o: model[p][o][3] >= cut)
    after_all = START_MS + 10**9
    with pytest.raises(Exception, match="no record has a timestamp >= startingTimestamp"):
        read(spark, tmp_path, "orders", startingTimestamp=str(after_all)).collect()
    empty = read(
        spark,
        tmp_path,
        "orders",
        startingTimestamp=str(after_all),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert empty.count() == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": "latest"}, "startingOffsets=latest is not allowed"),
        ({"endingOffsets": "earliest"}, "endingOffsets=earliest is not allowed"),
        ({"startingOffsets": '{"orders":{"0":1}}'}, "missing: orders-1"),
        ({"startingOffsets": '{"orders":{"0":1,"1":2,"7":0}}'}, "orders-7"),
        ({"endingOffsets": '{"orders":{"0":100000,"1":1}}'}, "beyond the log end offset"),
        ({"startingOffsets": "{nope"}, "startingOffsets must be earliest, latest or JSON"),
        ({"colour": "blue"}, "unknown logkeeper read option"),
        ({"view": "compacted"}, "view must be one of log, latest"),
        ({"failOnCorruption": "maybe"}, "failOnCorruption must be true or false"),
        ({"minPartitions": "0"}, "option minPartitions must be >= 1, got 0"),
        ({"maxRecordsPerPartition": "ten"}, "option maxRecordsPerPartition must be an integer"),
    ],
)
def test_bad_options_name_the_option(
    spark: SparkSession, tmp_path: Path, options: dict[str, str], message: str
) -> None:
    build(tmp_path, "orders", batches=5)
    with pytest.raises(Exception, match=message):
        read(spark, tmp_path, "orders", **options).collect()


def test_unknown_topic_is_named(spark: SparkSession, tmp_path: Path) -> None:
    build(tmp_path, "orders", batches=2)
    with pytest.raises(Exception, match="unknown topic 'ordres'"):
        read(spark, tmp_path, "ordres").collect()


def test_options_are_checked_without_spark(tmp_path: Path) -> None:
    with pytest.raises(plan.PipelineError, match="option path is required"):
        plan.parse_read_options({"topic": "x"})
    with pytest.raises(plan.PipelineError, match="topic .* or topicPattern is required"):
        plan.parse_read_options({"path": str(tmp_path)})


# -- pushdown ------------------------------------------------------------------------------------
def test_pushdown_prunes_the_plan_by_partition_offset_and_timestamp(
    spark: SparkSession, tmp_path: Path
) -> None:
    # An index entry per batch, so the time index can skip records inside a segment.
    model = build(tmp_path, "orders", batches=80, config={"index.interval.bytes": 1})
    segments = len(list(tmp_path.glob("orders-*/*.log")))

    def fresh() -> Any:  # one load per query: see PushdownReader on pyspark's plan cache
        return read(spark, tmp_path, "orders", pushdown="true")

    narrowed = fresh().where("partition = 1 AND offset >= 300 AND offset < 320")
    assert rows(narrowed) == expected(model, lambda p, o: p == 1 and 300 <= o < 320)
    # One task, for partition 1; its segments are only those holding offsets [300, 320).
    assert narrowed.rdd.getNumPartitions() == 1
    push = plan.Pushdown(partitions={1}, offset_low=300, offset_high=320)
    spec = plan.parse_read_options({"path": str(tmp_path), "topic": "orders", "pinMs": "0"})
    (unit,) = plan.plan_read(spec, push)
    assert len(unit.refs) <= 2 < segments
    assert (unit.refs[0].start_offset, unit.refs[-1].end_offset) == (300, 320)
    cut = datetime.datetime.fromtimestamp((START_MS + 72_000) / 1000, datetime.UTC)
    recent = fresh().where(f"timestamp >= '{cut.isoformat()}'")
    assert rows(recent) == expected(model, lambda p, o: model[p][o][3] >= START_MS + 72_000)
    # The time index drops older segments and, inside the first one kept, older records.
    low = plan.Pushdown(timestamp_low_ms=START_MS + 72_000)
    units = plan.plan_read(spec, low)
    assert sum(len(unit.refs) for unit in units) < segments
    firsts = [unit.refs[0] for unit in units]
    assert any(first.start_offset > first.base_offset for first in firsts)
    for unit, first in zip(units, firsts, strict=True):
        assert model[unit.partition][first.start_offset - 1][3] < START_MS + 72_000
    assert fresh().where("offset > 5 AND offset < 3").count() == 0
    assert fresh().where("topic = 'elsewhere'").count() == 0


def test_without_pushdown_a_reused_dataframe_stays_correct(
    spark: SparkSession, tmp_path: Path
) -> None:
    model = build(tmp_path, "orders", batches=20)
    df = read(spark, tmp_path, "orders")
    assert rows(df.where("partition = 1 AND offset >= 30")) == expected(
        model, lambda p, o: p == 1 and o >= 30
    )
    assert rows(df) == expected(model)  # the filtered query did not narrow this one


def test_pyspark_reuses_a_pushed_down_plan_which_is_why_pushdown_is_opt_in(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A canary for the reason ``pushdown`` is opt-in: pyspark 4.3 stores the read planned
    during filter pushdown on the loaded DataFrame's provider (``PythonDataSourceV2.setReadInfo``),
    so a later query on the same DataFrame without pushable filters reuses the narrowed plan.
    Spark's main branch keeps that read info on the scan instead. When a pyspark upgrade makes
    this test fail, the leak is gone: make pushdown the default and drop this test."""
    model = build(tmp_path, "orders", batches=20)
    df = read(spark, tmp_path, "orders", pushdown="true")
    narrowed = rows(df.where("partition = 1 AND offset >= 30"))
    assert narrowed == expected(model, lambda p, o: p == 1 and o >= 30)
    reused = rows(df)
    if reused == expected(model):
        pytest.fail("this pyspark no longer leaks a pushed-down plan: make pushdown the default")
    assert reused == narrowed


# -- the compacted view --------------------------------------------------------------------------
def latest_model(model: Model) -> list[tuple[Any, ...]]:
    result = []
    for p, records in model.items():
        last: dict[bytes, tuple[Any, ...]] = {}
        for record in records:
            if record[1] is not None:
                last[record[1]] = record
        result.extend((p, *r) for r in last.values() if r[2] is not None)
    return sorted(result)


def test_latest_view_keeps_the_last_record_per_key_without_tombstones(
    spark: SparkSession, tmp_path: Path
) -> None:
    model = build(tmp_path, "profiles", keys=30, batches=60)
    df = read(spark, tmp_path, "profiles", view="latest")
    assert rows(df) == latest_model(model)
    # An offset lower bound is pushed down; an upper bound is not (it would change "latest").
    later = df.where("offset >= 100")
    assert rows(later) == [r for r in latest_model(model) if r[1] >= 100]
    earlier = df.where("offset < 100")
    assert rows(earlier) == [r for r in latest_model(model) if r[1] < 100]


# -- corruption ----------------------------------------------------------------------------------
def test_a_corrupt_batch_fails_the_read_with_file_and_position_or_is_skipped(
    spark: SparkSession, tmp_path: Path
) -> None:
    model = build(tmp_path, "orders", partitions=1, batches=30)
    segment = sorted((tmp_path / "orders-0").glob("*.log"))[1]
    data = bytearray(segment.read_bytes())
    length = int.from_bytes(data[8:12], "big") + layout.LOG_OVERHEAD
    second = length  # the second batch of this segment
    data[second + layout.RECORDS_OFFSET + 3] ^= 0xFF
    segment.write_bytes(bytes(data))
    with pytest.raises(Exception, match=f"{segment.name} at position {second}: .*CRC mismatch"):
        read(spark, tmp_path, "orders").collect()
    report = tmp_path / "skipped"
    skipped = read(spark, tmp_path, "orders", failOnCorruption="false", skipReportPath=str(report))
    base = int(segment.name.split(".")[0])
    # Which offsets the second batch of the segment held: 5 records per batch.
    lost = set(range(base + 5, base + 10))
    assert rows(skipped) == expected(model, lambda p, o: o not in lost)
    # The tasks' skips reach the driver through the report directory: one file per read task,
    # named by its planned unit (a retried task replaces its own file, never counts twice).
    summary = read_skip_report(report)
    assert summary["corrupt_batches"] == 1 and summary["lost_offsets"] == 0
    assert summary["partitions"] == {
        "orders-0": {"corrupt_batches": 1, "lost_offsets": 0, "fallbacks": 0}
    }
    (message,) = summary["skipped"]
    assert f"{segment} at position {second}: " in message and "CRC mismatch" in message
    assert read_skip_report(tmp_path / "nothing-skipped")["corrupt_batches"] == 0


# -- snapshot consistency (the reader driven directly, without Spark) ---------------------------
def _read_all(reader: LogkeeperReader, parts: list[Any]) -> list[tuple[int, int, bytes | None]]:
    out = []
    for part in parts:
        for batch in reader.read(part):
            d = batch.to_pydict()
            out.extend(zip(d["partition"], d["offset"], d["value"], strict=True))
    return sorted(out)


def test_a_planned_read_survives_cleaning_and_deletion_of_its_segments(tmp_path: Path) -> None:
    from storagecore import LogConfig, LogManager, ManualClock
    from storagecore.cleaner.log_cleaner import LogCleaner
    from storagecore.config import CleanerConfig

    """Unpinned (pinMs=0, as on a read-only mount): exact within file.delete.delay.ms, then
    the successors, then data loss."""
    config = {"cleanup.policy": "compact,delete", "file.delete.delay.ms": 60_000}
    model = build(tmp_path, "profiles", partitions=1, keys=5, batches=60, config=config, keyless=0)
    spec = plan.parse_read_options({"path": str(tmp_path), "topic": "profiles", "pinMs": "0"})
    reader = LogkeeperReader(spec, SCHEMA)
    parts = [p for p in reader.partitions() if isinstance(p, LogkeeperInputPartition)]
    before = _read_all(reader, parts)
    assert before == sorted((0, o, v) for o, _k, v, _t, _h in model[0])
    # The worker's cleaner rewrites every sealed segment, then retention moves the start.
    log_config = LogConfig.from_topic_config({"segment.bytes": 4096, **config})
    clock = ManualClock(START_MS + 10**6)
    with LogManager([tmp_path], config_for={"profiles": log_config}, clock=clock) as manager:
        LogCleaner(manager, CleanerConfig(), clock=clock).clean_until_done()
        log = manager.get_log(next(iter(manager.logs)))
        assert list(tmp_path.glob("profiles-0/*.deleted")), "the cleaner renamed old segments"
        # Within file.delete.delay.ms: the planned read sees exactly the planned bytes.
        assert _read_all(reader, parts) == before
        log.delete_expired_files(force=True)
        # After it: the cleaned successors (same offsets, fewer records) are read instead.
        after = _read_all(reader, parts)
        assert set(after) < set(before) and after
        assert all(o < 300 for _p, o, _v in after)
        log.maybe_increment_log_start_offset(150, "test")
        log.delete_old_segments()
        log.delete_expired_files(force=True)
    with pytest.raises(plan.DataLossError, match="were deleted"):
        _read_all(reader, parts)
    lenient = LogkeeperReader(
        plan.parse_read_options(
            {
                "path": str(tmp_path),
                "topic": "profiles",
                "failOnDataLoss": "false",
                "pinMs": "0",
                "skipReportPath": str(tmp_path / "report"),
            }
        ),
        SCHEMA,
    )
    remaining = _read_all(lenient, parts)
    assert remaining and all(o >= 150 for _p, o, _v in remaining)
    lost = read_skip_report(tmp_path / "report")
    # Lost: the planned offsets below the first segment retention kept (its base <= 150).
    first_kept = min(int(p.name[:20]) for p in (tmp_path / "profiles-0").glob("*.log"))
    assert 0 < first_kept <= 150
    assert lost["lost_offsets"] == first_kept == lost["partitions"]["profiles-0"]["lost_offsets"]
    assert all("were deleted (retention or delete-records)" in m for m in lost["skipped"])
    assert not (tmp_path / files.PINS_DIR).exists()  # pinMs=0 writes nothing


def test_a_pinned_read_sees_the_planned_bytes_after_cleaning_and_retention(tmp_path: Path) -> None:
    """The default: the plan hard-links its segments into a pin set (storagecore.pins), so the
    read is exact however long after planning it runs, until the pin set's lease passes."""
    config = {"cleanup.policy": "compact,delete", "file.delete.delay.ms": 60_000}
    model = build(tmp_path, "profiles", partitions=1, keys=5, batches=60, config=config, keyless=0)
    reader = LogkeeperReader(
        plan.parse_read_options({"path": str(tmp_path), "topic": "profiles"}), SCHEMA
    )
    parts = [p for p in reader.partitions() if isinstance(p, LogkeeperInputPartition)]
    assert all(ref.pin_path for part in parts for ref in part.unit.refs)
    before = _read_all(reader, parts)
    assert before == sorted((0, o, v) for o, _k, v, _t, _h in model[0])
    clean_and_delete_everything(tmp_path, "profiles", config)
    assert _read_all(reader, parts) == before  # not the successors, no data loss
    (pin_set,) = pins.pin_sets(tmp_path)
    lease_left_ms = pin_set.expires_ms - time.time() * 1000
    assert plan.DEFAULT_PIN_MS - 60_000 <= lease_left_ms <= plan.DEFAULT_PIN_MS
    assert pins.pinned_bytes(tmp_path) > 0
    # The lease passed (the worker's retention task, or the next read's planning, sweeps it).
    pins.sweep_expired(tmp_path, pin_set.expires_ms + 1)
    with pytest.raises(plan.DataLossError, match="were deleted"):
        _read_all(reader, parts)


def test_a_data_dir_that_cannot_hold_links_is_read_unpinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A read-only mount (EROFS on link; as root the test cannot make one, so the error is
    injected at os.link): one warning naming the dir, the plan has no pins, the rows are
    exact, and the pin set that could be created is removed again."""
    model = build(tmp_path, "orders", batches=10)

    def read_only(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(pins.os, "link", read_only)
    reader = LogkeeperReader(
        plan.parse_read_options({"path": str(tmp_path), "topic": "orders"}), SCHEMA
    )
    with caplog.at_level(logging.WARNING):
        parts = [p for p in reader.partitions() if isinstance(p, LogkeeperInputPartition)]
    assert [r.message for r in caplog.records].count(
        f"{tmp_path} cannot hold read pins ([Errno 30] Read-only file system): reading "
        "unpinned, exact only within file.delete.delay.ms of planning"
    ) == 1
    assert parts and not any(ref.pin_path for part in parts for ref in part.unit.refs)
    assert _read_all(reader, parts) == sorted(
        (p, o, v) for p, records in model.items() for o, _k, v, _t, _h in records
    )
    assert pins.pin_sets(tmp_path) == []


def test_a_job_pin_set_freezes_the_listing_for_a_later_read(tmp_path: Path) -> None:
    """``pinSets``: a job pins on its driver, and the data source plans from those links,
    so the job's offsets and the records read are one point in time."""
    config = {"cleanup.policy": "compact,delete", "file.delete.delay.ms": 60_000}
    model = build(tmp_path, "profiles", partitions=1, keys=5, batches=60, config=config, keyless=0)
    pinner = Pinner(plan.DEFAULT_PIN_MS)
    snap = snapshot_partition(TopicPartition("profiles", 0), tmp_path / "profiles-0", pinner)
    clean_and_delete_everything(tmp_path, "profiles", config)
    options = {"path": str(tmp_path), "topic": "profiles", "pinSets": pinner.option_value()}
    reader = LogkeeperReader(plan.parse_read_options(options), SCHEMA)
    parts = [p for p in reader.partitions() if isinstance(p, LogkeeperInputPartition)]
    planned = [ref for part in parts for ref in part.unit.refs]
    pinned = [ref for ref in snap.segments if ref.start_offset < ref.end_offset]
    assert [(r.base_offset, r.inode) for r in planned] == [(r.base_offset, r.inode) for r in pinned]
    # The live log starts at 150 now and was cleaned; the read is the pinned state, all of it.
    assert _read_all(reader, parts) == sorted((0, o, v) for o, _k, v, _t, _h in model[0])
    assert len(pins.pin_sets(tmp_path)) == 1  # the read used the job's set, made none of its own
    pinner.release()
    assert pins.pin_sets(tmp_path) == []
    with pytest.raises(plan.PipelineError, match="option pinSets: .*released or expired"):
        LogkeeperReader(plan.parse_read_options(options), SCHEMA).partitions()
