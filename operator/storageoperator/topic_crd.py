"""The Topic CustomResourceDefinition: a Kafka topic on a StorageVolume (``spec.config`` with
Kafka's own keys, bounded as storagecore.config accepts them) and its status (per-partition
figures up to PARTITION_STATUS_MAX, summaries beyond). Pure data, assembled by
:mod:`storageoperator.crds`.
"""

from __future__ import annotations

from typing import Any, Final

from storagecore.config import COMPRESSION_TYPES, INT_MAX, LONG_MAX, TIMESTAMP_TYPES
from storageoperator.conditions import PARTITION_STATUS_MAX
from storageoperator.crd_schema import (
    STATUS_COMMON,
    Schema,
    column,
    custom_resource_definition,
)


def _int64(description: str, minimum: int, maximum: int = LONG_MAX) -> Schema:
    schema: Schema = {"type": "integer", "format": "int64", "description": description}
    schema["minimum"] = minimum
    if maximum != LONG_MAX:
        schema["maximum"] = maximum
    return schema


#: Kafka topic config keys: type, bounds and enums as storagecore.config accepts them.
TOPIC_CONFIG_SCHEMA: Final[dict[str, Schema]] = {
    "cleanup.policy": {
        "type": "string",
        "enum": ["delete", "compact", "compact,delete", "delete,compact"],
        "description": "delete: retention by time and size; compact: keep the latest record "
        "per key; both: compaction and retention.",
    },
    "compression.type": {
        "type": "string",
        "enum": list(COMPRESSION_TYPES),
        "description": "Codec of stored batches; producer keeps what the producer sent.",
    },
    "compression.gzip.level": _int64("gzip level (-1: the codec's default).", -1, 9),
    "compression.lz4.level": _int64("lz4 level.", 1, 17),
    "compression.zstd.level": _int64("zstd level.", -131072, 22),
    "delete.retention.ms": _int64("How long tombstones stay after compaction (ms).", 0),
    "file.delete.delay.ms": _int64("Delay before a deleted segment's files are removed (ms).", 0),
    "flush.messages": _int64("Flush after this many records.", 1),
    "flush.ms": _int64("Flush when the oldest unflushed record is this old (ms).", 0),
    "index.interval.bytes": _int64("Bytes between offset index entries.", 0, INT_MAX),
    "max.compaction.lag.ms": _int64("A record stays uncompacted at most this long (ms).", 1),
    "max.message.bytes": _int64("Largest record batch accepted (bytes).", 0, INT_MAX),
    "message.timestamp.type": {
        "type": "string",
        "enum": list(TIMESTAMP_TYPES),
        "description": "Record timestamps from the producer or the time of append.",
    },
    "message.timestamp.before.max.ms": _int64("Oldest accepted CreateTime, before now (ms).", 0),
    "message.timestamp.after.max.ms": _int64("Newest accepted CreateTime, after now (ms).", 0),
    "min.cleanable.dirty.ratio": {
        "type": "number",
        "minimum": 0,
        "maximum": 1,
        "description": "Dirty fraction of the log above which the cleaner picks it.",
    },
    "min.compaction.lag.ms": _int64("A record stays uncompacted at least this long (ms).", 0),
    "preallocate": {
        "type": "boolean",
        "description": "Accepted for compatibility; segment files are never preallocated.",
    },
    "retention.bytes": _int64("Per-partition size limit (bytes); -1: none.", -1),
    "retention.ms": _int64("Time limit (ms); -1: none.", -1),
    "segment.bytes": _int64("Segment size at which the log rolls (bytes).", 14, INT_MAX),
    "segment.index.bytes": _int64("Offset index size limit per segment (bytes).", 4, INT_MAX),
    "segment.jitter.ms": _int64("Random jitter subtracted from segment.ms (ms).", 0),
    "segment.ms": _int64("Segment age at which the log rolls (ms).", 1),
    # Replication and broker keys: accepted and without effect (a config copied from Kafka).
    "min.insync.replicas": _int64("Accepted, no effect (no replication here).", 1),
    "unclean.leader.election.enable": {"type": "boolean", "description": "Accepted, no effect."},
    "leader.replication.throttled.replicas": {
        "type": "string",
        "maxLength": 4096,
        "description": "Accepted, no effect.",
    },
    "follower.replication.throttled.replicas": {
        "type": "string",
        "maxLength": 4096,
        "description": "Accepted, no effect.",
    },
    "message.downconversion.enable": {"type": "boolean", "description": "Accepted, no effect."},
}


