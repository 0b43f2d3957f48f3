"""The transaction coordinator's requests and the records of ``__transaction_state``.

Transcribed from Kafka's message specifications (``clients/src/main/resources/common/message``
and the transaction coordinator's ``TransactionLogKey.json`` / ``TransactionLogValue.json``),
in the notation of :func:`storageworker.kafka.schema.f`.

Versions served are those Kafka 4.x clients send with transaction version 1 (the worker
advertises no ``transaction.version`` feature, so clients do not use KIP-890 part 2):
AddPartitionsToTxn 0-3 (v4+ is broker-to-broker only, Kafka's ``LAST_CLIENT_VERSION`` is 3),
AddOffsetsToTxn 0-4, EndTxn 0-4 (v5 carries the per-transaction epoch bump of transaction
version 2), TxnOffsetCommit 0-4 (v5 likewise). InitProducerId is declared in
:mod:`~storageworker.kafka.messages` (v0-5).
"""

from __future__ import annotations

from typing import Final

from storageworker.kafka.schema import Message, f, message

ADD_PARTITIONS_TO_TXN: Final = message(
    24,
    "AddPartitionsToTxn",
    "0-3",
    "3+",
    request=[
        f("v3_and_below_transactional_id", "string", "0-3"),
        f("v3_and_below_producer_id", "int64", "0-3"),
        f("v3_and_below_producer_epoch", "int16", "0-3"),
        f(
            "v3_and_below_topics",
            "[]",
            "0-3",
            fields=[f("name", "string"), f("partitions", "[]int32")],
        ),
    ],
    response=[
        f("throttle_time_ms", "int32"),
        f(
            "results_by_topic_v3_and_below",
            "[]",
            "0-3",
            fields=[
                f("name", "string"),
                f(
                    "results_by_partition",
                    "[]",
                    fields=[f("partition_index", "int32"), f("partition_error_code", "int16")],
                ),
            ],
        ),
    ],
)

ADD_OFFSETS_TO_TXN: Final = message(
    25,
    "AddOffsetsToTxn",
    "0-4",
    "3+",
    request=[
        f("transactional_id", "string"),
        f("producer_id", "int64"),
        f("producer_epoch", "int16"),
        f("group_id", "string"),
    ],
    response=[f("throttle_time_ms", "int32"), f("error_code", "int16")],
)

END_TXN: Final = message(
    26,
    "EndTxn",
    "0-4",
    "3+",
    request=[
        f("transactional_id", "string"),
        f("producer_id", "int64"),
        f("producer_epoch", "int16"),
        f("committed", "bool"),
    ],
    response=[f("throttle_time_ms", "int32"), f("error_code", "int16")],
)

TXN_OFFSET_COMMIT: Final = message(
    28,
    "TxnOffsetCommit",
    "0-4",
    "3+",
    request=[
        f("transactional_id", "string"),
        f("group_id", "string"),
        f("producer_id", "int64"),
        f("producer_epoch", "int16"),
        f("generation_id", "int32", "3+", default=-1),
        f("member_id", "string", "3+"),
        f("group_instance_id", "string", "3+", nullable="3+"),
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
                        f("committed_leader_epoch", "int32", "2+", default=-1),
                        f("committed_metadata", "string", nullable="0+"),
                    ],
                ),
            ],
        ),
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
                    fields=[f("partition_index", "int32"), f("error_code", "int16")],
                ),
            ],
        ),
    ],
)

TXN_MESSAGES: Final[tuple[Message, ...]] = (
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    TXN_OFFSET_COMMIT,
)

# -- __transaction_state records (Kafka's TransactionLogKey v0 and TransactionLogValue) ------

#: The key: ``int16 version (0)`` then this struct.
TRANSACTION_LOG_KEY: Final = (f("transactional_id", "string"),)

#: The value: ``int16 version`` then this struct; v1 is flexible (tagged fields, written by
#: Kafka for transaction version 2 clients). The worker writes v0, as Kafka does for
#: transaction version 1; it reads both.
TRANSACTION_LOG_VALUE: Final = (
    f("producer_id", "int64"),
    f("previous_producer_id", "int64", "1+", tag=0, default=-1),
    f("next_producer_id", "int64", "1+", tag=1, default=-1),
    f("producer_epoch", "int16"),
    f("next_producer_epoch", "int16", "1+", tag=3, default=-1),
    f("transaction_timeout_ms", "int32"),
    f("transaction_status", "int8"),
    f(
        "transaction_partitions",
        "[]",
        nullable="0+",
        fields=[f("topic", "string"), f("partition_ids", "[]int32")],
    ),
    f("transaction_last_update_timestamp_ms", "int64"),
    f("transaction_start_timestamp_ms", "int64"),
    f("client_transaction_version", "int16", "1+", tag=2, default=0),
)
TRANSACTION_LOG_VALUE_VERSIONS: Final = (0, 1)
