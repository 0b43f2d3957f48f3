"""The requests and responses the ``kafka`` port serves, field by field.

Transcribed from Kafka's message specifications (``clients/src/main/resources/common/message``)
for the versions listed in :data:`MESSAGES`: the worker serves each API from the oldest version
Kafka 4 still accepts to the newest version that addresses topics by name (Fetch 13+ and
Produce 13+ use topic IDs, which a client then asks for only if offered). Field names are the
specifications' names in snake_case; ``f(name, type, versions, nullable=..., tag=...,
default=...)`` is :func:`storageworker.kafka.schema.f`.
"""

from __future__ import annotations

from typing import Final

from storageworker.kafka.schema import Message, f, message

INT32_MIN: Final = -(1 << 31)

_TOPIC_PARTITION_ERRORS = (
    f("partition_index", "int32"),
    f("error_code", "int16"),
)

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
                        *_TOPIC_PARTITION_ERRORS,
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

OFFSET_COMMIT: Final = message(
    8,
    "OffsetCommit",
    "2-8",
    "8+",
    request=[
        f("group_id", "string"),
        f("generation_id_or_member_epoch", "int32", "1+", default=-1),
        f("member_id", "string", "1+"),
        f("group_instance_id", "string", "7+", nullable="7+"),
        f("retention_time_ms", "int64", "2-4", default=-1),
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
                        f("committed_offset", "int64"),
                        f("committed_leader_epoch", "int32", "6+", default=-1),
                        f("committed_metadata", "string", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
    response=[
        f("throttle_time_ms", "int32", "3+"),
        f(
            "topics",
            "[]",
            fields=[f("name", "string"), f("partitions", "[]", fields=_TOPIC_PARTITION_ERRORS)],
        ),
    ],
)

OFFSET_FETCH: Final = message(
    9,
    "OffsetFetch",
    "1-7",
    "6+",
    request=[
        f("group_id", "string"),
        f(
            "topics",
            "[]",
            nullable="2+",
            fields=[f("name", "string"), f("partition_indexes", "[]int32")],
        ),
        f("require_stable", "bool", "7+"),
    ],
    response=[
        f("throttle_time_ms", "int32", "3+"),
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
                        f("committed_offset", "int64"),
                        f("committed_leader_epoch", "int32", "5+", default=-1),
                        f("metadata", "string", nullable="0+"),
                        f("error_code", "int16"),
                    ],
                ),
            ],
        ),
        f("error_code", "int16", "2+"),
    ],
)

FIND_COORDINATOR: Final = message(
    10,
    "FindCoordinator",
    "0-4",
    "3+",
    request=[
        f("key", "string", "0-3"),
        f("key_type", "int8", "1+"),
        f("coordinator_keys", "[]string", "4+"),
    ],
    response=[
        f("throttle_time_ms", "int32", "1+"),
        f("error_code", "int16", "0-3"),
        f("error_message", "string", "1-3", nullable="1-3"),
        f("node_id", "int32", "0-3"),
        f("host", "string", "0-3"),
        f("port", "int32", "0-3"),
        f(
            "coordinators",
            "[]",
            "4+",
            fields=[
                f("key", "string", "4+"),
                f("node_id", "int32", "4+"),
                f("host", "string", "4+"),
                f("port", "int32", "4+"),
                f("error_code", "int16", "4+"),
                f("error_message", "string", "4+", nullable="4+"),
            ],
        ),
    ],
)

JOIN_GROUP: Final = message(
    11,
    "JoinGroup",
    "0-9",
    "6+",
    request=[
        f("group_id", "string"),
        f("session_timeout_ms", "int32"),
        f("rebalance_timeout_ms", "int32", "1+", default=-1),
        f("member_id", "string"),
        f("group_instance_id", "string", "5+", nullable="5+"),
        f("protocol_type", "string"),
        f("protocols", "[]", fields=[f("name", "string"), f("metadata", "bytes")]),
        f("reason", "string", "8+", nullable="8+"),
    ],
    response=[
        f("throttle_time_ms", "int32", "2+"),
        f("error_code", "int16"),
        f("generation_id", "int32", default=-1),
        f("protocol_type", "string", "7+", nullable="7+"),
        f("protocol_name", "string", nullable="7+"),
        f("leader", "string"),
        f("skip_assignment", "bool", "9+"),
        f("member_id", "string"),
        f(
            "members",
            "[]",
            fields=[
                f("member_id", "string"),
                f("group_instance_id", "string", "5+", nullable="5+"),
                f("metadata", "bytes"),
            ],
        ),
    ],
)

HEARTBEAT: Final = message(
    12,
    "Heartbeat",
    "0-4",
    "4+",
    request=[
        f("group_id", "string"),
        f("generation_id", "int32"),
        f("member_id", "string"),
        f("group_instance_id", "string", "3+", nullable="3+"),
    ],
    response=[f("throttle_time_ms", "int32", "1+"), f("error_code", "int16")],
)

LEAVE_GROUP: Final = message(
    13,
    "LeaveGroup",
    "0-5",
    "4+",
    request=[
        f("group_id", "string"),
        f("member_id", "string", "0-2"),
        f(
            "members",
            "[]",
            "3+",
            fields=[
                f("member_id", "string", "3+"),
                f("group_instance_id", "string", "3+", nullable="3+"),
                f("reason", "string", "5+", nullable="5+"),
            ],
        ),
    ],
    response=[
        f("throttle_time_ms", "int32", "1+"),
        f("error_code", "int16"),
        f(
            "members",
            "[]",
            "3+",
            fields=[
                f("member_id", "string", "3+"),
                f("group_instance_id", "string", "3+", nullable="3+"),
                f("error_code", "int16", "3+"),
            ],
        ),
    ],
)

SYNC_GROUP: Final = message(
    14,
    "SyncGroup",
    "0-5",
    "4+",
    request=[
        f("group_id", "string"),
        f("generation_id", "int32"),
        f("member_id", "string"),
        f("group_instance_id", "string", "3+", nullable="3+"),
        f("protocol_type", "string", "5+", nullable="5+"),
        f("protocol_name", "string", "5+", nullable="5+"),
        f("assignments", "[]", fields=[f("member_id", "string"), f("assignment", "bytes")]),
    ],
    response=[
        f("throttle_time_ms", "int32", "1+"),
        f("error_code", "int16"),
        f("protocol_type", "string", "5+", nullable="5+"),
        f("protocol_name", "string", "5+", nullable="5+"),
        f("assignment", "bytes"),
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
    "0-4",
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
    )
}