def topic_crd() -> dict[str, Any]:
    spec: Schema = {
        "type": "object",
        "description": "A topic on a StorageVolume.",
        "required": ["volume"],
        "properties": {
            "volume": {
                "type": "string",
                "minLength": 1,
                "maxLength": 253,
                "description": "The StorageVolume (same namespace) holding the topic; immutable.",
                "x-kubernetes-validations": [
                    {"rule": "self == oldSelf", "message": "spec.volume is immutable"}
                ],
            },
            "partitions": {
                "type": "integer",
                "minimum": 1,
                "maximum": 10000,
                "default": 1,
                "description": "Number of partitions; may grow, never shrink.",
                "x-kubernetes-validations": [
                    {"rule": "self >= oldSelf", "message": "spec.partitions cannot decrease"}
                ],
            },
            "topicName": {
                "type": "string",
                "minLength": 1,
                "maxLength": 249,
                "pattern": r"^[a-zA-Z0-9._-]+$",
                "description": "Kafka topic name (default: metadata.name); immutable.",
                "x-kubernetes-validations": [
                    {"rule": "self == oldSelf", "message": "spec.topicName is immutable"},
                    {"rule": "self != '.' && self != '..'", "message": "not . or .."},
                ],
            },
            "deletionPolicy": {
                "type": "string",
                "enum": ["Retain", "Delete"],
                "default": "Retain",
                "description": "Retain: deleting the resource keeps the data; Delete: the data "
                "goes too.",
            },
            "config": {
                "type": "object",
                "description": "Kafka topic config keys (Kafka's names, types and ranges).",
                "properties": TOPIC_CONFIG_SCHEMA,
                "x-kubernetes-validations": [
                    {
                        "rule": "!has(self.min__dot__compaction__dot__lag__dot__ms) || "
                        "!has(self.max__dot__compaction__dot__lag__dot__ms) || "
                        "self.min__dot__compaction__dot__lag__dot__ms <= "
                        "self.max__dot__compaction__dot__lag__dot__ms",
                        "message": "min.compaction.lag.ms must not exceed max.compaction.lag.ms",
                    }
                ],
            },
        },
    }
    partition: Schema = {
        "type": "object",
        "description": "One partition as its worker reports it.",
        "properties": {
            "partition": {"type": "integer", "description": "Partition number."},
            "logStartOffset": {
                "type": "integer",
                "format": "int64",
                "description": "First offset.",
            },
            "logEndOffset": {"type": "integer", "format": "int64", "description": "Next offset."},
            "sizeBytes": {"type": "integer", "format": "int64", "description": "Bytes on disk."},
            "segments": {"type": "integer", "description": "Segment count."},
            "dirtyRatio": {"type": "number", "description": "Dirty fraction (compacted)."},
            "cleanerState": {"type": "string", "description": "idle or Kafka's cleaning state."},
            "lastCleanTime": {
                "type": "string",
                "format": "date-time",
                "description": "End of the last clean.",
            },
            "lastCleanResult": {"type": "string", "description": "Summary of the last clean."},
            "uncleanable": {"type": "boolean", "description": "The cleaner gave up on it."},
            "uncleanableReason": {"type": "string", "description": "Why."},
        },
    }
    status: Schema = {
        "type": "object",
        "description": "What the operator and the worker report.",
        "properties": {
            **STATUS_COMMON,
            "topicName": {"type": "string", "description": "The Kafka topic name in use."},
            "partitions": {"type": "integer", "description": "Partitions the worker has."},
            "sizeBytes": {"type": "integer", "format": "int64", "description": "All partitions."},
            "maxDirtyRatio": {"type": "number", "description": "Highest dirty ratio."},
            "uncleanablePartitions": {
                "type": "integer",
                "description": "Partitions the cleaner gave up on.",
            },
            "partitionStatus": {
                "type": "array",
                "maxItems": PARTITION_STATUS_MAX,
                "description": (
                    f"Per partition: all of them up to {PARTITION_STATUS_MAX}; beyond, that many"
                    " (uncleanable or offline first, then the dirtiest), by partition."
                ),
                "items": partition,
            },
            "partitionStatusOmitted": {
                "type": "integer",
                "description": "Partitions partitionStatus leaves out (beyond its limit).",
            },
        },
    }
    return custom_resource_definition(
        plural="topics",
        kind="Topic",
        short_names=["lktopic"],
        description="A Kafka topic kept on a StorageVolume: retention and compaction.",
        spec=spec,
        status=status,
        columns=[
            column("Ready", '.status.conditions[?(@.type=="Ready")].status', "string"),
            column("Volume", ".spec.volume", "string"),
            column("Partitions", ".spec.partitions", "integer"),
            column("Size", ".status.sizeBytes", "integer"),
            column("Dirty", ".status.maxDirtyRatio", "number"),
            column("Age", ".metadata.creationTimestamp", "date"),
        ],
    )
