"""``df.write.format("logkeeper")``: rows appended to a topic, offline or through a worker.

Offline (``path`` = a data dir no worker holds): each Spark task builds record batches per Kafka
partition into staging files under ``<data dir>/.logkeeper-staging/<job id>/`` (a name the log
loader skips); the driver's ``commit`` then takes the data dir's lock, and appends each
partition's staged batches with :meth:`storagecore.Log.bulk_append`, which is all or nothing per
partition across crashes. A failed task or job aborts: the staging dir is removed and no log has
changed. Through a worker (``kafka.bootstrap.servers``): each task produces with an idempotent
librdkafka producer (acks=all) and fails if any delivery fails; as with Spark's Kafka sink,
what a failed job already delivered stays.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import shutil
import struct
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from storagecore import (
    Compression,
    LogConfig,
    LogManager,
    NewRecord,
    TopicPartition,
    build_batch,
)
from storagecore import files as core_files
from storagecore.config import validate_topic_name
from storagecore.errors import ConfigError, LogDirLockedError
from storagecore.file_lock import check_unlocked
from storagecore.partitioner import partition_for_key
from storagepipeline.logdirs import PipelineError, partition_dirs
from storagepipeline.plan import check_known, data_dirs_of

logger = logging.getLogger(__name__)

STAGING_DIR: Final = core_files.STAGING_DIR
WRITE_OPTIONS: Final = frozenset(
    {"path", "topic", "partitions", "compression", "batchrecords", "kafka.bootstrap.servers"}
)
#: Columns a written DataFrame may have (``value`` is required), as Spark's Kafka sink.
COLUMNS: Final = frozenset({"key", "value", "headers", "timestamp", "partition", "topic"})
_LENGTH: Final = struct.Struct(">i")


@dataclasses.dataclass(frozen=True, slots=True)
class StagedFile:
    partition: int
    path: str
    records: int
    #: The Spark partition that wrote it: a partition's files are appended in this order.
    task: int


@dataclasses.dataclass(frozen=True)
class StagedMessage(WriterCommitMessage):
    files: tuple[StagedFile, ...]


def _to_bytes(value: Any, column: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise PipelineError(f"column {column} must be binary or string, got {type(value).__name__}")


def _timestamp_ms(value: Any) -> int:
    if value is None:
        return int(time.time() * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    raise PipelineError(f"column timestamp must be a timestamp, got {type(value).__name__}")


class LogkeeperWriter(DataSourceWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        check_known(
            {k: v for k, v in options.items() if not k.lower().startswith(("config.", "kafka."))},
            WRITE_OPTIONS,
            "logkeeper write",
        )
        if overwrite:
            raise PipelineError(
                "mode overwrite is not supported: a topic log is append-only (use mode append)"
            )
        extra = sorted(set(schema.fieldNames()) - COLUMNS)
        if extra:
            raise PipelineError(
                f"unknown column(s) {', '.join(extra)}; a written DataFrame has value and "
                f"optionally {', '.join(sorted(COLUMNS - {'value'}))}"
            )
        if "value" not in schema.fieldNames():
            raise PipelineError("the written DataFrame needs a value column")
        lowered = {k.lower(): v for k, v in options.items()}
        topic = lowered.get("topic")
        if not topic:
            raise PipelineError("option topic is required for writes")
        try:
            self.topic = validate_topic_name(str(topic))
        except ConfigError as exc:
            raise PipelineError(str(exc)) from exc
        codec = str(lowered.get("compression", "none")).lower()
        try:
            self.compression = Compression.from_name(codec)
        except (ValueError, KeyError, ConfigError):
            raise PipelineError(
                f"option compression must be none, gzip, snappy, lz4 or zstd, got {codec!r}"
            ) from None
        self.batch_records = int(lowered.get("batchrecords", "1000"))
        if self.batch_records < 1:
            raise PipelineError(f"option batchRecords must be >= 1, got {self.batch_records}")
        self.bootstrap = lowered.get("kafka.bootstrap.servers")
        self.producer_config = {
            key[len("kafka.") :]: value
            for key, value in lowered.items()
            if key.startswith("kafka.") and key != "kafka.bootstrap.servers"
        }
        try:
            self.log_config = LogConfig.from_topic_config(
                {k[len("config.") :]: v for k, v in lowered.items() if k.startswith("config.")}
            )
        except ConfigError as exc:
            raise PipelineError(f"option config.*: {exc}") from exc
        self.job_id = uuid.uuid4().hex
        self.data_dir = ""
        if self.bootstrap:
            self.partitions = self._partitions_from_worker(lowered.get("partitions"))
        else:
            dirs = data_dirs_of(options)
            if len(dirs) != 1:
                raise PipelineError(f"offline writes go to one data dir; option path has {dirs}")
            self.data_dir = dirs[0]
            self.partitions = self._partitions_offline(lowered.get("partitions"))
            try:
                check_unlocked(Path(self.data_dir))
            except LogDirLockedError as exc:
                raise PipelineError(
                    f"{exc}; a running worker holds it: write through its Kafka port with "
                    f"option kafka.bootstrap.servers instead"
                ) from None

    # -- partition count -----------------------------------------------------------------------
    def _partitions_offline(self, requested: str | None) -> int:
        existing = sorted(
            tp.partition for tp in partition_dirs([self.data_dir]) if tp.topic == self.topic
        )
        if existing and existing != list(range(len(existing))):
            raise PipelineError(
                f"topic {self.topic} in {self.data_dir} has partitions {existing}, not 0..n-1"
            )
        if requested is None:
            if not existing:
                raise PipelineError(
                    f"topic {self.topic} does not exist in {self.data_dir}; give option "
                    f"partitions to create it"
                )
            return len(existing)
        count = int(requested)
        if count < 1 or (existing and count != len(existing)):
            raise PipelineError(
                f"option partitions={count} but topic {self.topic} has {len(existing)} "
                f"partition(s) in {self.data_dir}"
            )
        return count

    def _partitions_from_worker(self, requested: str | None) -> int:
        admin = AdminClient({"bootstrap.servers": str(self.bootstrap)})
        metadata = admin.list_topics(self.topic, timeout=10)
        info = metadata.topics.get(self.topic)
        if info is None or info.error is not None or not info.partitions:
            raise PipelineError(
                f"topic {self.topic} is not served by the worker at {self.bootstrap}: "
                f"{getattr(info, 'error', None)}"
            )
        count = len(info.partitions)
        if requested is not None and int(requested) != count:
            raise PipelineError(
                f"option partitions={requested} but the worker serves {count} for {self.topic}"
            )
        return count

    # -- tasks ---------------------------------------------------------------------------------
    def _partition_of(self, row: Row, key: bytes | None, sticky: int) -> int:
        explicit = row.asDict().get("partition")
        if explicit is not None:
            if not 0 <= explicit < self.partitions:
                raise PipelineError(
                    f"row partition {explicit} is out of range for topic {self.topic} "
                    f"({self.partitions} partitions)"
                )
            return int(explicit)
        if key is None:
            return sticky  # Kafka's sticky partitioner: keyless records of a task stay together
        return partition_for_key(key, self.partitions)

    def _rows(self, iterator: Iterator[Row]) -> Iterator[tuple[int, NewRecord]]:
        context = TaskContext.get()
        sticky = (context.partitionId() if context else 0) % self.partitions
        for row in iterator:
            if "topic" in row and row["topic"] not in (None, self.topic):
                raise PipelineError(
                    f"row topic {row['topic']!r} differs from option topic {self.topic!r}"
                )
            key = _to_bytes(row["key"], "key") if "key" in row else None
            value = _to_bytes(row["value"], "value")
            headers: tuple[tuple[str, bytes | None], ...] = ()
            if row.asDict().get("headers"):
                headers = tuple(
                    (str(h["key"]), _to_bytes(h["value"], "headers.value")) for h in row["headers"]
                )
            timestamp = _timestamp_ms(row.asDict().get("timestamp"))
            yield (
                self._partition_of(row, key, sticky),
                NewRecord(key=key, value=value, timestamp=timestamp, headers=headers),
            )

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        if self.bootstrap:
            return self._produce(iterator)
        context = TaskContext.get()
        task_index = context.partitionId() if context else 0
        task = f"{task_index}-{context.attemptNumber() if context else 0}"
        staging = Path(self.data_dir) / STAGING_DIR / self.job_id
        pending: dict[int, list[NewRecord]] = {}
        handles: dict[int, Any] = {}
        counts: dict[int, int] = {}

        def flush(partition: int) -> None:
            records = pending.pop(partition, [])
            if not records:
                return
            data = build_batch(records, compression=self.compression)
            if partition not in handles:
                path = staging / f"{self.topic}-{partition}" / f"task-{task}.batches"
                path.parent.mkdir(parents=True, exist_ok=True)
                handles[partition] = path.open("wb")
            handles[partition].write(_LENGTH.pack(len(data)) + data)
            counts[partition] = counts.get(partition, 0) + len(records)

        try:
            for partition, record in self._rows(iterator):
                pending.setdefault(partition, []).append(record)
                if len(pending[partition]) >= self.batch_records:
                    flush(partition)
            for partition in list(pending):
                flush(partition)
        finally:
            for handle in handles.values():
                handle.close()
        return StagedMessage(
            tuple(StagedFile(p, handles[p].name, counts[p], task_index) for p in sorted(handles))
        )

    def _produce(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        errors: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"{msg.topic()}-{msg.partition()}: {err}")

        config = {
            "bootstrap.servers": self.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": self.compression.config_name,
            **self.producer_config,
        }
        producer = Producer(config)
        try:
            for partition, record in self._rows(iterator):
                while True:
                    try:
                        producer.produce(
                            self.topic,
                            value=record.value,
                            key=record.key,
                            partition=partition,
                            timestamp=record.timestamp,
                            headers=list(record.headers) or None,
                            on_delivery=delivered,
                        )
                        break
                    except BufferError:
                        producer.poll(0.1)  # the local queue is full: let deliveries drain
                producer.poll(0)
            remaining = producer.flush(60)
        except KafkaException as exc:
            raise PipelineError(f"producing to {self.topic} at {self.bootstrap}: {exc}") from exc
        if remaining or errors:
            raise PipelineError(
                f"producing to {self.topic} at {self.bootstrap}: {remaining} undelivered, "
                f"errors: {errors[:5]}"
            )
        return StagedMessage(())

    # -- driver --------------------------------------------------------------------------------
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.bootstrap:
            return
        by_partition: dict[int, list[StagedFile]] = {}
        for message in messages:
            assert isinstance(message, StagedMessage), message
            for staged in message.files:
                by_partition.setdefault(staged.partition, []).append(staged)
        staging = Path(self.data_dir) / STAGING_DIR / self.job_id
        try:
            commit_staged(
                Path(self.data_dir), self.topic, self.partitions, self.log_config, by_partition
            )
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            _remove_if_empty(staging.parent)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.bootstrap:
            logger.warning(
                "write to %s through %s failed: records already delivered by finished tasks stay",
                self.topic,
                self.bootstrap,
            )
            return
        staging = Path(self.data_dir) / STAGING_DIR / self.job_id
        shutil.rmtree(staging, ignore_errors=True)
        _remove_if_empty(staging.parent)


def _remove_if_empty(path: Path) -> None:
    # Not empty (another job's staging) or already gone: leave it.
    with contextlib.suppress(OSError):
        path.rmdir()


def _staged_batches(files: list[StagedFile]) -> Iterator[bytes]:
    # Task order, then file order: a task's records keep their order in each partition.
    for staged in files:
        with open(staged.path, "rb") as handle:
            while header := handle.read(_LENGTH.size):
                (size,) = _LENGTH.unpack(header)
                data = handle.read(size)
                if len(data) != size:
                    raise PipelineError(f"staging file {staged.path} is truncated")
                yield data


def commit_staged(
    data_dir: Path,
    topic: str,
    partitions: int,
    config: LogConfig,
    by_partition: Mapping[int, list[StagedFile]],
) -> dict[int, int]:
    """Append the staged batches under the data dir's lock; returns records per partition.

    Every partition of the topic exists afterwards (created empty if no row went there).
    """
    written: dict[int, int] = {}
    try:
        manager = LogManager([data_dir], config_for={topic: config})
    except LogDirLockedError as exc:
        raise PipelineError(
            f"{exc}; write through the worker's Kafka port (kafka.bootstrap.servers) instead"
        ) from exc
    try:
        for partition in range(partitions):
            log = manager.get_or_create_log(TopicPartition(topic, partition), config)
            files = sorted(by_partition.get(partition, []), key=lambda f: f.task)
            info = log.bulk_append(_staged_batches(files))
            written[partition] = info.record_count if info else 0
    finally:
        manager.shutdown()
    logger.info("wrote %s to %s in %s", written, topic, data_dir)
    return written
