"""The pipeline beside a real ``logkeeper serve`` process: writes through its Kafka port, reads
racing its cleaner and retention, and the ``logkeeper spark`` command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyiceberg.catalog import load_catalog
from pyspark.sql import SparkSession

from storagecore import NewRecord
from storagecore.partitioner import partition_for_key
from storagepipeline import iceberg
from tests.integration.storagepipeline.conftest import write_log
from tests.integration.storageworker.test_serve import SETTINGS, Served, declare, topic

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).parents[3]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    declare(
        tmp_path,
        topic("events", 3, {"segment.bytes": 16384}),
        topic(
            "profiles",
            2,
            {
                "cleanup.policy": "compact",
                "segment.bytes": 8192,
                "min.cleanable.dirty.ratio": 0.01,
                "file.delete.delay.ms": 0,  # replaced segments vanish at once: the hard case
                "delete.retention.ms": 0,
            },
        ),
    )
    server = Served(tmp_path, "--kafka-port", "0")
    yield server
    assert server.terminate() == 0


def test_write_through_a_running_worker(spark: SparkSession, served: Served) -> None:
    rows = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(300)]
    df = spark.createDataFrame(rows, "key binary, value binary").repartition(2)
    df.write.format("logkeeper").option("kafka.bootstrap.servers", served.kafka_address).option(
        "topic", "events"
    ).option("compression", "lz4").mode("append").save()
    # Read the worker's live data dir while it runs (no lock is taken by reads).
    back = (
        spark.read.format("logkeeper")
        .option("path", str(served.root / "data"))
        .option("topic", "events")
        .load()
        .collect()
    )
    assert sorted((bytes(r["key"]), bytes(r["value"])) for r in back) == sorted(rows)
    assert all(r["partition"] == partition_for_key(bytes(r["key"]), 3) for r in back)


def test_reads_racing_the_workers_cleaner_are_consistent(
    spark: SparkSession, served: Served
) -> None:
    # What the producer wrote, by (partition, offset), from its delivery reports.
    written: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    lock = threading.Lock()
    stop = threading.Event()

    failures: list[object] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            failures.append(err)
            return
        with lock:
            written[(msg.partition(), msg.offset())] = (msg.key(), msg.value())  # type: ignore[attr-defined]

    def produce() -> None:
        producer = Producer(
            {"bootstrap.servers": served.kafka_address, "linger.ms": 5, "batch.size": 4000}
        )
        i = 0
        while not stop.is_set():
            producer.produce(
                "profiles",
                key=f"user-{i % 37}".encode(),
                value=f"{i}".encode(),
                on_delivery=delivered,
            )
            i += 1
            if i % 200 == 0:
                producer.flush(10)
        producer.flush(10)

    thread = threading.Thread(target=produce)
    thread.start()
    reads = 0
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and reads < 6:
            time.sleep(1.5)
            got = (
                spark.read.format("logkeeper")
                .option("path", str(served.root / "data"))
                .option("topic", "profiles")
                .load()
                .select("partition", "offset", "key", "value")
                .collect()
            )
            with lock:
                model = dict(written)
            by_partition: dict[int, list[int]] = {}
            for r in got:
                p, o = r["partition"], r["offset"]
                by_partition.setdefault(p, []).append(o)
                # Every record read is the one written at that offset (never a torn or mixed read).
                if (p, o) in model:
                    assert model[(p, o)] == (bytes(r["key"]), bytes(r["value"]))
            for p, offsets in by_partition.items():
                assert len(offsets) == len(set(offsets)), f"partition {p}: an offset read twice"
                # Compaction never drops the latest record of a key: each key's last write at or
                # below the highest offset this read saw is present.
                top = max(offsets)
                last: dict[bytes, int] = {}
                for (mp, mo), (key, _value) in sorted(model.items()):
                    if mp == p and mo <= top:
                        last[key] = mo
                assert set(last.values()) <= set(offsets)
            reads += 1
    finally:
        stop.set()
        thread.join()
    assert reads >= 3 and not failures
    cleaned = served.partition("profiles-0")
    assert cleaned["logStartOffset"] >= 0


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "logkeeper.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )


def test_the_spark_subcommands(tmp_path: Path) -> None:
    data = tmp_path / "data"
    batches = {
        0: [
            [NewRecord(key=f"k{i % 10}".encode(), value=b"x" * 50) for i in range(5)]
            for _ in range(60)
        ]
    }
    write_log(data, "profiles", batches, config={"cleanup.policy": "compact"})
    manifest = tmp_path / "topics.yaml"
    manifest.write_text(
        topic("profiles", 1, {"cleanup.policy": "compact", "segment.bytes": 4096}), encoding="utf-8"
    )
    done = run_cli("spark", "compact", "--dir", str(data), "--topics", str(manifest), "--json")
    assert done.returncode == 0, done.stderr
    (result,) = json.loads(done.stdout)
    assert result["topic"] == "profiles" and result["stats"]["messages_written"] < 300
    done = run_cli("spark", "stats", "--dir", str(data), "--topic", "profiles")
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.strip().splitlines()[:2]
    assert header.split()[:3] == ["topic", "partition", "records"] and row.split()[:2] == [
        "profiles",
        "0",
    ]
    done = run_cli(
        "spark",
        "snapshot",
        "--dir",
        str(data),
        "--topic",
        "profiles",
        "--output",
        str(tmp_path / "out"),
    )
    assert done.returncode == 0, done.stderr
    assert "full snapshot 00001-full: 5 row(s)" in done.stdout
    iceberg_args = ["--format", "iceberg", "--table", "exports.profiles"]
    common = ["spark", "snapshot", "--dir", str(data), "--topic", "profiles"]
    done = run_cli(*common, "--output", str(tmp_path / "ice"), *iceberg_args)
    assert done.returncode == 0, done.stderr
    assert "full snapshot " in done.stdout and ": 5 row(s), 0 delete(s)" in done.stdout
    catalog = load_catalog("logkeeper", **iceberg.default_catalog(tmp_path / "ice"))
    assert catalog.load_table("exports.profiles").scan().to_arrow().num_rows == 5
    bad = run_cli(*common, "--output", str(tmp_path / "ice"), *iceberg_args, "--catalog", "uri")
    assert bad.returncode == 2 and "catalog option 'uri': give KEY=VALUE" in bad.stderr
    both = run_cli("spark", "compact", "--dir", str(data), "--worker", "http://127.0.0.1:1")
    assert both.returncode == 2 and "exactly one of --dir (offline) and --worker" in both.stderr
    bad = run_cli("spark", "stats", "--dir", str(data), "--topic", "nope")
    assert bad.returncode == 2 and "unknown topic 'nope'" in bad.stderr
