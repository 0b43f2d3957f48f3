"""The pipeline's read, ``compact`` and ``snapshot`` on a Spark standalone cluster (two
executors in their own JVMs), compared with what the storage core and local runs produce."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from pyiceberg.catalog import load_catalog
from pyspark import cloudpickle
from pyspark.sql import SparkSession

from storagepipeline import iceberg
from storagepipeline.compact import compact
from storagepipeline.jobs import snapshot
from tests.integration.sparkcluster.standalone import StandaloneCluster
from tests.integration.storagepipeline.conftest import START_MS, copy_dir, write_log
from tests.integration.storagepipeline.test_jobs import (
    COMPACTED,
    NOW_MS,
    core_clean,
    latest,
    segment_files,
    table,
    traffic,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.spark_cluster]

# The executors cannot import the tests (they run from the workers' directories, where only the
# installed packages are importable): this module's functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def executor_jvms(rows: Iterable[object]) -> Iterator[tuple[int, bool, int]]:
    """(pid of the JVM that runs this task, is it an executor, rows in the task): the JVM is the
    nearest ancestor process whose command is java."""
    import os

    count = sum(1 for _ in rows)
    pid = os.getpid()
    while pid > 1:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if command[0].endswith(b"java"):
            yield pid, b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in command, count
            return
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    yield 0, False, count


def test_the_application_runs_on_two_executor_jvms(
    cluster_spark: SparkSession, spark_cluster: StandaloneCluster
) -> None:
    apps = spark_cluster.status()["activeapps"]
    assert [(a["name"], a["cores"]) for a in apps] == [("logkeeper-cluster-tests", 2)]
    sc = cluster_spark.sparkContext
    ran = sc.parallelize(range(8), 8).mapPartitions(executor_jvms).collect()
    assert {is_executor for _pid, is_executor, _n in ran} == {True}
    assert len({pid for pid, _e, _n in ran}) == 2  # both executors took tasks


def test_a_read_on_the_cluster(cluster_spark: SparkSession, tmp_path: Path) -> None:
    batches = traffic(4, 30, 50)
    write_log(tmp_path, "profiles", batches)
    df = (
        cluster_spark.read.format("logkeeper")
        .option("path", str(tmp_path))
        .option("topic", "profiles")
        .load()
    )
    got = sorted((r["partition"], r["offset"], bytes(r["key"])) for r in df.collect())
    want = sorted(
        (p, o, record.key)
        for p, bs in batches.items()
        for o, record in enumerate(r for b in bs for r in b)
    )
    assert got == want
    # The read's tasks ran in the executors' Python workers, spread over both.
    jvms = df.rdd.mapPartitions(executor_jvms).collect()
    assert all(is_executor for _pid, is_executor, _n in jvms)
    assert len({pid for pid, _e, n in jvms if n}) == 2
    assert sum(n for _pid, _e, n in jvms) == len(want)


def test_compact_on_the_cluster_writes_what_the_core_cleaner_writes(
    cluster_spark: SparkSession, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    config = write_log(source, "profiles", traffic(2, 120, 40), config=COMPACTED)
    by_core = copy_dir(source, tmp_path / "core")
    by_cluster = copy_dir(source, tmp_path / "cluster")
    core_clean(by_core, config)
    results = compact(
        cluster_spark,
        str(by_cluster),
        topics=["profiles"],
        configs={"profiles": config},
        now_ms=NOW_MS,
    )
    assert [(r.topic, r.partition) for r in results] == [("profiles", 0), ("profiles", 1)]
    assert segment_files(by_cluster, "profiles") == segment_files(by_core, "profiles")
    checkpoint = (by_cluster / "cleaner-offset-checkpoint").read_text()
    assert checkpoint == (by_core / "cleaner-offset-checkpoint").read_text()


def test_snapshot_on_the_cluster_parquet_and_iceberg(
    cluster_spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    first = traffic(2, 40, 25)
    write_log(data, "profiles", first)
    run = snapshot(cluster_spark, [str(data)], str(tmp_path / "parquet"), topics=["profiles"])
    want = {k: (o, v, False) for k, (o, v) in latest(first).items() if v is not None}
    assert run.kind == "full" and table(cluster_spark, run.path) == want

    out = tmp_path / "iceberg"
    runs = [
        snapshot(cluster_spark, [str(data)], str(out), topics=["profiles"], table_format="iceberg")
    ]
    second = traffic(2, 10, 40, seed=99, start_ms=START_MS + 10**6)
    write_log(data, "profiles", second)
    runs.append(
        snapshot(cluster_spark, [str(data)], str(out), topics=["profiles"], table_format="iceberg")
    )
    assert [r.kind for r in runs] == ["full", "changes"]
    merged = {p: first[p] + second[p] for p in first}
    live = {k: (o, v) for k, (o, v) in latest(merged).items() if v is not None}
    loaded = load_catalog(iceberg.CATALOG_NAME, **iceberg.default_catalog(out))
    target = loaded.load_table(iceberg.DEFAULT_TABLE)
    got = {
        (r["partition"], r["key"]): (r["offset"], r["value"])
        for r in iceberg.read_table(target).to_pylist()
    }
    assert got == live
    assert json.loads(target.properties[iceberg.END_OFFSETS]) == runs[1].end_offsets
