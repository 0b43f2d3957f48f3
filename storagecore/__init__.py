"""storagecore: Kafka's log layer, byte-compatible with Kafka's on-disk format.

What belongs here: record batches and codecs, indexes, segments, the Log and its loader, the
LogManager over several log dirs, checkpoints, topic configuration (and, with the cleaner issue,
retention and compaction). What must not: kopf, kubernetes, prometheus_client, pyspark, or any
other package of this repository (import-linter enforces it). Consumers import from this facade.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storagecore.clock import Clock, ManualClock, SystemClock
    from storagecore.config import LogConfig, TopicPartition, TopicSpec, parse_topic_manifests
    from storagecore.errors import (
        ConfigError,
        CorruptCheckpointError,
        CorruptIndexError,
        CorruptRecordError,
        InvalidRecordError,
        LogDirLockedError,
        LogDirOfflineError,
        OffsetOutOfRangeError,
        RecordBatchTooLargeError,
        RecordTooLargeError,
        SegmentOffsetOverflowError,
        StorageError,
        UnknownTopicOrPartitionError,
        UnsupportedCompressionError,
    )
    from storagecore.log import (
        EARLIEST_TIMESTAMP,
        LATEST_TIMESTAMP,
        MAX_TIMESTAMP,
        FetchResult,
        Log,
        LogAppendInfo,
    )
    from storagecore.log_manager import LogManager
    from storagecore.log_validator import AppendOrigin
    from storagecore.records.batch import ControlType, NewRecord, Record, RecordBatch, TimestampType
    from storagecore.records.codecs import Compression
    from storagecore.records.memory_records_builder import build_batch, build_control_batch

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendOrigin",
    "Clock",
    "Compression",
    "ConfigError",
    "ControlType",
    "CorruptCheckpointError",
    "CorruptIndexError",
    "CorruptRecordError",
    "FetchResult",
    "InvalidRecordError",
    "Log",
    "LogAppendInfo",
    "LogConfig",
    "LogDirLockedError",
    "LogDirOfflineError",
    "LogManager",
    "ManualClock",
    "NewRecord",
    "OffsetOutOfRangeError",
    "Record",
    "RecordBatch",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "SegmentOffsetOverflowError",
    "StorageError",
    "SystemClock",
    "TimestampType",
    "TopicPartition",
    "TopicSpec",
    "UnknownTopicOrPartitionError",
    "UnsupportedCompressionError",
    "build_batch",
    "build_control_batch",
    "parse_topic_manifests",
]

# Each name is imported from its module on first use (PEP 562), so that importing one module of
# the package (``storagecore.config`` for the operator and the CLI's parser, say) does not
# import all of it. tests/integration/test_cli_startup.py checks what a command loads.
_MODULE_OF: dict[str, str] = {
    "Clock": "storagecore.clock",
    "ManualClock": "storagecore.clock",
    "SystemClock": "storagecore.clock",
    "LogConfig": "storagecore.config",
    "TopicPartition": "storagecore.config",
    "TopicSpec": "storagecore.config",
    "parse_topic_manifests": "storagecore.config",
    "ConfigError": "storagecore.errors",
    "CorruptCheckpointError": "storagecore.errors",
    "CorruptIndexError": "storagecore.errors",
    "CorruptRecordError": "storagecore.errors",
    "InvalidRecordError": "storagecore.errors",
    "LogDirLockedError": "storagecore.errors",
    "LogDirOfflineError": "storagecore.errors",
    "OffsetOutOfRangeError": "storagecore.errors",
    "RecordBatchTooLargeError": "storagecore.errors",
    "RecordTooLargeError": "storagecore.errors",
    "SegmentOffsetOverflowError": "storagecore.errors",
    "StorageError": "storagecore.errors",
    "UnknownTopicOrPartitionError": "storagecore.errors",
    "UnsupportedCompressionError": "storagecore.errors",
    "EARLIEST_TIMESTAMP": "storagecore.log",
    "LATEST_TIMESTAMP": "storagecore.log",
    "MAX_TIMESTAMP": "storagecore.log",
    "FetchResult": "storagecore.log",
    "Log": "storagecore.log",
    "LogAppendInfo": "storagecore.log",
    "LogManager": "storagecore.log_manager",
    "AppendOrigin": "storagecore.log_validator",
    "ControlType": "storagecore.records.batch",
    "NewRecord": "storagecore.records.batch",
    "Record": "storagecore.records.batch",
    "RecordBatch": "storagecore.records.batch",
    "TimestampType": "storagecore.records.batch",
    "Compression": "storagecore.records.codecs",
    "build_batch": "storagecore.records.memory_records_builder",
    "build_control_batch": "storagecore.records.memory_records_builder",
}


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'storagecore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
