"""The requests and responses the ``kafka`` port serves, field by field.

Transcribed from Kafka's message specifications (``clients/src/main/resources/common/message``)
for the versions listed in :data:`MESSAGES`: the worker serves each API from the oldest version
Kafka 4 still accepts to the newest version that addresses topics by name (Fetch 13+ and
Produce 13+ use topic IDs, which a client then asks for only if offered). Field names are the
specifications' names in snake_case; ``f(name, type, versions, nullable=..., tag=...,
default=...)`` is :func:`storageworker.kafka.schema.f`. The consumer groups' messages are
declared in :mod:`storageworker.kafka.group_messages`.
"""

from __future__ import annotations

from typing import Final

from storageworker.kafka.group_messages import (
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    PARTITION_ERRORS,
    SYNC_GROUP,
)
from storageworker.kafka.schema import Message, f, message
from storageworker.kafka.topic_admin_messages import TOPIC_ADMIN_MESSAGES
from storageworker.kafka.txn_messages import TXN_MESSAGES

INT32_MIN: Final = -(1 << 31)

PRODUCE: Final = message(
    0,
    "Produce",
    "3-9",
    "9+",
    request=[
        f("transactional_id", "string", "3+", nullable="3+"),
        f("acks", "int16"),
        f("timeout_ms", "int32"),
        f(
            "topic_data",
            "[]",
            fields=[
                f("name", "string"),
                f(
                    "partition_data",
                    "[]",
                    fields=[f("index", "int32"), f("records", "records", nullable="0+")],
                ),
            ],
        ),
    ],
    response=[
        f(
            "responses",
            "[]",
            fields=[
                f("name", "string"),
                f(
                    "partition_responses",
                    "[]",
                    fields=[
                        f("index", "int32"),
                        f("error_code", "int16"),
                        f("base_offset", "int64"),
                        f("log_append_time_ms", "int64", "2+", default=-1),
                        f("log_start_offset", "int64", "5+", default=-1),
                        f(
                            "record_errors",
                            "[]",
                            "8+",
                            fields=[
                                f("batch_index", "int32", "8+"),
                                f("batch_index_error_message", "string", "8+", nullable="8+"),
                            ],
                        ),
                        f("error_message", "string", "8+", nullable="8+"),
                    ],
                ),
            ],
        ),
        f("throttle_time_ms", "int32", "1+"),
    ],
)

