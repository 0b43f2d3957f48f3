"""The StorageVolume CustomResourceDefinition: the volume, its worker, the cleaner's settings,
compaction windows, client topic prefixes and the Kafka port's namespaces, and its status
(summaries, the client topics up to CLIENT_TOPICS_SHOWN). Pure data, assembled by
:mod:`storageoperator.crds`.
"""

from __future__ import annotations

from typing import Any, Final

from storagecore.config import DEDUPE_BUFFER_SIZE_DEFAULT, DEDUPE_BUFFER_SIZE_MIN_PER_THREAD
from storageoperator.conditions import CLIENT_TOPICS_SHOWN
from storageoperator.crd_schema import (
    STATUS_COMMON,
    Schema,
    column,
    custom_resource_definition,
)
from storageoperator.network_policy import (
    ALLOWED_NAMESPACES_MAX,
    NAMESPACE_LENGTH_MAX,
    NAMESPACE_PATTERN,
)

#: The most prefixes ``spec.clientTopicPrefixes`` may list.
CLIENT_TOPIC_PREFIXES_MAX: Final = 64

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
            **STATUS_COMMON,
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
    return custom_resource_definition(
        plural="storagevolumes",
        kind="StorageVolume",
        short_names=["lkvol"],
        description="A storage volume holding Kafka-format topic logs, and its worker.",
        spec=spec,
        status=status,
        columns=[
            column("Ready", '.status.conditions[?(@.type=="Ready")].status', "string"),
            column("Size", ".spec.size", "string"),
            column("Partitions", ".status.partitions", "integer"),
            column("Bytes", ".status.sizeBytes", "integer"),
            column("Dirty", ".status.maxDirtyRatio", "number"),
            column("Age", ".metadata.creationTimestamp", "date"),
        ],
    )
