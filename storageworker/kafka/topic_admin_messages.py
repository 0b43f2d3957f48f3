"""The requests and responses of the Admin API's topic calls, field by field.

CreateTopics, DeleteTopics, CreatePartitions and IncrementalAlterConfigs, transcribed from
Kafka's message specifications (``clients/src/main/resources/common/message``) for the versions
Kafka 4 accepts. Served by :mod:`storageworker.kafka.admin_topics`; registered in
:data:`storageworker.kafka.messages.MESSAGES`. Declarations only: no state, no behaviour.
"""

from __future__ import annotations

from typing import Final

from storageworker.kafka.schema import f, message

CREATE_TOPICS: Final = message(
    19,
    "CreateTopics",
    "2-7",
    "5+",
    request=[
        f(
            "topics",
            "[]",
            fields=[
                f("name", "string"),
                f("num_partitions", "int32"),
                f("replication_factor", "int16"),
                f(
                    "assignments",
                    "[]",
                    fields=[f("partition_index", "int32"), f("broker_ids", "[]int32")],
                ),
                f(
                    "configs",
                    "[]",
                    fields=[f("name", "string"), f("value", "string", nullable="0+")],
                ),
            ],
        ),
        f("timeout_ms", "int32", default=60_000),
        f("validate_only", "bool", "1+"),
    ],
    response=[
        f("throttle_time_ms", "int32", "2+"),
        f(
            "topics",
            "[]",
            fields=[
                f("name", "string"),
                f("topic_id", "uuid", "7+"),
                f("error_code", "int16"),
                f("error_message", "string", "1+", nullable="0+"),
                f("topic_config_error_code", "int16", "5+", tag=0),
                f("num_partitions", "int32", "5+", default=-1),
                f("replication_factor", "int16", "5+", default=-1),
                f(
                    "configs",
                    "[]",
                    "5+",
                    nullable="5+",
                    fields=[
                        f("name", "string", "5+"),
                        f("value", "string", "5+", nullable="5+"),
                        f("read_only", "bool", "5+"),
                        f("config_source", "int8", "5+", default=-1),
                        f("is_sensitive", "bool", "5+"),
                    ],
                ),
            ],
        ),
    ],
)

DELETE_TOPICS: Final = message(
    20,
    "DeleteTopics",
    "1-6",
    "4+",
    request=[
        f(
            "topics",
            "[]",
            "6+",
            fields=[f("name", "string", "6+", nullable="6+"), f("topic_id", "uuid", "6+")],
        ),
        f("topic_names", "[]string", "0-5"),
        f("timeout_ms", "int32"),
    ],
    response=[
        f("throttle_time_ms", "int32", "1+"),
        f(
            "responses",
            "[]",
            fields=[
                f("name", "string", nullable="6+"),
                f("topic_id", "uuid", "6+"),
                f("error_code", "int16"),
                f("error_message", "string", "5+", nullable="5+"),
            ],
        ),
    ],
)

CREATE_PARTITIONS: Final = message(
    37,
    "CreatePartitions",
    "0-3",
    "2+",
    request=[
        f(
            "topics",
            "[]",
            fields=[
                f("name", "string"),
                f("count", "int32"),
                f(
                    "assignments",
                    "[]",
                    nullable="0+",
                    fields=[f("broker_ids", "[]int32")],
                ),
            ],
        ),
        f("timeout_ms", "int32"),
        f("validate_only", "bool"),
    ],
    response=[
        f("throttle_time_ms", "int32"),
        f(
            "results",
            "[]",
            fields=[
                f("name", "string"),
                f("error_code", "int16"),
                f("error_message", "string", nullable="0+"),
            ],
        ),
    ],
)

INCREMENTAL_ALTER_CONFIGS: Final = message(
    44,
    "IncrementalAlterConfigs",
    "0-1",
    "1+",
    request=[
        f(
            "resources",
            "[]",
            fields=[
                f("resource_type", "int8"),
                f("resource_name", "string"),
                f(
                    "configs",
                    "[]",
                    fields=[
                        f("name", "string"),
                        f("config_operation", "int8"),
                        f("value", "string", nullable="0+"),
                    ],
                ),
            ],
        ),
        f("validate_only", "bool"),
    ],
    response=[
        f("throttle_time_ms", "int32"),
        f(
            "responses",
            "[]",
            fields=[
                f("error_code", "int16"),
                f("error_message", "string", nullable="0+"),
                f("resource_type", "int8"),
                f("resource_name", "string"),
            ],
        ),
    ],
)

TOPIC_ADMIN_MESSAGES: Final = (
    CREATE_TOPICS,
    DELETE_TOPICS,
    CREATE_PARTITIONS,
    INCREMENTAL_ALTER_CONFIGS,
)
