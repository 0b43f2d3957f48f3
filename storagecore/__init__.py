"""storagecore: Kafka's log layer, byte-compatible with Kafka's on-disk format.

What belongs here: record batches and codecs, indexes, segments, the Log and its loader, the
LogManager over several log dirs, checkpoints, topic configuration (and, with the cleaner issue,
retention and compaction). What must not: kopf, kubernetes, prometheus_client, pyspark, or any
other package of this repository (import-linter enforces it). Consumers import from this facade.
"""

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
