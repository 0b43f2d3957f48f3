"""The ``snapshot`` job's Apache Iceberg output: the latest-per-key view as a table users query.

Maven Central has no Iceberg Spark runtime for pyspark 4.3 (``iceberg-spark-runtime-4.3_2.13``
and ``-4.2_2.13`` do not exist; 4.1 is the newest), so Spark writes plain Parquet files into the
table's data directory and the driver commits them with pyiceberg, against any pyiceberg catalog
(a SQL catalog on SQLite under the output directory by default).

One run, given the view's changes since the offsets of the previous run (the latest record per
changed key, tombstones flagged ``deleted``):

1. (Spark) write the changes to a staging directory beside the table's data (read twice below,
   the log once);
2. (Spark) find the table's current data files holding a changed key (among the files whose
   statistics may hold a changed topic-partition, a semi-join of their keys with the changes),
   and write those files' other rows plus the changes' live rows as new data files, each a
   contiguous range of (topic, partition, key), sorted: a file's column bounds then name the
   partitions and keys it holds, so a later change touches only the files of its key ranges;
3. (driver) one Iceberg transaction: an overwrite snapshot that removes the rewritten files and
   adds the new ones, and the table property :data:`END_OFFSETS` set to the run's end offsets.
   The commit is the run's commit point; a failure before it deletes what the run wrote, and a
   run that another committed before fails (Iceberg's optimistic concurrency: the commit
   requires the snapshot the run started from).

Files without a changed key are left as they are, so a run writes what changed plus the rows
that shared a file with a change (each run adds at most ``write_partitions`` files: Iceberg's
own maintenance, such as rewriting small files, keeps their number down); the table reads back
as a full export of the same offsets would (a test compares both). The rows carry no
``deleted`` column: a deleted key is absent.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlparse

import pyarrow.fs as pafs
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import And, BooleanExpression, EqualTo, In, Or, Reference
from pyiceberg.expressions.literals import literal
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.update import AssertRefSnapshotId
from pyiceberg.types import (
    BinaryType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's customary alias

from storagepipeline.logdirs import PipelineError

#: The table property holding the end offsets of the last committed run (``{"topic-p": n}``).
END_OFFSETS: Final = "logkeeper.snapshot.end-offsets"
#: The catalog used when none is given: a SQL catalog on SQLite, warehouse beside it.
DEFAULT_TABLE: Final = "logkeeper.snapshot"
#: The catalog's name (a SQL catalog keys its tables by it: readers load it under this name).
CATALOG_NAME: Final = "logkeeper"
_KEY_COLUMNS: Final = ("topic", "partition", "key")
_COLUMNS: Final = ("topic", "partition", "key", "value", "headers", "offset", "timestamp")

#: The table's schema: the columns of the ``logkeeper`` source's latest view. Every field is
#: optional, as Spark writes them.
SCHEMA: Final = Schema(
    NestedField(1, "topic", StringType(), required=False),
    NestedField(2, "partition", IntegerType(), required=False),
    NestedField(3, "key", BinaryType(), required=False),
    NestedField(4, "value", BinaryType(), required=False),
    NestedField(
        5,
        "headers",
        ListType(
            8,
            StructType(
                NestedField(9, "key", StringType(), required=False),
                NestedField(10, "value", BinaryType(), required=False),
            ),
            element_required=False,
        ),
        required=False,
    ),
    NestedField(6, "offset", LongType(), required=False),
    NestedField(7, "timestamp", TimestamptzType(), required=False),
)


def default_catalog(output: Path) -> dict[str, str]:
    """The catalog properties of a SQLite catalog in ``output`` (warehouse ``output``)."""
    return {
        "type": "sql",
        "uri": f"sqlite:///{output.resolve() / 'catalog.db'}",
        "warehouse": output.resolve().as_uri(),
    }


def catalog_properties(pairs: Sequence[str]) -> dict[str, str] | None:
    """``KEY=VALUE`` options (the CLI's ``--catalog``) as catalog properties (None: none)."""
    properties: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise PipelineError(f"catalog option {pair!r}: give KEY=VALUE (uri=sqlite:///c.db)")
        properties[key] = value
    return properties or None


def open_table(catalog: Mapping[str, str], identifier: str) -> Table:
    """The table ``identifier`` (``namespace.name``), created empty if absent."""
    if "." not in identifier:
        raise PipelineError(f"Iceberg table {identifier!r}: give it as namespace.name")
    loaded: Catalog = load_catalog(CATALOG_NAME, **dict(catalog))
    namespace = identifier.rsplit(".", 1)[0]
    loaded.create_namespace_if_not_exists(namespace)
    try:
        return loaded.load_table(identifier)
    except NoSuchTableError:
        return loaded.create_table_if_not_exists(
            identifier,
            schema=SCHEMA,
            properties={
                TableProperties.DEFAULT_NAME_MAPPING: SCHEMA.name_mapping.model_dump_json()
            },
        )


def end_offsets(table: Table) -> dict[str, int]:
    """The end offsets of the table's last run (empty before the first)."""
    text = table.properties.get(END_OFFSETS)
    if text is None:
        if table.current_snapshot() is not None:
            raise PipelineError(
                f"Iceberg table {_name(table)} has data but no {END_OFFSETS} property: it was "
                "not written by the snapshot job; choose another table"
            )
        return {}
    try:
        offsets = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PipelineError(f"{_name(table)}: property {END_OFFSETS} is not JSON: {exc}") from exc
    if not isinstance(offsets, dict) or not all(isinstance(v, int) for v in offsets.values()):
        raise PipelineError(f"{_name(table)}: property {END_OFFSETS} is not {{tp: offset}}")
    return offsets


def _name(table: Table) -> str:
    return ".".join(table.name())


@dataclasses.dataclass(frozen=True, slots=True)
class Commit:
    """What one run committed."""

    #: The Iceberg snapshot id, None when nothing changed (only the offsets moved).
    snapshot_id: int | None
    #: Live rows of the changes (new or updated keys) and deleted keys.
    rows: int
    deletes: int
    files_added: int
    files_removed: int


def _normalized(uri: str) -> str:
    """A file's URI with ``file:/x`` and ``file:///x`` (Spark's and Iceberg's forms) alike."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return parsed.path
    return f"{parsed.scheme}://{parsed.netloc}{parsed.path}"


def _data_files(fs: pafs.FileSystem, directory: str, uri_prefix: str) -> list[str]:
    """The Parquet files Spark wrote in ``directory``, as URIs."""
    selector = pafs.FileSelector(directory, allow_not_found=True, recursive=False)
    return sorted(
        f"{uri_prefix}{info.path}"
        for info in fs.get_file_info(selector)
        if info.type == pafs.FileType.File and info.base_name.endswith(".parquet")
    )


def commit(
    spark: SparkSession,
    table: Table,
    changes: DataFrame,
    offsets: dict[str, int],
    *,
    write_partitions: int = 8,
) -> Commit:
    """Apply ``changes`` (latest record per changed key, flagged ``deleted``) to ``table`` and
    record ``offsets``; see the module docstring."""
    location = table.location().rstrip("/")
    fs, root = pafs.FileSystem.from_uri(location)
    uri_prefix = location[: len(location) - len(root)] if location.endswith(root) else ""
    run = uuid.uuid4().hex
    staging = f"{root}/staging/{run}"
    written = f"{root}/data/{run}"
    # Iceberg has no INT96 timestamps (Spark's default for Parquet): micros, adjusted to UTC.
    previous_type = spark.conf.get("spark.sql.parquet.outputTimestampType") or "INT96"
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    try:
        changes.select(*_COLUMNS, "deleted").write.parquet(uri_prefix + staging)
        staged = spark.read.parquet(uri_prefix + staging)
        keys = staged.select(*_KEY_COLUMNS)
        changed = [
            (r["topic"], r["partition"])
            for r in keys.select("topic", "partition").distinct().collect()
        ]
        # Only files whose column bounds may hold a changed partition are read (Iceberg's
        # manifest statistics prune the rest: the files are written per topic-partition).
        current = {
            _normalized(task.file.file_path): task.file
            for task in (
                table.scan(row_filter=_partitions_filter(changed)).plan_files() if changed else ()
            )
        }
        touched: list[DataFile] = []
        if current:
            existing = spark.read.parquet(*[f.file_path for f in current.values()])
            hit = (
                existing.select(*_KEY_COLUMNS, F.col("_metadata.file_path").alias("file"))
                .join(keys, list(_KEY_COLUMNS), "left_semi")
                .select("file")
                .distinct()
                .collect()
            )
            touched = [current[_normalized(row["file"])] for row in hit]
        rows = staged.where(~F.col("deleted")).select(*_COLUMNS)
        if touched:
            kept = spark.read.parquet(*[f.file_path for f in touched]).join(
                keys, list(_KEY_COLUMNS), "left_anti"
            )
            rows = kept.select(*_COLUMNS).unionByName(rows)
        counts = staged.agg(
            F.sum((~F.col("deleted")).cast("int")).alias("rows"),
            F.sum(F.col("deleted").cast("int")).alias("deletes"),
        ).first()
        (
            rows.repartitionByRange(write_partitions, *_KEY_COLUMNS)
            .sortWithinPartitions(*_KEY_COLUMNS)
            .write.parquet(uri_prefix + written)
        )
        added = []
        for path in _data_files(fs, written, uri_prefix):
            data_file = parquet_file_to_data_file(table.io, table.metadata, path)
            if data_file.record_count:
                added.append(data_file)
            else:  # an empty write task's file: nothing to commit
                fs.delete_file(path[len(uri_prefix) :])
        snapshot_id = _commit(table, added, touched, offsets)
    except BaseException:
        _delete_dir(fs, written)  # not committed: no snapshot names these files
        raise
    finally:
        spark.conf.set("spark.sql.parquet.outputTimestampType", previous_type)
        _delete_dir(fs, staging)
    return Commit(
        snapshot_id=snapshot_id,
        rows=int(counts["rows"] or 0) if counts else 0,
        deletes=int(counts["deletes"] or 0) if counts else 0,
        files_added=len(added),
        files_removed=len(touched),
    )


def _partitions_filter(changed: Sequence[tuple[str, int]]) -> BooleanExpression:
    """Rows of the ``changed`` topic-partitions."""
    by_topic: dict[str, set[int]] = {}
    for topic, partition in changed:
        by_topic.setdefault(topic, set()).add(partition)
    terms = [
        And(
            EqualTo(term=Reference("topic"), value=literal(topic)),
            In(term=Reference("partition"), values={literal(p) for p in partitions}),
        )
        for topic, partitions in sorted(by_topic.items())
    ]
    return terms[0] if len(terms) == 1 else Or(*terms)


def _delete_dir(fs: pafs.FileSystem, directory: str) -> None:
    if fs.get_file_info(directory).type != pafs.FileType.NotFound:
        fs.delete_dir(directory)


def _commit(
    table: Table, added: list[DataFile], removed: list[DataFile], offsets: dict[str, int]
) -> int | None:
    """One transaction: the overwrite snapshot (if any file changes) and the offsets."""
    properties = {END_OFFSETS: json.dumps(dict(sorted(offsets.items())))}
    with table.transaction() as transaction:
        # Invariant: the run started from the table's current snapshot. A snapshot commit
        # asserts it by itself; an offsets-only commit asserts it here (pyiceberg has no public
        # call for a bare requirement), so no run moves the offsets past another's commit.
        started_from = {"ref": "main", "snapshot-id": table.metadata.current_snapshot_id}
        transaction._apply((), (AssertRefSnapshotId.model_validate(started_from),))
        if added or removed:
            update = transaction.update_snapshot(snapshot_properties=properties)
            with update.overwrite() as overwrite:
                for data_file in removed:
                    overwrite.delete_data_file(data_file)
                for data_file in added:
                    overwrite.append_data_file(data_file)
        transaction.set_properties(properties)
    snapshot = table.current_snapshot()
    return snapshot.snapshot_id if snapshot is not None and (added or removed) else None


def read_table(table: Table) -> Any:
    """The table's rows as a pyarrow Table (pyiceberg's reader: what users' engines see)."""
    return table.refresh().scan().to_arrow()