FETCH: Final = message(
    1,
    "Fetch",
    "4-12",
    "12+",
    request=[
        f("cluster_id", "string", "12+", nullable="12+", tag=0),
        f("replica_id", "int32", "0-14", default=-1),
        f("max_wait_ms", "int32"),
        f("min_bytes", "int32"),
        f("max_bytes", "int32", "3+", default=0x7FFFFFFF),
        f("isolation_level", "int8", "4+"),
        f("session_id", "int32", "7+"),
        f("session_epoch", "int32", "7+", default=-1),
        f(
            "topics",
            "[]",
            fields=[
                f("topic", "string", "0-12"),
                f(
                    "partitions",
                    "[]",
                    fields=[
                        f("partition", "int32"),
                        f("current_leader_epoch", "int32", "9+", default=-1),
                        f("fetch_offset", "int64"),
                        f("last_fetched_epoch", "int32", "12+", default=-1),
                        f("log_start_offset", "int64", "5+", default=-1),
                        f("partition_max_bytes", "int32"),
                    ],
                ),
            ],
        ),
        f(
            "forgotten_topics_data",
            "[]",
            "7+",
            fields=[f("topic", "string", "7-12"), f("partitions", "[]int32", "7+")],
        ),
        f("rack_id", "string", "11+"),
    ],
    response=[
        f("throttle_time_ms", "int32", "1+"),
        f("error_code", "int16", "7+"),
        f("session_id", "int32", "7+"),
        f(
            "responses",
            "[]",
            fields=[
                f("topic", "string", "0-12"),
                f(
                    "partitions",
                    "[]",
                    fields=[
                        f("partition_index", "int32"),
                        f("error_code", "int16"),
                        f("high_watermark", "int64"),
                        f("last_stable_offset", "int64", "4+", default=-1),
                        f("log_start_offset", "int64", "5+", default=-1),
                        f(
                            "aborted_transactions",
                            "[]",
                            "4+",
                            nullable="4+",
                            fields=[f("producer_id", "int64"), f("first_offset", "int64")],
                        ),
                        f("preferred_read_replica", "int32", "11+", default=-1),
                        f("records", "records", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)

LIST_OFFSETS: Final = message(
    2,
    "ListOffsets",
    "1-7",
    "6+",
    request=[
        f("replica_id", "int32"),
        f("isolation_level", "int8", "2+"),
        f(
            "topics",
            "[]",
            fields=[
                f("name", "string"),
                f(
                    "partitions",
                    "[]",
                    fields=[
                        f("partition_index", "int32"),
                        f("current_leader_epoch", "int32", "4+", default=-1),
                        f("timestamp", "int64"),
                    ],
                ),
            ],
        ),
    ],
    response=[
        f("throttle_time_ms", "int32", "2+"),
        f(
            "topics",
            "[]",
            fields=[
                f("name", "string"),
                f(
                    "partitions",
                    "[]",
                    fields=[
                        *PARTITION_ERRORS,
                        f("timestamp", "int64", "1+", default=-1),
                        f("offset", "int64", "1+", default=-1),
                        f("leader_epoch", "int32", "4+", default=-1),
                    ],
                ),
            ],
        ),
    ],
)

METADATA: Final = message(
    3,
    "Metadata",
    "1-12",
    "9+",
    request=[
        f(
            "topics",
            "[]",
            nullable="1+",
            fields=[f("topic_id", "uuid", "10+"), f("name", "string", nullable="10+")],
        ),
        f("allow_auto_topic_creation", "bool", "4+", default=True),
        f("include_cluster_authorized_operations", "bool", "8-10"),
        f("include_topic_authorized_operations", "bool", "8+"),
    ],
    response=[
        f("throttle_time_ms", "int32", "3+"),
        f(
            "brokers",
            "[]",
            fields=[
                f("node_id", "int32"),
                f("host", "string"),
                f("port", "int32"),
                f("rack", "string", "1+", nullable="1+"),
            ],
        ),
        f("cluster_id", "string", "2+", nullable="2+"),
        f("controller_id", "int32", "1+", default=-1),
        f(
            "topics",
            "[]",
            fields=[
                f("error_code", "int16"),
                f("name", "string", nullable="12+"),
                f("topic_id", "uuid", "10+"),
                f("is_internal", "bool", "1+"),
                f(
                    "partitions",
                    "[]",
                    fields=[
                        f("error_code", "int16"),
                        f("partition_index", "int32"),
                        f("leader_id", "int32"),
                        f("leader_epoch", "int32", "7+", default=-1),
                        f("replica_nodes", "[]int32"),
                        f("isr_nodes", "[]int32"),
                        f("offline_replicas", "[]int32", "5+"),
                    ],
                ),
                f("topic_authorized_operations", "int32", "8+", default=INT32_MIN),
            ],
        ),
        f("cluster_authorized_operations", "int32", "8-10", default=INT32_MIN),
    ],
)

SASL_HANDSHAKE: Final = message(
    17,
    "SaslHandshake",
    "1",
    "none",
    request=[f("mechanism", "string")],
    response=[f("error_code", "int16"), f("mechanisms", "[]string")],
)

API_VERSIONS: Final = message(
    18,
    "ApiVersions",
    "0-3",
    "3+",
    request=[
        f("client_software_name", "string", "3+"),
        f("client_software_version", "string", "3+"),
    ],
    response=[
        f("error_code", "int16"),
        f(
            "api_keys",
            "[]",
            fields=[
                f("api_key", "int16"),
                f("min_version", "int16"),
                f("max_version", "int16"),
            ],
        ),
        f("throttle_time_ms", "int32", "1+"),
    ],
)

INIT_PRODUCER_ID: Final = message(
    22,
    "InitProducerId",
    "0-5",
    "2+",
    request=[
        f("transactional_id", "string", nullable="0+"),
        f("transaction_timeout_ms", "int32"),
        f("producer_id", "int64", "3+", default=-1),
        f("producer_epoch", "int16", "3+", default=-1),
    ],
    response=[
        f("throttle_time_ms", "int32"),
        f("error_code", "int16"),
        f("producer_id", "int64", default=-1),
        f("producer_epoch", "int16"),
    ],
)

DELETE_RECORDS: Final = message(
    21,
    "DeleteRecords",
    "0-2",
    "2+",
    request=[
        f(
            "topics",
            "[]",
            fields=[
                f("name", "string"),
                f("partitions", "[]", fields=[f("partition_index", "int32"), f("offset", "int64")]),
            ],
        ),
        f("timeout_ms", "int32"),
    ],
    response=[
        f("throttle_time_ms", "int32"),
        f(
            "topics",
            "[]",
            fields=[
                f("name", "string"),
                f(
                    "partitions",
                    "[]",
                    fields=[
                        f("partition_index", "int32"),
                        f("low_watermark", "int64", default=-1),  # -1 with an error
                        f("error_code", "int16"),
                    ],
                ),
            ],
        ),
    ],
)

DESCRIBE_CONFIGS: Final = message(
    32,
    "DescribeConfigs",
    "1-4",
    "4+",
    request=[
        f(
            "resources",
            "[]",
            fields=[
                f("resource_type", "int8"),
                f("resource_name", "string"),
                f("configuration_keys", "[]string", nullable="0+"),
            ],
        ),
        f("include_synonyms", "bool", "1+"),
        f("include_documentation", "bool", "3+"),
    ],
    response=[
        f("throttle_time_ms", "int32"),
        f(
            "results",
            "[]",
            fields=[
                f("error_code", "int16"),
                f("error_message", "string", nullable="0+"),
                f("resource_type", "int8"),
                f("resource_name", "string"),
                f(
                    "configs",
                    "[]",
                    fields=[
                        f("name", "string"),
                        f("value", "string", nullable="0+"),
                        f("read_only", "bool"),
                        f("is_default", "bool", "0"),
                        f("config_source", "int8", "1+", default=-1),
                        f("is_sensitive", "bool"),
                        f(
                            "synonyms",
                            "[]",
                            "1+",
                            fields=[
                                f("name", "string", "1+"),
                                f("value", "string", "1+", nullable="1+"),
                                f("source", "int8", "1+"),
                            ],
                        ),
                        f("config_type", "int8", "3+"),
                        f("documentation", "string", "3+", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)

SASL_AUTHENTICATE: Final = message(
    36,
    "SaslAuthenticate",
    "0-2",
    "2+",
    request=[f("auth_bytes", "bytes")],
    response=[
        f("error_code", "int16"),
        f("error_message", "string", nullable="0+"),
        f("auth_bytes", "bytes"),
        f("session_lifetime_ms", "int64", "1+"),
    ],
)

MESSAGES: Final[dict[int, Message]] = {
    m.api_key: m
    for m in (
        PRODUCE,
        FETCH,
        LIST_OFFSETS,
        METADATA,
        OFFSET_COMMIT,
        OFFSET_FETCH,
        FIND_COORDINATOR,
        JOIN_GROUP,
        HEARTBEAT,
        LEAVE_GROUP,
        SYNC_GROUP,
        SASL_HANDSHAKE,
        API_VERSIONS,
        DELETE_RECORDS,
        INIT_PRODUCER_ID,
        DESCRIBE_CONFIGS,
        SASL_AUTHENTICATE,
        *TXN_MESSAGES,
        *TOPIC_ADMIN_MESSAGES,
    )
}
