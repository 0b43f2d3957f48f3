"""``snapshot`` into an Apache Iceberg table (pyiceberg, SQLite catalog), on local[2] Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from storagecore import NewRecord
from storagepipeline import PipelineError, iceberg
from storagepipeline.jobs import snapshot
from tests.integration.storagepipeline.conftest import START_MS, write_log
from tests.integration.storagepipeline.test_jobs import latest, traffic

pytestmark = [pytest.mark.integration, pytest.mark.spark]

Rows = dict[tuple[str, int, bytes], tuple[int, bytes | None, int, tuple[Any, ...]]]


def rows(table: Table) -> Rows:
    """The table as pyiceberg reads it: (topic, partition, key) → (offset, value, timestamp ms,
    headers), each key once."""
    out: Rows = {}
    for row in iceberg.read_table(table).to_pylist():
        key = (row["topic"], row["partition"], row["key"])
        assert key not in out, f"key {key} twice in the table"
        headers = tuple((h["key"], h["value"]) for h in row["headers"] or ())
        out[key] = (
            row["offset"],
            row["value"],
            int(row["timestamp"].timestamp() * 1000),
            headers,
        )
    return out


def want(batches: list[dict[int, list[list[NewRecord]]]]) -> dict[tuple[str, int, bytes], Any]:
    """The live keys after every batch of ``batches`` was appended in turn."""
    merged: dict[int, list[list[NewRecord]]] = {}
    for more in batches:
        for partition, partition_batches in more.items():
            merged.setdefault(partition, []).extend(partition_batches)
    return {
        ("profiles", p, k): (o, v) for (p, k), (o, v) in latest(merged).items() if v is not None
    }


def table_files(table: Table) -> set[str]:
    return {task.file.file_path for task in table.refresh().scan().plan_files()}


def open_table(out: Path, name: str = iceberg.DEFAULT_TABLE) -> Table:
    return load_catalog(iceberg.CATALOG_NAME, **iceberg.default_catalog(out)).load_table(name)


def test_incremental_iceberg_runs_read_back_as_a_full_export(
    spark: SparkSession, tmp_path: Path
) -> None:
    data, out = tmp_path / "data", tmp_path / "export"
    first = traffic(3, 40, 30)
    write_log(data, "profiles", first)
    run1 = snapshot(spark, [str(data)], str(out), topics=["profiles"], table_format="iceberg")
    assert run1.kind == "full" and run1.end_offsets == {f"profiles-{p}": 160 for p in range(3)}
    assert run1.rows == len(want([first])) and run1.deletes == 0
    table = open_table(out)
    assert {k: v[:2] for k, v in rows(table).items()} == want([first])
    assert json.loads(table.properties[iceberg.END_OFFSETS]) == run1.end_offsets
    files1 = table_files(table)
    # The files a change of profiles-1 may touch, by the manifests' column bounds alone.
    candidates = {
        task.file.file_path
        for task in table.scan(
            row_filter=iceberg._partitions_filter([("profiles", 1)])
        ).plan_files()
    }
    assert candidates and candidates < files1
    snapshots1 = len(table.snapshots())

    # Only partition 1 gets traffic: overwrites, new keys and tombstones.
    second = {1: traffic(2, 15, 45, seed=99, start_ms=START_MS + 10**6)[1]}
    deleted = [k for (p, k) in latest(first) if p == 1][:3]
    second[1].append(
        [NewRecord(key=k, value=None, timestamp=START_MS + 2 * 10**6) for k in deleted]
    )
    write_log(data, "profiles", second)
    run2 = snapshot(spark, [str(data)], str(out), topics=["profiles"], table_format="iceberg")
    assert run2.kind == "changes" and run2.start_offsets == run1.end_offsets
    assert run2.end_offsets == {"profiles-0": 160, "profiles-1": 223, "profiles-2": 160}
    assert run2.deletes == 3 and run2.rows > 0
    table = open_table(out)
    incremental = rows(table)
    assert {k: v[:2] for k, v in incremental.items()} == want([first, second])
    assert not {("profiles", 1, k) for k in deleted} & incremental.keys()
    assert json.loads(table.properties[iceberg.END_OFFSETS]) == run2.end_offsets
    # Files holding partitions 0 and 2 only were not rewritten: the run touched what changed.
    files2 = table_files(table)
    untouched = files1 & files2
    assert untouched and files1 - files2
    assert files1 - files2 <= candidates
    summary = table.current_snapshot().summary  # type: ignore[union-attr]
    assert summary.operation.value == "overwrite"
    assert int(summary["deleted-data-files"]) == len(files1 - files2) < len(files1)

    # A full export of the same offsets into a new table reads back identically.
    fresh = tmp_path / "fresh"
    full = snapshot(spark, [str(data)], str(fresh), topics=["profiles"], table_format="iceberg")
    assert full.kind == "full" and full.end_offsets == run2.end_offsets
    assert rows(open_table(fresh)) == incremental

    # Nothing new: no snapshot, same rows.
    run3 = snapshot(spark, [str(data)], str(out), topics=["profiles"], table_format="iceberg")
    assert run3.run_id == "None" and run3.rows == 0
    table = open_table(out)
    assert len(table.snapshots()) == snapshots1 + 1 and rows(table) == incremental


def test_a_failed_iceberg_run_leaves_the_table_and_its_directory_as_they_were(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, out = tmp_path / "data", tmp_path / "export"
    first = traffic(2, 20, 15)
    write_log(data, "profiles", first)
    run1 = snapshot(spark, [str(data)], str(out), topics=["profiles"], table_format="iceberg")
    before = rows(open_table(out))
    location = Path(run1.path.removeprefix("file://"))
    listing = sorted(p.relative_to(location) for p in location.rglob("*"))
    write_log(data, "profiles", traffic(2, 5, 30, seed=5, start_ms=START_MS + 10**6))

    def fail(*_args: object) -> None:
        raise RuntimeError("the catalog is down")

    with monkeypatch.context() as patched:
        patched.setattr(iceberg, "_commit", fail)  # after Spark wrote the new files
        with pytest.raises(RuntimeError, match="the catalog is down"):
            snapshot(spark, [str(data)], str(out), topics=["profiles"], table_format="iceberg")
    table = open_table(out)
    assert rows(table) == before
    assert json.loads(table.properties[iceberg.END_OFFSETS]) == run1.end_offsets
    # Everything the failed run wrote is gone (staging and data files: nothing orphaned).
    assert sorted(p.relative_to(location) for p in location.rglob("*")) == listing
    run2 = snapshot(spark, [str(data)], str(out), topics=["profiles"], table_format="iceberg")
    assert run2.start_offsets == run1.end_offsets and rows(open_table(out)) != before


def test_iceberg_options_are_checked(spark: SparkSession, tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "export"
    write_log(data, "profiles", traffic(1, 2, 3))
    with pytest.raises(PipelineError, match="snapshot format 'orc': use one of"):
        snapshot(spark, [str(data)], str(out), topics=["profiles"], table_format="orc")
    with pytest.raises(PipelineError, match="Iceberg table 'flat': give it as namespace.name"):
        snapshot(
            spark, [str(data)], str(out), topics=["profiles"], table_format="iceberg", table="flat"
        )
    # A table some other writer filled (no offsets property) is refused, not overwritten.
    catalog = load_catalog(iceberg.CATALOG_NAME, **iceberg.default_catalog(out))
    catalog.create_namespace_if_not_exists("other")
    foreign = catalog.create_table("other.events", schema=iceberg.SCHEMA)
    foreign.append(
        pa.Table.from_pylist([{"topic": "x", "partition": 0}], schema=foreign.schema().as_arrow())
    )
    with pytest.raises(PipelineError, match="other.events has data but no logkeeper.snapshot"):
        snapshot(
            spark,
            [str(data)],
            str(out),
            topics=["profiles"],
            table_format="iceberg",
            table="other.events",
        )


def test_catalog_options_of_the_command_line() -> None:
    assert iceberg.catalog_properties([]) is None
    assert iceberg.catalog_properties(["type=sql", "uri=sqlite:///c.db?x=1"]) == {
        "type": "sql",
        "uri": "sqlite:///c.db?x=1",
    }
    with pytest.raises(PipelineError, match="catalog option 'uri': give KEY=VALUE"):
        iceberg.catalog_properties(["uri"])


def test_a_run_that_another_committed_before_fails(tmp_path: Path) -> None:
    """Two runs on one table: the one that commits second started from an older snapshot and
    must not move the offsets (even with no file to add), so it fails and changes nothing."""
    target = iceberg.open_table(iceberg.default_catalog(tmp_path), iceberg.DEFAULT_TABLE)
    stale = open_table(tmp_path)
    row = {"topic": "profiles", "partition": 0, "key": b"k", "value": b"v", "offset": 0}
    target.append(pa.Table.from_pylist([row], schema=target.schema().as_arrow()))
    iceberg._commit(target.refresh(), [], [], {"profiles-0": 1})
    with pytest.raises(CommitFailedException):
        iceberg._commit(stale, [], [], {"profiles-0": 5})
    assert json.loads(open_table(tmp_path).properties[iceberg.END_OFFSETS]) == {"profiles-0": 1}


def test_runs_of_different_topics_keep_each_others_offsets(
    spark: SparkSession, tmp_path: Path
) -> None:
    data, out = tmp_path / "data", tmp_path / "export"
    write_log(data, "profiles", traffic(1, 5, 4))
    write_log(data, "orders", traffic(1, 3, 4))
    snapshot(spark, [str(data)], str(out), topics=["profiles"], table_format="iceberg")
    orders = snapshot(spark, [str(data)], str(out), topics=["orders"], table_format="iceberg")
    assert orders.kind == "changes" and orders.start_offsets == {"orders-0": 0}
    table = open_table(out)
    offsets = {"orders-0": 12, "profiles-0": 20}
    assert json.loads(table.properties[iceberg.END_OFFSETS]) == offsets
    assert {(t, p) for t, p, _k in rows(table)} == {("orders", 0), ("profiles", 0)}
    again = snapshot(spark, [str(data)], str(out), topics=["profiles"], table_format="iceberg")
    assert again.start_offsets == {"profiles-0": 20} and again.rows == 0


def test_a_change_of_one_key_rewrites_one_file(spark: SparkSession, tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "export"
    keys = [f"user-{i:04d}".encode() for i in range(400)]
    batches = [
        [NewRecord(key=k, value=b"v1", timestamp=START_MS) for k in keys[i : i + 50]]
        for i in range(0, len(keys), 50)
    ]
    write_log(data, "profiles", {0: batches})
    snapshot(spark, [str(data)], str(out), topics=["profiles"], table_format="iceberg")
    files1 = table_files(open_table(out))
    assert len(files1) > 2  # key ranges of one partition, several files
    one = [[NewRecord(key=keys[123], value=b"v2", timestamp=START_MS + 1)]]
    write_log(data, "profiles", {0: one})
    snapshot(spark, [str(data)], str(out), topics=["profiles"], table_format="iceberg")
    table = open_table(out)
    files2 = table_files(table)
    assert len(files1 - files2) == 1  # only the file whose key range holds user-0123
    assert rows(table)[("profiles", 0, keys[123])][:2] == (400, b"v2")
    assert len(rows(table)) == 400
