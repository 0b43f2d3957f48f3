"""The CustomResourceDefinitions, built here and written to ``crds/`` (and the chart's copy).

``python -m storageoperator.crds`` rewrites the files; a test checks that the committed ones
are what this module builds, that the chart's copy is identical, and that the schema bounds of
every Kafka key agree with storagecore's config rules (the value at a bound is accepted by
both, the value past it refused by both). Structural schemas: every node has a type and a
description; lists and maps that CEL rules walk are bounded.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final

import yaml

from storagecore.config import (
    COMPRESSION_TYPES,
    DEDUPE_BUFFER_SIZE_DEFAULT,
    DEDUPE_BUFFER_SIZE_MIN_PER_THREAD,
    INT_MAX,
    LONG_MAX,
    TIMESTAMP_TYPES,
)
from storageoperator.conditions import CLIENT_TOPICS_SHOWN, PARTITION_STATUS_MAX
from storageoperator.network_policy import (
    ALLOWED_NAMESPACES_MAX,
    NAMESPACE_LENGTH_MAX,
    NAMESPACE_PATTERN,
)

GROUP: Final = "logkeeper.io"
#: The most prefixes ``spec.clientTopicPrefixes`` may list.
CLIENT_TOPIC_PREFIXES_MAX: Final = 64
VERSION: Final = "v1alpha1"

Schema = dict[str, Any]


def _int(description: str, minimum: int, maximum: int = LONG_MAX) -> Schema:
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
    "compression.gzip.level": _int("gzip level (-1: the codec's default).", -1, 9),
    "compression.lz4.level": _int("lz4 level.", 1, 17),
    "compression.zstd.level": _int("zstd level.", -131072, 22),
    "delete.retention.ms": _int("How long tombstones stay after compaction (ms).", 0),
    "file.delete.delay.ms": _int("Delay before a deleted segment's files are removed (ms).", 0),
    "flush.messages": _int("Flush after this many records.", 1),
    "flush.ms": _int("Flush when the oldest unflushed record is this old (ms).", 0),
    "index.interval.bytes": _int("Bytes between offset index entries.", 0, INT_MAX),
    "max.compaction.lag.ms": _int("A record stays uncompacted at most this long (ms).", 1),
    "max.message.bytes": _int("Largest record batch accepted (bytes).", 0, INT_MAX),
    "message.timestamp.type": {
        "type": "string",
        "enum": list(TIMESTAMP_TYPES),
        "description": "Record timestamps from the producer or the time of append.",
    },
    "message.timestamp.before.max.ms": _int("Oldest accepted CreateTime, before now (ms).", 0),
    "message.timestamp.after.max.ms": _int("Newest accepted CreateTime, after now (ms).", 0),
    "min.cleanable.dirty.ratio": {
        "type": "number",
        "minimum": 0,
        "maximum": 1,
        "description": "Dirty fraction of the log above which the cleaner picks it.",
    },
    "min.compaction.lag.ms": _int("A record stays uncompacted at least this long (ms).", 0),
    "preallocate": {
        "type": "boolean",
        "description": "Accepted for compatibility; segment files are never preallocated.",
    },
    "retention.bytes": _int("Per-partition size limit (bytes); -1: none.", -1),
    "retention.ms": _int("Time limit (ms); -1: none.", -1),
    "segment.bytes": _int("Segment size at which the log rolls (bytes).", 14, INT_MAX),
    "segment.index.bytes": _int("Offset index size limit per segment (bytes).", 4, INT_MAX),
    "segment.jitter.ms": _int("Random jitter subtracted from segment.ms (ms).", 0),
    "segment.ms": _int("Segment age at which the log rolls (ms).", 1),
    # Replication and broker keys: accepted and without effect (a config copied from Kafka).
    "min.insync.replicas": _int("Accepted, no effect (no replication here).", 1),
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

_CONDITION: Final[Schema] = {
    "type": "object",
    "description": "A metav1.Condition.",
    "required": ["type", "status", "lastTransitionTime", "reason", "message"],
    "properties": {
        "type": {"type": "string", "maxLength": 316, "description": "CamelCase condition type."},
        "status": {
            "type": "string",
            "enum": ["True", "False", "Unknown"],
            "description": "True, False or Unknown.",
        },
        "observedGeneration": {
            "type": "integer",
            "format": "int64",
            "minimum": 0,
            "description": "The generation this condition was set for.",
        },
        "lastTransitionTime": {
            "type": "string",
            "format": "date-time",
            "description": "When the status last changed.",
        },
        "reason": {
            "type": "string",
            "maxLength": 1024,
            "minLength": 1,
            "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            "description": "CamelCase reason.",
        },
        "message": {"type": "string", "maxLength": 32768, "description": "Human-readable."},
    },
}

_CONDITIONS: Final[Schema] = {
    "type": "array",
    "description": "Ready, Progressing, Degraded, CleaningPaused, RetentionPaused, "
    "ReconciliationPaused.",
    "maxItems": 16,
    "items": _CONDITION,
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}

#: What the status of both resources starts with.
_STATUS_COMMON: Final[Schema] = {
    "observedGeneration": {
        "type": "integer",
        "format": "int64",
        "description": "The generation last acted on.",
    },
    "conditions": _CONDITIONS,
}

_QUANTITY: Final = r"^([+]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_HHMM: Final = r"([01][0-9]|2[0-3]):[0-5][0-9]"
_WINDOW_PATTERN: Final = rf"^{_HHMM}-({_HHMM}|24:00)$"


def _resources() -> Schema:
    amounts: Schema = {
        "type": "object",
        "description": "cpu and memory amounts.",
        "maxProperties": 8,
        "additionalProperties": {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
        },
    }
    return {
        "type": "object",
        "description": "The worker container's requests and limits.",
        "properties": {
            "requests": {**amounts, "description": "Requests (cpu, memory)."},
            "limits": {**amounts, "description": "Limits (cpu, memory)."},
        },
    }


def storage_volume_crd() -> dict[str, Any]:
    spec: Schema = {
        "type": "object",
        "description": "The volume and its worker.",
        "required": ["size"],
        "properties": {
            "size": {
                "type": "string",
                "pattern": _QUANTITY,
                "description": "Size of the PersistentVolumeClaim (a quantity, e.g. 10Gi).",
            },
            "storageClassName": {
                "type": "string",
                "maxLength": 253,
                "description": "StorageClass of the claim (default: the cluster's).",
            },
            "image": {
                "type": "string",
                "maxLength": 1024,
                "description": "Worker image (default: the operator's own image).",
            },
            "resources": _resources(),
            "cleaner": {
                "type": "object",
                "description": "The log cleaner (Kafka's log.cleaner.* settings).",
                "x-kubernetes-validations": [
                    {
                        # Kafka's rule, which one number of the schema cannot express.
                        "rule": "!has(self.dedupeBufferBytes) || self.dedupeBufferBytes >= "
                        f"{DEDUPE_BUFFER_SIZE_MIN_PER_THREAD} * "
                        "(has(self.threads) ? self.threads : 1)",
                        "message": "dedupeBufferBytes must be at least "
                        f"{DEDUPE_BUFFER_SIZE_MIN_PER_THREAD} bytes per cleaner thread",
                    }
                ],
                "properties": {
                    "threads": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 64,
                        "default": 1,
                        "description": "log.cleaner.threads.",
                    },
                    "dedupeBufferBytes": {
                        "type": "integer",
                        "format": "int64",
                        "minimum": DEDUPE_BUFFER_SIZE_MIN_PER_THREAD,
                        "default": DEDUPE_BUFFER_SIZE_DEFAULT,
                        "description": "log.cleaner.dedupe.buffer.size: offset map memory of "
                        "all cleaner threads, split over them (at least "
                        f"{DEDUPE_BUFFER_SIZE_MIN_PER_THREAD} per thread).",
                    },
                    "ioMaxBytesPerSecond": {
                        "type": "integer",
                        "format": "int64",
                        "minimum": 1,
                        "description": "log.cleaner.io.max.bytes.per.second (default: no limit).",
                    },
                    "backoffMs": {
                        "type": "integer",
                        "format": "int64",
                        "minimum": 0,
                        "default": 15000,
                        "description": "log.cleaner.backoff.ms.",
                    },
                },
            },
            "retentionCheckIntervalMs": {
                "type": "integer",
                "format": "int64",
                "minimum": 1000,
                "default": 300000,
                "description": "How often retention runs (log.retention.check.interval.ms).",
            },
            "compactionLagLeadMs": {
                "type": "integer",
                "format": "int64",
                "minimum": 0,
                "description": "Outside the windows, clean a log anyway when its "
                "max.compaction.lag.ms would be breached this soon.",
            },
            "minFreeBytes": {
                "type": "integer",
                "format": "int64",
                "minimum": 0,
                "description": "Free-space floor of each data directory: below it produce "
                "requests are refused with the retriable KAFKA_STORAGE_ERROR (retention and the "
                "cleaner go on) until space is back. Default: the smaller of 5% of the volume and "
                "512 MiB.",
            },
            "clientTopicPrefixes": {
                "type": "array",
                "maxItems": CLIENT_TOPIC_PREFIXES_MAX,
                "description": "Kafka clients (Streams, Connect, the Admin API) may create, grow, "
                "reconfigure and delete topics whose names start with one of these prefixes; "
                "unset or empty: off. A Topic resource of the same name adopts such a topic. "
                '"" allows any name.',
                "items": {
                    "type": "string",
                    "maxLength": 249,
                    "pattern": "^[a-zA-Z0-9._-]*$",
                    "description": "The start of a topic name (Kafka's name characters).",
                },
            },
            "maxOpenFiles": {
                "type": "integer",
                "format": "int64",
                "minimum": 16,
                "description": "At most this many segment files (.log, .index, .timeindex) "
                "open at once: the active and recently used segments stay open, the others "
                "are opened on use (like RocksDB's max_open_files). Default: half the worker "
                "process's soft open-files limit, at most 16384. Client connections and "
                "checkpoints come on top.",
            },
            "compactionWindows": {
                "type": "object",
                "description": "When the cleaner may start new work (default: always).",
                "properties": {
                    "timeZone": {
                        "type": "string",
                        "maxLength": 64,
                        "default": "UTC",
                        "description": "IANA time zone of the windows.",
                    },
                    "windows": {
                        "type": "array",
                        "maxItems": 24,
                        "description": 'Daily windows such as "22:00-06:00".',
                        "items": {
                            "type": "string",
                            "maxLength": 11,
                            "pattern": _WINDOW_PATTERN,
                            "description": "HH:MM-HH:MM; an end before the start crosses "
                            "midnight, an end equal to it is the whole day.",
                        },
                    },
                },
            },
            "worker": {
                "type": "object",
                "description": "Worker intervals and logging.",
                "properties": {
                    **{
                        key: {
                            "type": "integer",
                            "format": "int64",
                            "minimum": 1,
                            "description": text,
                        }
                        for key, text in (
                            ("flushCheckIntervalMs", "How often logs past flush.ms are flushed."),
                            (
                                "checkpointIntervalMs",
                                "Recovery point and start offset checkpoints.",
                            ),
                            (
                                "deleteCheckIntervalMs",
                                "Physical deletes after file.delete.delay.ms.",
                            ),
                            ("configReloadIntervalMs", "How often the mounted files are re-read."),
                        )
                    },
                    "shutdownGracePeriodMs": {
                        "type": "integer",
                        "format": "int64",
                        "minimum": 0,
                        "description": "SIGTERM to exit at most (the pod's grace period is "
                        "this plus 5 s).",
                    },
                    "logFormat": {
                        "type": "string",
                        "enum": ["plain", "json"],
                        "description": "Worker log lines.",
                    },
                },
            },
            "kafka": {
                "type": "object",
                "description": "Who reaches the worker's Kafka port.",
                "properties": {
                    "allowedNamespaces": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": ALLOWED_NAMESPACES_MAX,
                        "x-kubernetes-list-type": "set",
                        "description": "Namespaces whose pods may connect to the Kafka port "
                        "(the worker's NetworkPolicy, when the operator renders them); "
                        "default: the StorageVolume's own namespace only. List it too if its "
                        "pods are clients.",
                        "items": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": NAMESPACE_LENGTH_MAX,
                            "pattern": NAMESPACE_PATTERN,
                            "description": "A namespace name (RFC 1123 label).",
                        },
                    },
                },
            },
            "monitoring": {
                "type": "object",
                "description": "Prometheus Operator integration.",
                "properties": {
                    "serviceMonitor": {
                        "type": "boolean",
                        "default": False,
                        "description": "Create a ServiceMonitor for the worker's /metrics.",
                    },
                },
            },
        },
    }
    status: Schema = {
        "type": "object",
        "description": "What the operator and the worker report.",
        "properties": {
            **_STATUS_COMMON,
            "topics": {"type": "integer", "description": "Topics declared on the volume."},
            "partitions": {"type": "integer", "description": "Partitions on the volume."},
            "sizeBytes": {
                "type": "integer",
                "format": "int64",
                "description": "Bytes of all logs.",
            },
            "maxDirtyRatio": {
                "type": "number",
                "description": "Highest dirty ratio of a compacted log.",
            },
            "uncleanablePartitions": {
                "type": "integer",
                "description": "Partitions the cleaner gave up on.",
            },
            "clientTopics": {
                "type": "array",
                "maxItems": CLIENT_TOPICS_SHOWN,
                "description": "Topics Kafka clients created (clientTopicPrefixes) that no "
                f"Topic resource declares: the first {CLIENT_TOPICS_SHOWN} by name "
                "(clientTopicCount counts them all, clientTopicsOmitted those not listed).",
                "items": {
                    "type": "object",
                    "description": "One client topic.",
                    "properties": {
                        "name": {"type": "string", "description": "The topic name."},
                        "partitions": {"type": "integer", "description": "Its partitions."},
                    },
                },
            },
            "clientTopicCount": {
                "type": "integer",
                "description": "How many topics Kafka clients created on the volume.",
            },
            "clientTopicsOmitted": {
                "type": "integer",
                "description": "Client topics beyond the first "
                f"{CLIENT_TOPICS_SHOWN} by name, counted but not listed in clientTopics.",
            },
            "diskFreeBytes": {
                "type": "integer",
                "format": "int64",
                "description": (
                    "Free bytes on the volume; refreshed once it moves by 1% or more (the"
                    " worker's metrics carry the exact figure)."
                ),
            },
        },
    }
    return _crd(
        plural="storagevolumes",
        kind="StorageVolume",
        short_names=["lkvol"],
        description="A storage volume holding Kafka-format topic logs, and its worker.",
        spec=spec,
        status=status,
        columns=[
            _column("Ready", '.status.conditions[?(@.type=="Ready")].status', "string"),
            _column("Size", ".spec.size", "string"),
            _column("Partitions", ".status.partitions", "integer"),
            _column("Bytes", ".status.sizeBytes", "integer"),
            _column("Dirty", ".status.maxDirtyRatio", "number"),
            _column("Age", ".metadata.creationTimestamp", "date"),
        ],
    )


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
            **_STATUS_COMMON,
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
    return _crd(
        plural="topics",
        kind="Topic",
        short_names=["lktopic"],
        description="A Kafka topic kept on a StorageVolume: retention and compaction.",
        spec=spec,
        status=status,
        columns=[
            _column("Ready", '.status.conditions[?(@.type=="Ready")].status', "string"),
            _column("Volume", ".spec.volume", "string"),
            _column("Partitions", ".spec.partitions", "integer"),
            _column("Size", ".status.sizeBytes", "integer"),
            _column("Dirty", ".status.maxDirtyRatio", "number"),
            _column("Age", ".metadata.creationTimestamp", "date"),
        ],
    )


def _column(name: str, path: str, kind: str) -> dict[str, str]:
    return {"name": name, "jsonPath": path, "type": kind}


def _crd(
    *,
    plural: str,
    kind: str,
    short_names: list[str],
    description: str,
    spec: Schema,
    status: Schema,
    columns: list[dict[str, str]],
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "logkeeper"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "listKind": f"{kind}List",
                "shortNames": short_names,
                "categories": ["logkeeper"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "properties": {
                                "apiVersion": {"type": "string", "description": "API version."},
                                "kind": {"type": "string", "description": "Kind."},
                                "metadata": {"type": "object", "description": "Metadata."},
                                "spec": spec,
                                "status": status,
                            },
                            "required": ["spec"],
                        }
                    },
                }
            ],
        },
    }


def all_crds() -> dict[str, dict[str, Any]]:
    """File name → CRD."""
    return {
        "logkeeper.io_storagevolumes.yaml": storage_volume_crd(),
        "logkeeper.io_topics.yaml": topic_crd(),
    }


HEADER: Final = (
    "# Generated by `python -m storageoperator.crds`; edit operator/storageoperator/crds.py.\n"
)


def render(crd: dict[str, Any]) -> str:
    return HEADER + yaml.safe_dump(crd, sort_keys=False, width=100)


def write(root: Path) -> list[Path]:
    written = []
    for directory in (root / "crds", root / "charts" / "logkeeper" / "crds"):
        directory.mkdir(parents=True, exist_ok=True)
        for name, crd in all_crds().items():
            path = directory / name
            path.write_text(render(crd), encoding="utf-8")
            written.append(path)
    return written


if __name__ == "__main__":  # pragma: no cover - a developer's command
    for path in write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()):
        print(path)
