"""One local[2] SparkSession for the pipeline tests, and logs written by the storage core."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")  # the spark extra; the README's test command has it

from pyspark.sql import SparkSession  # noqa: E402

from storagecore import (  # noqa: E402
    Compression,
    LogConfig,
    LogManager,
    ManualClock,
    NewRecord,
    TopicPartition,
    build_batch,
)
from storagecore.cleaner.log_cleaner import LogCleaner  # noqa: E402
from storagecore.config import CleanerConfig  # noqa: E402
from storagepipeline import local_session  # noqa: E402

START_MS = 1_700_000_000_000


@pytest.fixture(scope="package")
def spark() -> Iterator[SparkSession]:
    """One session for the pipeline tests, stopped after them (an idle JVM would otherwise
    compete with the timing-sensitive tests that follow)."""
    session = local_session("local[2]", "logkeeper-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def write_log(
    data_dir: Path,
    topic: str,
    batches: dict[int, Sequence[Sequence[NewRecord]]],
    *,
    config: dict[str, object] | None = None,
    codec: Compression = Compression.NONE,
    clock_ms: int = START_MS,
) -> LogConfig:
    """Append ``batches[partition]`` (each inner sequence one batch) through a LogManager."""
    log_config = LogConfig.from_topic_config({"segment.bytes": 4096, **(config or {})})
    with LogManager(
        [data_dir], config_for={topic: log_config}, clock=ManualClock(clock_ms)
    ) as manager:
        for partition, partition_batches in batches.items():
            log = manager.get_or_create_log(TopicPartition(topic, partition), log_config)
            for records in partition_batches:
                log.append(build_batch(list(records), compression=codec))
    return log_config


def copy_dir(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    (target / ".lock").unlink(missing_ok=True)
    return target


def clean_and_delete_everything(
    data_dir: Path, topic: str, config: dict[str, object], log_start: int = 150
) -> None:
    """What a worker may do to a topic at any moment: its cleaner rewrites every sealed segment,
    retention moves each partition's log start to ``log_start``, and every replaced or deleted
    file is unlinked at once (as after file.delete.delay.ms)."""
    log_config = LogConfig.from_topic_config({"segment.bytes": 4096, **config})
    clock = ManualClock(START_MS + 10**6)
    with LogManager([data_dir], config_for={topic: log_config}, clock=clock) as manager:
        LogCleaner(manager, CleanerConfig(), clock=clock).clean_until_done()
        for log in manager.logs.values():
            log.maybe_increment_log_start_offset(log_start, "test")
            log.delete_old_segments()
            log.delete_expired_files(force=True)
    assert not list(data_dir.glob(f"{topic}-*/*.deleted"))
