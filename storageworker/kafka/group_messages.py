"""The requests and responses of consumer groups, field by field: the coordinator's lookup,
membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) and committed offsets (OffsetCommit,
OffsetFetch).

Transcribed from Kafka's message specifications like :mod:`storageworker.kafka.messages`, which
lists them in :data:`~storageworker.kafka.messages.MESSAGES` with the other APIs; this module
only declares them (the coordinator is :mod:`storageworker.kafka.groups`).
"""

from __future__ import annotations

from typing import Final

from storageworker.kafka.schema import f, message

#: A partition's error in a response (OffsetCommit's here, DeleteRecords' in messages.py).
PARTITION_ERRORS: Final = (
    f("partition_index", "int32"),
    f("error_code", "int16"),
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
            fields=[f("name", "string"), f("partitions", "[]", fields=PARTITION_ERRORS)],
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
